"""Synthetic multi-hop questions from an index's own graph: training data for the GAT reranker
without labels or an LLM.

Four kinds, each built from the rule-based extractor's tables (``chunks``, ``mentions``,
``aliases``) with joins over all passages at once; only the text of the chosen questions is
assembled one by one:

- ``bridge`` (2 gold passages): passage A, titled by entity *a*, mentions an entity *b* that
  titles another passage B (the second hop of :mod:`gpurag.query.second_hop`). The question
  names *a*, carries 2-6 words of A's sentence that lead to *b* ("that Hank Snow moved to")
  and 3-6 words of a sentence of B with every name and number removed ("is the capital of"),
  and never names *b* or B's title: "What is the capital of the city that Hank Snow moved
  to?". Short runs of words, as real questions share only a few words with their pages.
- ``chain`` (3 gold): A -> B -> C, two bridges in a row; the question names only *a*.
- ``chain4`` (4 gold): A -> B -> C -> D, three bridges in a row, nested the same way ("the
  county that the city that the band that X formed in was based in lies in"). Not in the
  default mix (:data:`KINDS`), so the questions ``rerank="auto"`` decides on stay as they were;
  ask for it by weight.

With ``aspects=True`` a bridge (and a chain's step) also goes to the pages about one side of
the entity ("History of Maryland" for Maryland: :func:`gpurag.query.second_hop.aspect_keys`),
as the second hop's bridge pages do; an entity with more than ``max_pages`` of them bridges
to none. Off by default, for the same reason.
- ``comparison`` (2 gold): two pages whose first sentence gives the same kind of thing ("is an
  American film director"), named both: "Are X and Y both American film directors?".
- ``shared`` (2 gold): two passages of different documents that mention the same specific
  entity (one in at most ``5%`` of the documents), each described by a few words of its
  sentence around it: "Did Wolfgang ask about the concert before booked the tickets?". It
  works on corpora without titled pages (chat logs, notes).

Questions that dense retrieval alone already answers (every gold document among its top
``trivial_top``) teach a reranker nothing and are dropped. Generation is seeded and
deterministic; real questions and their gold are never read.

The reranker trains on them (:mod:`gpurag.training.synthetic`: ``prepare_synthetic`` and the
command line) and ``rerank="auto"`` decides on them (:mod:`gpurag.rerank.auto`); both import
this module, which imports neither.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd

from gpurag.errors import ConfigError
from gpurag.query.dense import dense_scores
from gpurag.query.second_hop import bridge_pages, title_keys
from gpurag.resolve.normalize import alias_keys
from gpurag.store import layout

KINDS: dict[str, float] = {"bridge": 0.5, "chain": 0.15, "comparison": 0.15, "shared": 0.2}
HOPS = {"bridge": 2, "chain": 3, "chain4": 4, "comparison": 2, "shared": 2}
POOL_FACTOR = 3  # candidates built per question wanted (the dense filter drops some)
_WORD = re.compile(r"[^\W_][\w'’\-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_LEADING = frozenset(("and", "or", "but", "he", "she", "it", "they", "his", "her", "its", "their",
                      "which", "who", "whom", "whose", "this", "that", "these", "those", "also",
                      "s", "'s"))
_TRAILING = frozenset(("of", "the", "a", "an", "and", "or", "in", "on", "at", "to", "for", "by",
                       "from", "with", "as", "is", "was", "s", "'s"))
_DESCRIPTOR = re.compile(
    r"\b(?:is|was|are|were)\s+(?:an?|the|one of the)\s+"
    r"((?:[\w\-]+\s+){0,3}?[\w\-]+?)"
    r"(?=\s+(?:in|of|on|at|by|for|from|that|which|who|whose|located|based|and|with|to|"
    r"founded|established|written|directed|published|known|born|situated)\b|\s*[,.;:(]|$)")
_NOT_DESCRIPTOR = frozenset(("one", "first", "second", "same", "largest", "most", "best",
                             "only", "main", "former", "current", "oldest", "last", "name"))


@dataclass(frozen=True)
class SyntheticQuestion:
    """One generated question: its gold documents and passage rows in hop order, the names it
    must contain (``named``) and those it must not (``hidden``: the bridges and their pages)."""

    id: str
    question: str
    kind: str
    gold_ids: tuple[str, ...]
    rows: tuple[int, ...]
    named: tuple[str, ...]
    hidden: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """The question as a line of an eval-format ``questions.jsonl``."""
        return {"id": self.id, "question": self.question, "answer": "", "answer_aliases": [],
                "gold_ids": list(self.gold_ids), "type": f"synthetic-{self.kind}",
                "hops": HOPS[self.kind]}


@dataclass
class SyntheticSet:
    """Synthetic questions of one index (``questions`` works with ``train.prepare``)."""

    name: str
    questions: list[SyntheticQuestion]
    stats: dict[str, dict[str, int]] = field(default_factory=dict)  # per kind: built, trivial,
    # kept
    excluded: int = 0  # questions left out afterwards (training.synthetic.prepare_synthetic;
    # each kind's stats count its own as "excluded", not "kept")
    aspects: bool = False  # bridges also went to aspect pages (generate's ``aspects``)

    @property
    def empty_reason(self) -> str | None:
        """Why no question came out, or None."""
        if self.questions:
            return None
        built = sum(s.get("built", 0) for s in self.stats.values())
        if not built:
            why = {"bridge": "no passage mentions an entity that titles another passage (no "
                             "bridge pairs)", "chain": "no two bridges in a row",
                   "chain4": "no three bridges in a row",
                   "comparison": "no two pages share a descriptor",
                   "shared": "no specific entity is shared by two documents"}
            return ", ".join(why[k] for k in self.stats) or "no question kind was asked"
        if self.excluded:  # left out afterwards (prepare_synthetic's exclude)
            trivial = sum(s.get("trivial", 0) for s in self.stats.values())
            dense = (f"; {trivial} of the {built} candidates were answered by dense retrieval "
                     "alone" if trivial else "")
            return (f"all {self.excluded} questions made were left out: their gold documents "
                    "are those of questions kept apart (the ones rerank=auto decides on)"
                    f"{dense}")
        return f"all {built} candidate questions were answered by dense retrieval alone"


# -- the corpus ------------------------------------------------------------------------------
@dataclass
class Corpus:
    """What generation reads of an index: passage texts, titles and documents, each passage's
    title entity, the mentions (with character offsets) and the alias table."""

    text: list[str]
    title: list[str]
    doc: np.ndarray  # (p,) document id of each passage
    title_entity: np.ndarray  # (p,) -1 when none
    mentions: pd.DataFrame  # entity, chunk, start, end, label
    entity_names: np.ndarray  # (e,) object
    aliases: pd.DataFrame  # name, entity_id
    aspects: bool = False  # bridges also go to aspect pages ("History of X" for X)
    _starts: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _span_map: dict[int, np.ndarray] | None = field(default=None, repr=False)
    _alias_map: dict[int, list[str]] | None = field(default=None, repr=False)

    @classmethod
    def from_index(cls, index, aspects: bool = False) -> Corpus:
        r = index.retriever
        if r is None:
            raise ConfigError(f"index {index.path} has no knowledge graph: no synthetic "
                              "questions can be made from it")
        chunks = index.chunks
        ment = r.dir.table(layout.MENTIONS, columns=["entity", "chunk", "start", "end",
                                                     "label"])
        ment = pd.DataFrame({"entity": ment["entity"].to_numpy(np.int64),
                             "chunk": ment["chunk"].to_numpy(np.int64),
                             "start": ment["start"].to_numpy(np.int64),
                             "end": ment["end"].to_numpy(np.int64),
                             "label": ment["label"].astype(str).to_numpy(object)})
        aliases = r.aliases  # with each name's lookup key
        titles = (chunks["title"].fillna("").astype(str).tolist() if "title" in chunks
                  else [""] * len(chunks))
        return cls(chunks["text"].astype(str).tolist(), titles,
                   chunks["doc_id"].astype(str).to_numpy(object),
                   np.asarray(r.title_entity, np.int64), ment,
                   np.asarray(r.entity_names, object),
                   pd.DataFrame({"name": aliases["name"].astype(str).to_numpy(object),
                                 "entity_id": aliases["entity_id"].to_numpy(np.int64),
                                 "key": aliases["key"].to_numpy(object)}),
                   aspects=aspects)

    @property
    def n_psg(self) -> int:
        return len(self.text)

    def sentences(self, row: int) -> np.ndarray:
        """Start offsets of the sentences (or lines) of passage ``row``."""
        if row not in self._starts:
            text = self.text[row]
            self._starts[row] = np.array([0] + [m.end() for m in _SENTENCE_END.finditer(text)],
                                         np.int64)
        return self._starts[row]

    def sentence(self, row: int, offset: int) -> tuple[int, int]:
        """Start and end of the sentence (or line) of passage ``row`` holding ``offset``."""
        starts = self.sentences(row)
        i = int(np.searchsorted(starts, offset, side="right")) - 1
        end = int(starts[i + 1]) if i + 1 < len(starts) else len(self.text[row])
        return int(starts[i]), end

    def spans(self, row: int) -> np.ndarray:
        """``(m, 2)`` character spans of the mentions in passage ``row`` found in its text."""
        if self._span_map is None:
            m = self.mentions[self.mentions["start"] >= 0]
            self._span_map = {int(c): g[["start", "end"]].to_numpy(np.int64)
                              for c, g in m.groupby("chunk", sort=False)}
        got = self._span_map.get(row)
        return np.zeros((0, 2), np.int64) if got is None else got

    def names_of(self, entity: int) -> list[str]:
        """The entity's name and aliases."""
        if self._alias_map is None:
            self._alias_map = self.aliases.groupby("entity_id")["name"].agg(list).to_dict()
        return [str(self.entity_names[entity]), *self._alias_map.get(int(entity), [])]

    def titled(self, max_pages: int) -> pd.DataFrame:
        """``entity, page`` pairs: the pages each entity bridges to, as the second hop's bridge
        pages (:func:`gpurag.query.second_hop.bridge_pages`; aspect pages with ``aspects``)."""
        names = pd.DataFrame({"key": alias_keys(self.aliases),
                              "entity": self.aliases["entity_id"].to_numpy(np.int64)})
        e, p = bridge_pages(self.title_entity, pd.Series(self.title), names,
                            len(self.entity_names), max_pages, aspects=self.aspects)
        return pd.DataFrame({"entity": e, "page": p})

    def title_names(self, row: int) -> list[str]:
        """The title of passage ``row``, without its disambiguation, and its title entity's
        names."""
        title = self.title[row]
        short = re.sub(r"\s*\([^()]*\)\s*$", "", title).split(",")[0].strip()
        out = [title, short]
        if self.title_entity[row] >= 0:
            out += self.names_of(int(self.title_entity[row]))
        return [n for n in dict.fromkeys(out) if n and title_keys(pd.Series([n]))[0]]


# -- text pieces -----------------------------------------------------------------------------
def _remove(text: str, names: list[str]) -> str:
    """``text`` without the ``names`` (whole words; case-insensitive from 4 characters)."""
    for name in sorted({n for n in names if n}, key=len, reverse=True):
        flags = re.IGNORECASE if len(name) >= 4 else 0
        text = re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", " ", text, flags=flags)
    return text


def _cut(text: str, spans: np.ndarray, offset: int) -> str:
    """``text`` (starting at ``offset`` of its passage) with the mention ``spans`` blanked."""
    chars = list(text)
    for s, e in spans:
        s, e = max(int(s) - offset, 0), min(int(e) - offset, len(chars))
        if s < e:
            chars[s:e] = " " * (e - s)
    return "".join(chars)


def _trim(words: list[str], tail: bool = True) -> list[str]:
    """Function words dropped from the start (and from the end with ``tail``)."""
    lo, hi = 0, len(words)
    while lo < hi and words[lo].lower() in _LEADING:
        lo += 1
    while tail and hi > lo and words[hi - 1].lower() in _TRAILING:
        hi -= 1
    return words[lo:hi]


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def mentions_hidden(question: str, hidden: tuple[str, ...] | list[str]) -> bool:
    """Whether ``question`` names any of ``hidden`` (as :func:`_remove` would find it)."""
    return any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", question,
                         re.IGNORECASE if len(n) >= 4 else 0) for n in hidden if n)


def relation_words(c: Corpus, row: int, start: int, end: int, drop: list[str],
                   most: int = 8) -> tuple[list[str], bool]:
    """The words of passage ``row``'s sentence that lead to the mention at ``start:end`` (its
    last ``most`` words before it; or, with fewer than 2, its first words after it), without
    ``drop`` names; and whether they came before the mention."""
    s0, s1 = c.sentence(row, start)
    text = c.text[row]
    drop = [*drop, *(t for d in drop for t in _subject_tokens(d))]
    before = _trim(words(_remove(text[s0:start], drop))[-most:], tail=False)  # "born in"
    if len(before) >= 2:
        return before, True
    after = _trim(words(_remove(text[end:s1], drop))[:max(most, 2)])
    return after, False


def window(w: list[str], rng: np.random.Generator, shortest: int = 3, longest: int = 6
           ) -> list[str]:
    """A random run of ``shortest`` to ``longest`` consecutive words of ``w`` (function words
    trimmed): a question carries a few words of a sentence, not all of it."""
    if len(w) <= shortest:
        return _trim(w)
    size = int(rng.integers(shortest, min(longest, len(w)) + 1))
    at = int(rng.integers(len(w) - size + 1))
    return _trim(w[at:at + size]) or _trim(w)


def about_words(c: Corpus, row: int, drop: list[str], rng: np.random.Generator
                ) -> list[str]:
    """What a question asks of passage ``row``: a few words (:func:`window`) of one of its
    first sentences with every name and number removed, or []."""
    text = c.text[row]
    bounds = [*c.sentences(row).tolist(), len(text)]
    spans = c.spans(row)
    options = []
    for s0, s1 in pairwise(bounds[:5]):
        w = [x for x in words(_remove(_cut(text[s0:s1], spans, s0), drop))
             if not any(ch.isdigit() for ch in x)]
        if len(_trim(w)) >= 3:
            options.append(_trim(w))
    if not options:
        return []
    return window(options[int(rng.integers(len(options)))], rng)


def descriptor(c: Corpus, row: int) -> str:
    """What passage ``row``'s first sentence says its subject is ("American film director"),
    or ""."""
    text = c.text[row]
    s0, s1 = c.sentence(row, 0)
    m = _DESCRIPTOR.search(text[s0:s1])
    if not m:
        return ""
    phrase = " ".join(_trim(m.group(1).split()))
    head = phrase.split()[-1].lower() if phrase else ""
    if not head.isalpha() or head in _NOT_DESCRIPTOR or head in _TRAILING:
        return ""
    return phrase


def display_name(name: str) -> str:
    """A name without its disambiguation ("Brother (Pearl Jam song)" gives "Brother")."""
    return re.sub(r"\s*\([^()]*\)\s*$", "", name).strip() or name


def _subject_tokens(name: str) -> list[str]:
    """The capitalized words of a name ("Hymans" of "Paul Hymans"), dropped from the words
    around it so the question names it once."""
    return [w for w in words(name) if len(w) >= 4 and w[:1].isupper()]


def _plural(phrase: str) -> str:
    if phrase.endswith(("s", "x", "ch", "sh")):
        return phrase + "es" if not phrase.endswith("s") else phrase
    if phrase.endswith("y") and phrase[-2:-1] not in "aeiou":
        return phrase[:-1] + "ies"
    return phrase + "s"


def _pick(rng: np.random.Generator, options: list[str]) -> str:
    return options[int(rng.integers(len(options)))]


# -- candidate tuples (joins over the whole corpus) ------------------------------------------
def bridge_triples(c: Corpus, max_pages: int = 3) -> pd.DataFrame:
    """``a_row, b, b_start, b_end, b_row``: passage A (with a title entity) mentions entity b,
    which titles passage B of another document (B not titled by A's title entity); the first
    mention of b in A."""
    m = c.mentions
    m = m[(m["label"] != "TITLE") & (m["start"] >= 0)]
    tri = m.merge(c.titled(max_pages), on="entity")
    a_row, b_row = tri["chunk"].to_numpy(np.int64), tri["page"].to_numpy(np.int64)
    a, b = c.title_entity[a_row], tri["entity"].to_numpy(np.int64)
    keep = ((a >= 0) & (a != b) & (c.title_entity[b_row] != a) & (c.doc[a_row] != c.doc[b_row]))
    tri = tri[keep].sort_values(["chunk", "page", "start"], kind="stable")
    tri = tri.drop_duplicates(["chunk", "page"])
    return pd.DataFrame({"a_row": tri["chunk"].to_numpy(np.int64),
                         "b": tri["entity"].to_numpy(np.int64),
                         "b_start": tri["start"].to_numpy(np.int64),
                         "b_end": tri["end"].to_numpy(np.int64),
                         "b_row": tri["page"].to_numpy(np.int64)})


def sample(df: pd.DataFrame, n: int, rng: np.random.Generator, per: str | None = None,
           per_max: int = 2) -> pd.DataFrame:
    """At most ``n`` rows of ``df`` in a seeded random order, at most ``per_max`` per value of
    column ``per``."""
    df = df.iloc[rng.permutation(len(df))]
    if per is not None:
        df = df[df.groupby(per, sort=False).cumcount().to_numpy() < per_max]
    return df.head(n)


# -- question builders -----------------------------------------------------------------------
def _bridge_hop(c: Corpus, row: int, start: int, end: int, hidden: list[str], subject: str,
                rng: np.random.Generator) -> str | None:
    """"the city that Hank Snow moved to": what the next page is to passage ``row`` (the
    mention at ``start:end``), with ``subject`` naming the passage (2 to 6 words of it)."""
    rel, before = relation_words(c, row, start, end, [*hidden, subject],
                                 most=int(rng.integers(2, 7)))
    if not rel:
        return None
    rel_s = " ".join(rel)
    return f"that {subject} {rel_s}" if before else f"{rel_s} {subject}"


def bridge_questions(c: Corpus, n: int, rng: np.random.Generator, max_pages: int = 3,
                     per_page: int = 2) -> list[SyntheticQuestion]:
    """Up to ``n`` two-hop bridge questions (see the module docstring), at most ``per_page``
    from one first-hop passage."""
    out = []
    for t in sample(bridge_triples(c, max_pages), n, rng, per="a_row",
                    per_max=per_page).itertuples(index=False):
        a_row, b_row = int(t.a_row), int(t.b_row)
        a_name = display_name(str(c.entity_names[c.title_entity[a_row]]))
        hidden = list(dict.fromkeys([*c.names_of(int(t.b)), *c.title_names(b_row)]))
        q = _bridge_question(c, a_row, int(t.b_start), int(t.b_end), b_row, a_name, hidden, rng)
        if q:
            out.append(SyntheticQuestion("", q, "bridge", _docs(c, a_row, b_row),
                                         (a_row, b_row), (a_name,), tuple(hidden)))
    return out


def _bridge_question(c: Corpus, a_row: int, b_start: int, b_end: int, b_row: int, a_name: str,
                     hidden: list[str], rng: np.random.Generator) -> str | None:
    hop = _bridge_hop(c, a_row, b_start, b_end, hidden, a_name, rng)
    about = about_words(c, b_row, [*hidden, a_name], rng)
    if hop is None or not about:
        return None
    desc = descriptor(c, b_row).split()[-1:] or ["one"]
    return _ask(rng, " ".join(about), f"the {desc[0].lower()} {hop}")


def _ask(rng: np.random.Generator, about: str, target: str) -> str:
    wh = _pick(rng, ["What", "What", "Which", "Who"])
    form = int(rng.integers(3))
    if form == 0:
        return f"{wh} {about} {target}?"
    if form == 1:
        return f"For {target}, {wh.lower()} {about}?"
    return f"{wh} {about}, {target}?"


def chain_questions(c: Corpus, n: int, rng: np.random.Generator, max_pages: int = 3,
                    per_page: int = 2, bridges: int = 2) -> list[SyntheticQuestion]:
    """Up to ``n`` questions along ``bridges`` bridges in a row that name only A's title
    entity: A -> B -> C (two, ``"chain"``, three documents) or A -> B -> C -> D (three,
    ``"chain4"``, four documents); pages two or more hops apart are in different documents
    (neighbours are a bridge pair, whatever their documents). At most
    ``per_page`` // 2 (at least one) from one first-hop passage, one for longer chains."""
    keys = "abcdefgh"[:bridges + 1]  # the pages, A first
    tri = bridge_triples(c, max_pages)
    first = sample(tri, 4 * n, rng, per="a_row", per_max=per_page)

    def step(frm: str, to: str) -> pd.DataFrame:
        return tri.rename(columns={"a_row": f"{frm}_row", "b": to, "b_start": f"{to}_start",
                                   "b_end": f"{to}_end", "b_row": f"{to}_row"})

    ch = first
    for frm, to in pairwise(keys[1:]):
        ch = ch.merge(step(frm, to), on=f"{frm}_row")
    rows = {k: ch[f"{k}_row"].to_numpy(np.int64) for k in keys}
    docs = {k: c.doc[r] for k, r in rows.items()}
    a_ent = c.title_entity[rows["a"]]
    keep = np.ones(len(ch), bool)
    for i, x in enumerate(keys):
        for y in keys[i + 2:]:
            keep &= docs[x] != docs[y]
    for k in keys[2:]:
        keep &= (ch[k].to_numpy(np.int64) != a_ent) & (c.title_entity[rows[k]] != a_ent)
    # The three-document chain draws its relations before the last page's words, the longer
    # ones after (and only while they hold): each kind's random draws as they always were,
    # so a seed gives the questions it gave.
    eager = bridges == 2
    out = []
    for t in sample(ch[keep], n, rng, per="a_row",
                    per_max=max(1, per_page // 2) if eager else 1).itertuples(index=False):
        path = [int(getattr(t, f"{k}_row")) for k in keys]
        a_name = display_name(str(c.entity_names[c.title_entity[path[0]]]))
        hidden = list(dict.fromkeys(
            name for k, row in zip(keys[1:], path[1:], strict=True)
            for name in (*c.names_of(int(getattr(t, k))), *c.title_names(row))))
        hop = _bridge_hop(c, path[0], int(t.b_start), int(t.b_end), hidden, a_name, rng)
        drop = [*hidden, a_name]
        drawn = [_link(c, t, path, keys, i, drop, rng) for i in range(1, bridges)] if eager else []
        about = about_words(c, path[-1], drop, rng)
        if hop is None or not about or not all(rel for rel, _ in drawn):
            continue
        inner = f"the {_head(c, path[1])} {hop}"
        for i in range(1, bridges):
            rel, before = drawn[i - 1] if eager else _link(c, t, path, keys, i, drop, rng)
            if not rel:
                break
            rel_s, nxt = " ".join(rel), _head(c, path[i + 1])
            inner = (f"the {nxt} that {inner} {rel_s}" if before
                     else f"the {nxt} {rel_s} {inner}")
        else:
            out.append(SyntheticQuestion("", _ask(rng, " ".join(about), inner),
                                         "chain" if eager else f"chain{bridges + 1}",
                                         _docs(c, *path), tuple(path), (a_name,),
                                         tuple(hidden)))
    return out


def _link(c: Corpus, t: Any, path: list[int], keys: str, i: int, drop: list[str],
          rng: np.random.Generator) -> tuple[list[str], bool]:
    """The relation words from page ``i`` of a chain (``t``, pages ``path``) to the next."""
    to = keys[i + 1]
    return relation_words(c, path[i], int(getattr(t, f"{to}_start")),
                          int(getattr(t, f"{to}_end")), drop, most=int(rng.integers(2, 7)))


def chain4_questions(c: Corpus, n: int, rng: np.random.Generator, max_pages: int = 3,
                     per_page: int = 2) -> list[SyntheticQuestion]:
    """Up to ``n`` four-hop questions A -> B -> C -> D (:func:`chain_questions` along three
    bridges), at most one from a first-hop passage."""
    return chain_questions(c, n, rng, max_pages, per_page, bridges=3)


def _head(c: Corpus, row: int) -> str:
    """The last word of passage ``row``'s descriptor ("city"), or "one"."""
    return (descriptor(c, row).split()[-1:] or ["one"])[0].lower()


def comparison_questions(c: Corpus, n: int, rng: np.random.Generator
                         ) -> list[SyntheticQuestion]:
    """Up to ``n`` questions that name two pages of the same kind (both gold)."""
    first = np.flatnonzero((c.title_entity >= 0) & ~pd.Series(c.doc).duplicated().to_numpy())
    first = first[rng.permutation(len(first))][: 20 * n + 100]
    desc = [descriptor(c, int(r)) for r in first]
    df = pd.DataFrame({"row": first, "desc": desc})
    df = df[df["desc"] != ""]
    df["head"] = df["desc"].str.split().str[-1].str.lower()
    df["k"] = df.groupby("head", sort=False).cumcount()
    a = df[df["k"] % 2 == 0].assign(k=lambda d: d["k"] + 1)
    pairs = a.merge(df, on=["head", "k"], suffixes=("1", "2"))
    out = []
    for t in sample(pairs, n, rng).itertuples(index=False):
        r1, r2 = int(t.row1), int(t.row2)
        n1 = display_name(str(c.entity_names[c.title_entity[r1]]))
        n2 = display_name(str(c.entity_names[c.title_entity[r2]]))
        if n1.lower() == n2.lower() or c.doc[r1] == c.doc[r2]:
            continue
        s0, s1 = c.sentence(r1, 0)
        text = c.text[r1][s0:s1]
        m = _DESCRIPTOR.search(text)
        rest = _trim(words(_remove(_cut(text, c.spans(r1), s0)[m.end():] if m else "",
                                   [n1, n2]))[:5])
        form = int(rng.integers(3))
        if form == 0:
            q = f"Are {n1} and {n2} both {_plural(str(t.desc1))}?"
        elif form == 1 and rest:
            q = f"Which {t.head} {' '.join(rest)}, {n1} or {n2}?"
        else:
            q = f"What do the {_plural(str(t.head))} {n1} and {n2} have in common?"
        out.append(SyntheticQuestion("", q, "comparison", _docs(c, r1, r2), (r1, r2),
                                     (n1, n2)))
    return out


def common_words(c: Corpus) -> set[str]:
    """Lower-case words of the corpus (a one-word name found in lower case is a word, not a
    name: "Absolutely", "Sounds")."""
    return set(re.findall(r"(?<![\w'’])[a-z][a-z'’\-]*", "\n".join(c.text)))


def shared_pairs(c: Corpus, rng: np.random.Generator, max_docs: int | None = None
                 ) -> pd.DataFrame:
    """``e, row1, start1, end1, row2, start2, end2``: two passages of different documents that
    mention entity e (its first mention in each), e in at most ``max_docs`` documents
    (default 5% of them, 3 to 50), a name rather than a word, titling neither passage; each
    entity's documents in a seeded order, every two consecutive ones a pair."""
    n_docs = len(pd.unique(c.doc))
    max_docs = max_docs or int(min(50, max(3, round(0.05 * n_docs))))
    m = c.mentions
    m = m[(m["label"] != "TITLE") & (m["start"] >= 0)].sort_values(["entity", "chunk", "start"],
                                                                    kind="stable")
    m = m.drop_duplicates(["entity", "chunk"])
    m = m.assign(doc=c.doc[m["chunk"].to_numpy(np.int64)])
    m = m.drop_duplicates(["entity", "doc"])
    size = m.groupby("entity")["doc"].transform("size").to_numpy()
    m = m[(size >= 2) & (size <= max_docs)]
    m = m[c.title_entity[m["chunk"].to_numpy(np.int64)] != m["entity"].to_numpy(np.int64)]
    names = pd.Series(c.entity_names[m["entity"].to_numpy(np.int64)]).astype(str)
    lower = common_words(c)
    word = names.str.lower().isin(lower).to_numpy() & ~names.str.contains(r"\s").to_numpy()
    m = m[~word & (names.str.len().to_numpy() >= 3)]
    m = m.iloc[rng.permutation(len(m))].sort_values("entity", kind="stable")
    m = m.assign(k=m.groupby("entity", sort=False).cumcount())
    pairs = m.assign(k=m["k"] + 1).merge(m, on=["entity", "k"], suffixes=("1", "2"))
    return pd.DataFrame({"e": pairs["entity"], "row1": pairs["chunk1"],
                         "start1": pairs["start1"], "end1": pairs["end1"],
                         "row2": pairs["chunk2"], "start2": pairs["start2"],
                         "end2": pairs["end2"]}).astype(np.int64)


def shared_questions(c: Corpus, n: int, rng: np.random.Generator) -> list[SyntheticQuestion]:
    """Up to ``n`` questions about two passages that mention one specific entity."""
    out = []
    for t in sample(shared_pairs(c, rng), n, rng, per="e", per_max=3).itertuples(index=False):
        e = str(c.entity_names[t.e])
        drop = c.names_of(int(t.e))
        parts = []
        for row, s, end in ((t.row1, t.start1, t.end1), (t.row2, t.start2, t.end2)):
            s0, s1 = c.sentence(int(row), int(s))
            text = c.text[int(row)]
            piece = _remove(text[s0:int(s)] + " " + text[int(end):s1], drop)
            parts.append(" ".join(window(words(piece), rng, 3, 7)))
        if not all(len(p.split()) >= 2 for p in parts):
            continue
        form = int(rng.integers(3))
        if form == 0:
            q = f"Did {e} {parts[0]} before {parts[1]}?"
        elif form == 1:
            q = f"What did {e} say about {parts[0]} and about {parts[1]}?"
        else:
            q = f"When {e} {parts[0]}, what {parts[1]}?"
        out.append(SyntheticQuestion("", q, "shared", _docs(c, int(t.row1), int(t.row2)),
                                     (int(t.row1), int(t.row2)), (e,)))
    return out


def _docs(c: Corpus, *rows: int) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(c.doc[r]) for r in rows))


BUILDERS = {"bridge": bridge_questions, "chain": chain_questions,
            "comparison": comparison_questions, "shared": shared_questions,
            "chain4": chain4_questions}  # new kinds last: each kind's seed is its place here


# -- the whole set ---------------------------------------------------------------------------
def trivial(index, questions: list[SyntheticQuestion], top: int) -> np.ndarray:
    """Per question: whether dense retrieval alone ranks every gold document among its first
    ``top`` documents."""
    if not questions or top <= 0:
        return np.zeros(len(questions), bool)
    qvecs = index.embedder.encode([q.question for q in questions], batch_size=64)
    _, rows = dense_scores(index.passage_search, qvecs, 4 * top)
    docs = index.chunks["doc_id"].astype(str).to_numpy(object)
    out = np.zeros(len(questions), bool)
    for i, q in enumerate(questions):
        seen = list(dict.fromkeys(docs[r] for r in rows[i] if r >= 0))[:top]
        out[i] = set(q.gold_ids) <= set(seen)
    return out


def generate(index, n: int, seed: int = 0, kinds: dict[str, float] | None = None,
             trivial_top: int = 2, max_pages: int = 3, per_page: int = 2,
             name: str | None = None, aspects: bool = False) -> SyntheticSet:
    """Up to ``n`` synthetic questions of an opened index, ``kinds`` mixed by weight (a kind
    short of questions leaves its place to the others), none answered by dense retrieval alone
    in its top ``trivial_top`` documents (0: keep all). Bridges: an entity titling more than
    ``max_pages`` passages names a category and bridges nowhere; at most ``per_page`` bridge
    questions start from one passage; with ``aspects`` bridges also go to aspect pages. Same
    index and seed, same questions."""
    if n < 1:
        raise ConfigError(f"synthetic questions wanted must be at least 1, not {n}")
    kinds = dict(KINDS if kinds is None else kinds)
    bad = set(kinds) - set(BUILDERS)
    if bad:
        raise ConfigError(f"unknown synthetic question kinds {sorted(bad)}: use "
                          f"{', '.join(BUILDERS)}")
    c = Corpus.from_index(index, aspects=aspects)
    total = sum(w for w in kinds.values() if w > 0) or 1.0
    quota = {k: int(np.floor(n * w / total)) for k, w in kinds.items() if w > 0}
    pools: dict[str, list[SyntheticQuestion]] = {}
    stats: dict[str, dict[str, int]] = {}
    for i, kind in enumerate(BUILDERS):
        if kind not in quota:
            continue
        rng = np.random.default_rng([seed, i])
        args = (max_pages, per_page) if kind in ("bridge", "chain", "chain4") else ()
        built = BUILDERS[kind](c, POOL_FACTOR * max(quota[kind], n // 4, 1), rng, *args)
        seen: set[str] = set()
        pool = []
        for q in built:
            ok = (q.question not in seen and all(x.lower() in q.question.lower() for x in q.named)
                  and not mentions_hidden(q.question, q.hidden))
            if ok:
                seen.add(q.question)
                pool.append(q)
        pools[kind] = pool
        stats[kind] = {"built": len(pool)}
    every = [q for pool in pools.values() for q in pool]
    drop = trivial(index, every, trivial_top)
    pos = 0
    for kind, pool in pools.items():
        flags = drop[pos:pos + len(pool)]
        pos += len(pool)
        stats[kind]["trivial"] = int(flags.sum())
        pools[kind] = [q for q, d in zip(pool, flags, strict=True) if not d]
    chosen = {k: pool[:quota[k]] for k, pool in pools.items()}
    rest = [q for k, pool in pools.items() for q in pool[quota[k]:]]
    short = n - sum(len(v) for v in chosen.values())
    if short > 0 and rest:  # fill from the kinds with questions to spare, mixed
        for j in np.random.default_rng([seed, 99]).permutation(len(rest))[:short]:
            chosen[rest[j].kind].append(rest[j])
    out = []
    for kind in pools:
        stats[kind]["kept"] = len(chosen[kind])
        out += chosen[kind]
    prefix = f"syn{seed}"
    out = [SyntheticQuestion(f"{prefix}-{i:05d}", q.question, q.kind, q.gold_ids, q.rows,
                             q.named, q.hidden) for i, q in enumerate(out)]
    return SyntheticSet(name or f"synthetic:{index.path.name}", out, stats, aspects=aspects)


__all__ = ["BUILDERS", "HOPS", "KINDS", "Corpus", "SyntheticQuestion", "SyntheticSet",
           "bridge_triples", "chain4_questions", "generate", "trivial"]
