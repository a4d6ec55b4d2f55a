"""Global questions without an LLM: communities ranked by relevance to the question, each with
its key entities, its most central passages and an extractive summary.

The approach of LazyGraphRAG: nothing is summarized at index time; at query time the
communities of one Leiden level are ranked by the share of the question's *soft mass* that falls
in them. Each passage gets ``exp(cos(question, passage) / temperature)`` (normalized over the
corpus) and splits it over the communities of the entities it mentions, in proportion to how many
of each community's members it names; each entity name gets the same over the entities, which
goes to its community; a community scores the mean of the two shares. A specific question
concentrates its mass on a few passages and names, so on their communities; a corpus-wide one
("what are the main themes?") spreads it, and the communities that cover most of the corpus
come first. The summary is the community's
sentences (the index's facts: sentences or triples naming two or more entities) closest to the
community's question-weighted centroid, at most one per passage.

Everything is a few sparse products over arrays read once per level
(:class:`CommunityView`); an LLM, when configured, is spent only on the top communities
(:func:`gpurag.query.generate.global_answers`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from gpurag.arrays import isin_sorted
from gpurag.errors import ConfigError
from gpurag.once import built_once, once_property
from gpurag.store import layout

TEMPERATURE = 0.05  # of the soft mass, in cosine units
TOP_COMMUNITIES = 5
KEY_ENTITIES = 6
CENTRAL_PASSAGES = 3
SUMMARY_SENTENCES = 3


@dataclass
class Sentence:
    """One sentence (or triple) quoted from a passage, with where it stands in its document."""

    text: str
    chunk_id: str
    doc_id: str
    char_start: int  # in the document; -1 when the text is a triple not found verbatim
    char_end: int


@dataclass
class CommunityHit:
    """One community of a global answer: how relevant it is and what it holds."""

    rank: int
    level: int
    community: int
    score: float  # share of the question's soft mass in this community (0 to 1; see rank)
    n_entities: int
    n_passages: int
    entities: list[str]
    passages: list[str]  # chunk ids, most central first
    documents: list[str]  # their document ids
    summary: list[Sentence] = field(default_factory=list)
    report: str | None = None  # the LLM report, when one was written


class CommunityView:
    """The arrays of one community level: membership, passage -> community shares, facts."""

    def __init__(self, index: Any, level: int) -> None:
        retriever = index.retriever
        if retriever is None:
            raise ConfigError(f"index {index.path} has no knowledge graph, so no communities: "
                              "--mode global needs an index built with the graph stage on")
        comm = index.dir.table(layout.COMMUNITIES, columns=["node", "level", "community"])
        levels = sorted(int(x) for x in comm["level"].unique())
        if level not in levels:
            raise ConfigError(f"index {index.path} has no community level {level} (levels: "
                              f"{', '.join(map(str, levels)) or 'none'})")
        comm = comm[comm["level"] == level]
        self.level = level
        self.n_ent, self.n_psg = retriever.n_ent, retriever.n_psg
        codes, self.community_ids = pd.factorize(comm["community"].to_numpy(np.int64), sort=True)
        n_comm = len(self.community_ids)
        self.member = sp.csr_array((np.ones(len(comm)), (comm["node"].to_numpy(np.int64), codes)),
                                   shape=(self.n_ent, n_comm))
        mentions = index.dir.table(layout.MENTIONS, columns=["entity", "chunk"])
        ment = sp.csr_array((np.ones(len(mentions)), (mentions["chunk"].to_numpy(np.int64),
                                                      mentions["entity"].to_numpy(np.int64))),
                            shape=(self.n_psg, self.n_ent))
        ment.data[:] = 1.0  # one count per (passage, entity)
        ment.sum_duplicates()
        ment.data[:] = 1.0
        self.mentions = ment
        counts = sp.csr_array(ment @ self.member)  # (p, c): members each passage names
        self.counts = counts
        rows = np.asarray(counts.sum(axis=1)).ravel()
        self.share = sp.csr_array(sp.diags_array(1.0 / np.maximum(rows, 1e-30)) @ counts)
        self.size = np.diff(self.member.tocsc().indptr)
        self.passages_in = np.diff(counts.tocsc().indptr)
        self.entity_names = retriever.entity_names
        self.entity_passages = retriever.entities["n_passages"].to_numpy(np.float64)
        chunks = index.chunks
        self.chunk_ids = chunks["chunk_id"].to_numpy(dtype=object)
        self.doc_ids = chunks["doc_id"].astype(str).to_numpy(dtype=object)
        self.texts = chunks["text"].astype(str).to_numpy(dtype=object)
        self.starts = chunks["char_start"].to_numpy(np.int64)
        self.passage_vecs = index.passage_vectors()
        facts = index.dir.table(layout.FACTS, columns=["chunk", "text"])
        self.fact_chunk = facts["chunk"].to_numpy(np.int64)
        self.fact_text = facts["text"].astype(str).to_numpy(dtype=object)
        self._fact_index = retriever.fact_index
        self._retriever = retriever

    @once_property
    def fact_vecs(self) -> np.ndarray:
        from gpurag.vectors.codec import decode_all

        if not len(self.fact_chunk):
            return np.zeros((0, self.passage_vecs.shape[1]), np.float32)
        return decode_all(self._fact_index)

    def soft_mass(self, qvecs: np.ndarray, temperature: float = TEMPERATURE) -> np.ndarray:
        """``(q, p)`` each passage's share of the question's mass (rows sum to 1)."""
        sim = qvecs.astype(np.float32) @ self.passage_vecs.T
        x = np.exp((sim - sim.max(axis=1, keepdims=True)) / temperature)
        return x / x.sum(axis=1, keepdims=True)

    @once_property
    def entity_vecs(self) -> np.ndarray:
        return self._retriever.entity_vectors()

    def rank(self, mass: np.ndarray, qvecs: np.ndarray,
             temperature: float = TEMPERATURE) -> np.ndarray:
        """``(q, c)`` community scores: the mean of the passage mass each community receives
        and the soft mass of its members' names (``exp(cos / temperature)`` over the entities,
        normalized), so a question naming a member's name lifts its community too."""
        passage = np.asarray(self.share.T @ mass.T).T
        sim = qvecs.astype(np.float32) @ self.entity_vecs.T
        x = np.exp((sim - sim.max(axis=1, keepdims=True)) / temperature)
        names = np.asarray(self.member.T @ (x / x.sum(axis=1, keepdims=True)).T).T
        return 0.5 * (passage + names)

    def hits(self, qvecs: np.ndarray, top: int = TOP_COMMUNITIES, *,
             entities: int = KEY_ENTITIES, passages: int = CENTRAL_PASSAGES,
             sentences: int = SUMMARY_SENTENCES) -> tuple[list[list[CommunityHit]], np.ndarray]:
        """Per question, its ``top`` communities (best first), and the ``(q, p)`` soft mass."""
        mass = self.soft_mass(qvecs)
        scores = self.rank(mass, qvecs)
        n_comm = scores.shape[1]
        # Best first; ties (no relevance anywhere) go to the larger community.
        order = np.lexsort((-np.broadcast_to(self.size, scores.shape), -scores), axis=-1)
        order = order[:, :min(top, n_comm)]
        entity_mass = np.asarray(self.mentions.T @ mass.T).T  # (q, e)
        member_csc = self.member.tocsc()
        counts_csc = self.counts.tocsc()
        out: list[list[CommunityHit]] = []
        for qi in range(len(qvecs)):
            row = []
            for rank, c in enumerate(order[qi].tolist(), start=1):
                members = member_csc.indices[member_csc.indptr[c]:member_csc.indptr[c + 1]]
                key = members[np.lexsort((members, -self.entity_passages[members],
                                          -entity_mass[qi, members]))][:entities]
                prow = counts_csc.indices[counts_csc.indptr[c]:counts_csc.indptr[c + 1]]
                cover = counts_csc.data[counts_csc.indptr[c]:counts_csc.indptr[c + 1]]
                central = prow[np.lexsort((prow, -mass[qi, prow] * cover))][:passages]
                row.append(CommunityHit(
                    rank=rank, level=self.level, community=int(self.community_ids[c]),
                    score=float(scores[qi, c]), n_entities=len(members), n_passages=len(prow),
                    entities=[str(self.entity_names[e]) for e in key],
                    passages=[str(self.chunk_ids[p]) for p in central],
                    documents=[str(self.doc_ids[p]) for p in central],
                    summary=self.summary(prow, cover * mass[qi, prow], sentences)))
            out.append(row)
        return out, mass

    def summary(self, rows: np.ndarray, weight: np.ndarray, n: int) -> list[Sentence]:
        """The ``n`` facts of passages ``rows`` closest to their ``weight``-ed centroid, one
        per passage, in the order of their passages' weight; the passages' first sentence
        where they hold no facts."""
        if not len(rows) or n <= 0:
            return []
        centroid = (weight[:, None] * self.passage_vecs[rows]).sum(axis=0)
        centroid /= max(float(np.linalg.norm(centroid)), 1e-12)
        facts = np.flatnonzero(isin_sorted(self.fact_chunk, rows))
        picked: list[int] = []
        if len(facts):
            sim = self.fact_vecs[facts] @ centroid
            order = facts[np.argsort(-sim, kind="stable")]
            _, first = np.unique(self.fact_chunk[order], return_index=True)  # one per passage
            picked = order[np.sort(first)][:n].tolist()
        out = [self._sentence(int(self.fact_chunk[f]), str(self.fact_text[f])) for f in picked]
        if not out:
            for p in rows[np.argsort(-weight, kind="stable")][:n].tolist():
                text = str(self.texts[p]).strip()
                end = min((i + 1 for i in (text.find(". "), text.find(".\n")) if i >= 0),
                          default=len(text))
                out.append(self._sentence(p, text[:end]))
        return out

    def _sentence(self, row: int, text: str) -> Sentence:
        at = str(self.texts[row]).find(text)
        start = int(self.starts[row]) + at if at >= 0 else -1
        return Sentence(text=text, chunk_id=str(self.chunk_ids[row]),
                        doc_id=str(self.doc_ids[row]), char_start=start,
                        char_end=start + len(text) if at >= 0 else -1)


def community_view(index: Any, level: int) -> CommunityView:
    """The index's :class:`CommunityView` of ``level``, made once per opened index."""
    # one view per level the index holds (CommunityView refuses any other): bounded
    views = built_once(index, "_community_views", dict)
    return built_once(index, level, lambda: CommunityView(index, level), store=views)


def passage_rows(view: CommunityView, hits: list[CommunityHit], mass: np.ndarray, k: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The passages a global result lists: the central passages of its communities in
    community order, each once, at most ``k``: (rows, their soft mass)."""
    index_of = {c: i for i, c in enumerate(view.chunk_ids.tolist())}
    rows = list(dict.fromkeys(index_of[c] for h in hits for c in h.passages))[:k]
    rows_arr = np.asarray(rows, np.int64)
    return rows_arr, mass[rows_arr] if len(rows_arr) else np.zeros(0)


def format_communities(result: Any) -> str:
    """The communities of a global result as text lines (for ``gpurag query``)."""
    rank_of = {p.chunk_id: p for p in result.passages}
    lines = ["   communities (most relevant to the question first):"]
    for h in result.communities:
        lines.append(f"   C{h.rank}. community {h.community} (level {h.level})  share "
                     f"{h.score:.3f}  {h.n_entities} entities, {h.n_passages} passages")
        lines.append("       entities: " + ", ".join(h.entities))
        shown = [f"#{rank_of[c].rank} {rank_of[c].doc_id} {rank_of[c].title}".rstrip()
                 if c in rank_of else d for c, d in zip(h.passages, h.documents, strict=True)]
        lines.append("       passages: " + "; ".join(shown))
        for s in h.summary:
            span = f" [{s.char_start}:{s.char_end}]" if s.char_start >= 0 else ""
            lines.append(f"       - {' '.join(s.text.split())}  ({s.doc_id}{span})")
        if h.report:
            lines.append("       report: " + " ".join(h.report.split())[:300])
    return "\n".join(lines)
