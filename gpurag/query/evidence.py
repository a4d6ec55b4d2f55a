"""Evidence chains a person can follow: for each returned passage, the best chains from an
entity the question names, through relations and bridge entities, to the passage.

A chain is ``question entity -> (relation, the sentence or triple that states it, its passage
and char span) -> bridge entity -> ... -> passage``. Its links are the moves the retrieval
made: the walk follows relations (entity to entity, each found in one passage) and mentions
(entity to passage and back), and the second hop goes from a first-round passage to the page of
an entity it mentions (:mod:`gpurag.query.second_hop`). Chains are built from what a query
returned (its seeds and ranked passages) and the index tables, never by changing the ranking:
the entities considered are the seeds and those the returned passages mention; entity-to-entity
links are the index's relations among them and the co-mentions inside a returned passage (the
walk's entity -> passage -> entity move, and the second hop's first step); the last link is the
passage's title entity ("page of") or a mention in it.

Each chain scores the product of its links' weights (seed weight, relation or co-mention, the
specificity of each bridge entity, page or mention), found for all entities at once by a
max-product Bellman-Ford of ``MAX_STEPS`` rounds; a passage keeps its ``PER_PASSAGE`` best
chains, always including the best one through a bridge entity when there is one.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpurag.arrays import isin_sorted, unique_sorted
from gpurag.extract.sentences import sentence_spans
from gpurag.once import built_once, once_property
from gpurag.store import layout

MAX_STEPS = 3  # entity-to-entity links in a chain
PER_PASSAGE = 3  # chains kept per passage
MAX_SEEDS = 10
SENTENCE_CACHE = 4096  # passages whose sentence spans one EvidenceData keeps
# Link weights: a relation found in a passage, a co-mention inside one returned passage, the
# passage being the page of the chain's last entity or only mentioning it.
RELATION_W, LABELLED_W, COMENTION_W = 0.8, 1.0, 0.6
RETURNED_W = 1.0  # a relation found in a returned passage
ELSEWHERE_W = 0.7  # ...found in a passage the query did not return
PAGE_W, MENTION_W = 1.0, 0.6
SAME_PASSAGE = "same passage"
PAGE_OF = "page of"
MENTIONED_IN = "mentioned in"


@dataclass
class EvidenceStep:
    """One link of a chain: ``source`` -[relation]-> ``target`` and the text that states it."""

    source: str  # an entity name
    relation: str  # the relation's label, "same passage", "page of" or "mentioned in"
    target: str  # an entity name, or for the last link "#rank doc_id title" of the passage
    target_kind: str  # "entity" or "passage"
    text: str  # the sentence that states the link (or the passage title for "page of")
    chunk_id: str  # where the text is
    doc_id: str
    char_start: int  # in the document
    char_end: int
    rank: int | None = None  # the rank of that passage in the result, if it was returned
    triple: str | None = None  # "head relation tail" for a labelled relation


@dataclass
class EvidenceChain:
    """A chain from a question entity to the passage at ``rank``."""

    rank: int
    chunk_id: str
    doc_id: str
    score: float  # product of the link weights (0 to 1), comparable within a result
    entities: list[str]  # question entity first, then each bridge entity
    steps: list[EvidenceStep] = field(default_factory=list)
    bridge: bool = False  # passes through a bridge entity found in another passage
    types: list[str] = field(default_factory=list)  # of the entities: PERSON, PLACE, ORG,
    # WORK, DATE or "" (gpurag.extract.entity_types)


class EvidenceData:
    """The index arrays chains are read from: mentions by passage, relations by entity,
    title entities, chunk texts and their sentences. Read once per opened index."""

    def __init__(self, retriever: Any) -> None:
        r = retriever
        self.n_ent, self.n_psg = r.n_ent, r.n_psg
        self.names = r.entity_names
        self.specificity = r.specificity
        self.title_entity = r.title_entity
        chunks = r.chunks
        self.chunk_ids = chunks["chunk_id"].astype(str).to_numpy(dtype=object)
        self.doc_ids = chunks["doc_id"].astype(str).to_numpy(dtype=object)
        self.titles = (chunks["title"].fillna("").astype(str).to_numpy(dtype=object)
                       if "title" in chunks else np.full(self.n_psg, "", dtype=object))
        self.texts = chunks["text"].astype(str).to_numpy(dtype=object)
        # sentences(row): chunk-relative (starts, ends) of passage ``row``'s sentences. Cached
        # per instance (bounded, over the texts only: no cycle through self), so a closed and
        # dropped index's arrays go with it.
        self.sentences: Callable[[int], tuple[np.ndarray, np.ndarray]] = functools.lru_cache(
            maxsize=SENTENCE_CACHE)(functools.partial(_sentences_of, self.texts))
        self.starts = chunks["char_start"].to_numpy(np.int64)
        m = r.dir.table(layout.MENTIONS, columns=["entity", "chunk", "start", "end"])
        order = np.lexsort((m["start"].to_numpy(np.int64), m["chunk"].to_numpy(np.int64)))
        self.m_entity = m["entity"].to_numpy(np.int64)[order]
        self.m_start = m["start"].to_numpy(np.int64)[order]
        self.m_end = m["end"].to_numpy(np.int64)[order]
        self.m_ptr = np.searchsorted(m["chunk"].to_numpy(np.int64)[order],
                                     np.arange(self.n_psg + 1))
        rel = r.dir.table(layout.RELATIONS, columns=["head_entity", "relation", "tail_entity",
                                                     "chunk"])
        head = rel["head_entity"].to_numpy(np.int64)
        tail = rel["tail_entity"].to_numpy(np.int64)
        label = rel["relation"].astype(str).to_numpy(dtype=object)
        chunk = rel["chunk"].to_numpy(np.int64)
        # both directions, by source entity
        src, dst = np.r_[head, tail], np.r_[tail, head]
        order = np.argsort(src, kind="stable")
        self.r_src, self.r_dst = src[order], dst[order]
        self.r_label = np.r_[label, label][order]
        self.r_chunk = np.r_[chunk, chunk][order]
        self.r_forward = np.r_[np.ones(len(head), bool), np.zeros(len(head), bool)][order]
        self.r_ptr = np.searchsorted(self.r_src, np.arange(self.n_ent + 1))
        from gpurag.extract.base import COOCCURS

        self.cooccurs = COOCCURS

    @once_property
    def types(self) -> np.ndarray:
        """Each entity's type from name patterns and its page (or "")."""
        from gpurag.extract.entity_types import entity_types

        page = np.full(self.n_ent, "", dtype=object)
        has = np.flatnonzero(self.title_entity >= 0)
        page[self.title_entity[has]] = self.texts[has]
        return entity_types(pd.Series(self.names), pd.Series(page))

    def mentions_of(self, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lo, hi = self.m_ptr[row], self.m_ptr[row + 1]
        return self.m_entity[lo:hi], self.m_start[lo:hi], self.m_end[lo:hi]



def _sentences_of(texts: np.ndarray, row: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunk-relative (starts, ends) of the sentences of ``texts[row]``."""
    _, s, e = sentence_spans([str(texts[row])])
    return s, e


def evidence_data(retriever: Any) -> EvidenceData:
    """The retriever's :class:`EvidenceData`, made on first use."""
    return built_once(retriever, "_evidence_data", lambda: EvidenceData(retriever))


def _seed_weights(seeds: list[Any]) -> dict[int, float]:
    """Entity -> weight: names the question states weigh 1, FAISS seeds their score over the
    best one's (at most ``MAX_SEEDS``)."""
    named = [s for s in seeds if s.via == "name"]
    other = sorted((s for s in seeds if s.via != "name"), key=lambda s: -s.score)
    top = max((s.score for s in other), default=1.0) or 1.0
    out: dict[int, float] = {}
    for s in named:
        out[s.entity_id] = 1.0
    for s in other:
        if len(out) >= MAX_SEEDS:
            break
        out.setdefault(s.entity_id, float(max(s.score, 0.0) / top))
    return out


class _Links:
    """The entity-to-entity links a query's chains may use, as arrays."""

    def __init__(self, src, dst, weight, chunk, label, forward) -> None:
        self.src, self.dst, self.weight = src, dst, weight
        self.chunk, self.label, self.forward = chunk, label, forward


def _row_entities(data: EvidenceData, rows: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct entities each passage of ``rows`` mentions, as one flat array sorted by
    (position in ``rows``, entity): (position, entity, count per position)."""
    from gpurag.query.sparse_rows import csr_rows

    lo = data.m_ptr[rows]
    owner, ents = csr_rows(np.arange(len(rows)), lo, data.m_ptr[rows + 1] - lo, data.m_entity)
    key = unique_sorted(owner * np.int64(data.n_ent + 1) + ents)
    pos, ents = key // (data.n_ent + 1), key % (data.n_ent + 1)
    return pos, ents, np.bincount(pos, minlength=len(rows))


def _links(data: EvidenceData, universe: np.ndarray, rows: np.ndarray) -> _Links:
    """Relations among ``universe`` (entities) and co-mentions within the passages ``rows``."""
    lo, hi = data.r_ptr[universe], data.r_ptr[universe + 1]
    size = hi - lo
    idx = np.repeat(lo, size) + (np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size,
                                                                        size))
    idx = idx[isin_sorted(data.r_dst[idx], universe)]
    returned = isin_sorted(data.r_chunk[idx], rows)
    labelled = data.r_label[idx] != data.cooccurs
    w = np.where(labelled, LABELLED_W, RELATION_W) * np.where(returned, RETURNED_W, ELSEWHERE_W)
    src, dst, chunk = data.r_src[idx], data.r_dst[idx], data.r_chunk[idx]
    label, forward = data.r_label[idx], data.r_forward[idx]
    # co-mentions inside each returned passage (every ordered pair of distinct entities),
    # passage by passage in rank order, pairs in (source, target) order within one
    _, ents, width = _row_entities(data, rows)
    if len(ents):
        sq = width * width
        group = np.repeat(np.arange(len(rows)), sq)
        local = np.arange(int(sq.sum())) - np.repeat(np.cumsum(sq) - sq, sq)
        base = np.repeat(np.cumsum(width) - width, sq)
        i, j = local // width[group], local % width[group]
        keep = i != j
        cs_, cd_ = ents[(base + i)[keep]], ents[(base + j)[keep]]
        src, dst = np.r_[src, cs_], np.r_[dst, cd_]
        chunk = np.r_[chunk, rows[group[keep]]]
        w = np.r_[w, np.full(len(cs_), COMENTION_W)]
        label = np.r_[label, np.full(len(cs_), SAME_PASSAGE, dtype=object)]
        forward = np.r_[forward, np.ones(len(cs_), bool)]
    # the bridge entity's specificity: a name found in many passages explains less
    w = w * (0.5 + 0.5 * data.specificity[dst])
    return _Links(src, dst, w, chunk, label, forward)


def _best_paths(seed_w: dict[int, float], links: _Links, n_ent: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Max-product Bellman-Ford from the seeds over ``links`` for ``MAX_STEPS`` rounds:
    per entity its best chain score and the link that reached it (-1: a seed or unreached)."""
    best = np.zeros(n_ent)
    back = np.full(n_ent, -1, np.int64)
    for e, w in seed_w.items():
        best[e] = max(best[e], w)
    for _ in range(MAX_STEPS):
        cand = best[links.src] * links.weight
        new = best.copy()
        np.maximum.at(new, links.dst, cand)
        improved = new > best + 1e-12
        if not improved.any():
            break
        # the link giving each improved entity its new score (the first such link)
        hit = improved[links.dst] & (cand >= new[links.dst] - 1e-12)
        first = np.full(n_ent, -1, np.int64)
        at = np.flatnonzero(hit)[::-1]
        first[links.dst[at]] = at
        back = np.where(improved, first, back)
        best = new
    return best, back


def _walk_back(entity: int, back: np.ndarray, links: _Links, seed_w: dict[int, float]
               ) -> list[int]:
    """The links (in order) of the best chain that reached ``entity``."""
    path: list[int] = []
    seen = {entity}
    while back[entity] >= 0 and len(path) <= MAX_STEPS:
        link = int(back[entity])
        path.append(link)
        entity = int(links.src[link])
        if entity in seen:
            break
        seen.add(entity)
    return path[::-1]


def _sentence(data: EvidenceData, row: int, spans: list[tuple[int, int]],
              target: list[tuple[int, int]] | None = None) -> tuple[str, int, int]:
    """The sentence of passage ``row`` holding the most of the chunk-relative ``spans``, a
    ``target`` span counting double (so a sentence naming both ends of a link wins, then one
    naming its target), ties to the first; with its document char span."""
    starts, ends = data.sentences(row)
    if not len(starts):
        text = str(data.texts[row])
        return text, int(data.starts[row]), int(data.starts[row]) + len(text)
    hits = np.zeros(len(starts))
    for weight, group in ((1.0, spans), (2.0, target or [])):
        for s, _ in group:
            hits += weight * ((starts <= s) & (s < ends))
    i = int(np.argmax(hits))
    text = str(data.texts[row])[starts[i]:ends[i]].rstrip()
    base = int(data.starts[row])
    return text, base + int(starts[i]), base + int(starts[i]) + len(text)


def _spans(data: EvidenceData, row: int, entity: int) -> list[tuple[int, int]]:
    """Chunk-relative spans of ``entity``'s mentions in passage ``row``."""
    ents, s, e = data.mentions_of(row)
    keep = ents == entity
    return list(zip(s[keep].tolist(), e[keep].tolist(), strict=True))


def result_chains(data: EvidenceData, seeds: list[Any], rows: np.ndarray
                  ) -> list[EvidenceChain]:
    """The chains of one result: ``seeds`` (``SeedEntity``), ``rows`` its passage rows in rank
    order (-1 padded). Ordered by rank, best chain first."""
    rows = np.asarray(rows, np.int64)
    rows = rows[rows >= 0]
    seed_w = _seed_weights(seeds)
    if not seed_w or not len(rows):
        return []
    rank_of = {int(r): i + 1 for i, r in enumerate(rows.tolist())}
    pos, ents, _ = _row_entities(data, rows)
    universe = unique_sorted(np.r_[np.fromiter(seed_w, np.int64), ents])
    links = _links(data, universe, rows)
    best, back = _best_paths(seed_w, links, data.n_ent)
    # each passage's candidate last entities: those it mentions and its title entity
    title = data.title_entity[rows]
    has = np.flatnonzero(title >= 0)
    key = unique_sorted(np.r_[pos, has] * np.int64(data.n_ent + 1) + np.r_[ents, title[has]])
    pos, ents = key // (data.n_ent + 1), key % (data.n_ent + 1)
    reached = best[ents] > 0
    pos, ents = pos[reached], ents[reached]
    is_page = ents == title[pos]
    score = best[ents] * np.where(is_page, PAGE_W, MENTION_W)
    # per passage best first (ties by entity); the PER_PASSAGE best, the last of them
    # replaced by the best chain through a bridge entity when none of them is one
    order = np.lexsort((ents, -score, pos))
    pos, ents, score, is_page = pos[order], ents[order], score[order], is_page[order]
    place = np.arange(len(pos)) - np.searchsorted(pos, pos)
    bridged = back[ents] >= 0
    first_bridge = np.full(len(rows), np.iinfo(np.int64).max)
    np.minimum.at(first_bridge, pos[bridged], place[bridged])
    late = (first_bridge[pos] >= PER_PASSAGE) & (first_bridge[pos] < np.iinfo(np.int64).max)
    keep = np.where(late, (place < PER_PASSAGE - 1) | (place == first_bridge[pos]),
                    place < PER_PASSAGE)
    out: list[EvidenceChain] = []
    for p, e, sc, page in zip(pos[keep].tolist(), ents[keep].tolist(), score[keep].tolist(),
                              is_page[keep].tolist(), strict=True):
        out.append(_chain(data, e, int(rows[p]), rank_of, float(sc), back, links, seed_w,
                          is_page=bool(page)))
    return out


def _chain(data: EvidenceData, last: int, row: int, rank_of: dict[int, int], score: float,
           back: np.ndarray, links: _Links, seed_w: dict[int, float], is_page: bool
           ) -> EvidenceChain:
    path = _walk_back(last, back, links, seed_w)
    entities = [int(links.src[path[0]])] if path else [last]
    steps = []
    bridge = False
    for link in path:
        a, b, c = int(links.src[link]), int(links.dst[link]), int(links.chunk[link])
        text, start, end = _sentence(data, c, _spans(data, c, a), _spans(data, c, b))
        label = str(links.label[link])
        triple = None
        if label not in (data.cooccurs, SAME_PASSAGE):
            h, t = (a, b) if links.forward[link] else (b, a)
            triple = f"{data.names[h]} {label} {data.names[t]}"
        steps.append(EvidenceStep(
            source=str(data.names[a]), relation=label, target=str(data.names[b]),
            target_kind="entity", text=text, chunk_id=str(data.chunk_ids[c]),
            doc_id=str(data.doc_ids[c]), char_start=start, char_end=end,
            rank=rank_of.get(c), triple=triple))
        entities.append(b)
        bridge |= c != row
    rank = rank_of[row]
    label = f"#{rank} {data.doc_ids[row]} {data.titles[row]}".rstrip()
    if is_page:
        base = int(data.starts[row])
        text, start, end = str(data.titles[row]) or str(data.names[last]), base, base
        spans = _spans(data, row, last)
        if spans:
            text, start, end = _sentence(data, row, spans)
        steps.append(EvidenceStep(str(data.names[last]), PAGE_OF, label, "passage", text,
                                  str(data.chunk_ids[row]), str(data.doc_ids[row]), start, end,
                                  rank))
    else:
        text, start, end = _sentence(data, row, _spans(data, row, last))
        steps.append(EvidenceStep(str(data.names[last]), MENTIONED_IN, label, "passage", text,
                                  str(data.chunk_ids[row]), str(data.doc_ids[row]), start, end,
                                  rank))
    return EvidenceChain(rank=rank, chunk_id=str(data.chunk_ids[row]),
                         doc_id=str(data.doc_ids[row]), score=score,
                         entities=[str(data.names[e]) for e in entities], steps=steps,
                         bridge=bridge, types=[str(data.types[e]) for e in entities])


def add_chains(retriever: Any, results: list[Any], rows: np.ndarray) -> None:
    """Fill ``result.chains`` of each graph result (``rows``: ``(q, k)`` passage rows)."""
    data = evidence_data(retriever)
    for result, row in zip(results, rows, strict=True):
        result.chains = result_chains(data, result.seeds, row)


def defer_chains(retriever: Any, results: list[Any], rows: np.ndarray) -> None:
    """Give each graph result its chains on their first read (:mod:`gpurag.query.deferred`):
    what :func:`add_chains` sets, made per result when asked for, its time added to that
    result's ``timings_ms["evidence"]``."""
    from gpurag.query.deferred import Pending

    def make(result: Any, row: np.ndarray, seeds: list[Any]):
        def run() -> None:
            t0 = time.perf_counter()
            result.chains = result_chains(evidence_data(retriever), seeds, row)
            result.timings_ms["evidence"] = (time.perf_counter() - t0) * 1000
        return Pending(run)

    owed = retriever.__dict__.setdefault("_chains_owed", weakref.WeakSet())
    for result, row in zip(results, np.asarray(rows), strict=True):
        result.chains = pending = make(result, row, list(result.seeds))
        owed.add(pending)


def keep_owed_chains(retriever: Any) -> None:
    """Load the :class:`EvidenceData` that the retriever's unread deferred chains need (if
    any are still held), so they can be read after the index's files are released
    (:meth:`gpurag.Index.close`): the only files a chain computation reads."""
    owed = retriever.__dict__.get("_chains_owed")
    if owed and any(p.owed for p in list(owed)):
        evidence_data(retriever)


def format_chains(result: Any, per_passage: int = 2) -> list[str]:
    """Text lines: each passage's best chains, labelled by rank."""
    lines: list[str] = []
    shown: dict[int, int] = {}
    for chain in result.chains:
        if shown.get(chain.rank, 0) >= per_passage:
            continue
        shown[chain.rank] = shown.get(chain.rank, 0) + 1
        kinds = dict(zip(chain.entities, chain.types, strict=False))

        def typed(name: str, kinds: dict[str, str] = kinds) -> str:
            return f"{name} ({kinds[name]})" if kinds.get(name) else name

        parts = [typed(chain.entities[0])]
        for step in chain.steps:
            where = (f"#{step.rank}" if step.rank is not None else step.doc_id)
            quote = " ".join(step.text.split())
            quote = quote if len(quote) <= 110 else quote[:107] + "…"
            what = step.triple or step.relation
            if step.target_kind == "passage":
                parts.append(f"-[{what}: \"{quote}\" {where} [{step.char_start}:"
                             f"{step.char_end}]]-> #{chain.rank}")
            else:
                parts.append(f"-[{what}: \"{quote}\" {where} {step.doc_id} [{step.char_start}:"
                             f"{step.char_end}]]-> {typed(step.target)}")
        lines.append(f"   #{chain.rank} {chain.doc_id} ({chain.score:.2f}"
                     f"{', bridge' if chain.bridge else ''}): " + " ".join(parts))
    return lines


def chains_frame(results: list[Any]) -> pd.DataFrame:
    """One row per chain step of ``results`` (for exports and tests)."""
    rows = [{"question": r.question, "rank": c.rank, "chain": i, "step": j, **vars(s)}
            for r in results for i, c in enumerate(r.chains) for j, s in enumerate(c.steps)]
    return pd.DataFrame(rows)
