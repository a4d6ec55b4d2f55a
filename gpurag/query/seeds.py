"""The seeds stage: a batch's reset (personalization) matrix from its seed sources, as arrays.

Entity and fact seeds (FAISS hits), dense and BM25 passage seeds and the entities the questions
name (:class:`~gpurag.query.linking.LinkedBatch`) become one ``(q, n)`` sparse reset matrix
(:func:`reset_matrix`) and the batch's seed entities (:class:`SeedTable`), which are turned
into result objects only for what is shown. :func:`title_rows` gives the head source "title":
the passages titled by an entity a question names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from gpurag.arrays import isin_sorted, unique_sorted
from gpurag.query.fusion import minmax
from gpurag.query.linking import LinkedBatch
from gpurag.query.results import SeedEntity
from gpurag.query.sparse_rows import summed_csr


@dataclass
class SeedTable:
    """Seed entities of a batch, one entry per (question, entity) in the order they were
    found: ``q`` (question), ``entity``, ``score`` (similarity, 1.0 for a named entity) and
    ``via`` ("entity" or "name")."""

    q: np.ndarray
    entity: np.ndarray
    score: np.ndarray
    via: np.ndarray

    @classmethod
    def empty(cls) -> SeedTable:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32),
                   np.zeros(0, object))

    def extend(self, q: np.ndarray, entity: np.ndarray, score: np.ndarray, via: str
               ) -> SeedTable:
        """These seeds followed by the given ones."""
        return SeedTable(np.concatenate([self.q, np.asarray(q, np.int64)]),
                         np.concatenate([self.entity, np.asarray(entity, np.int64)]),
                         np.concatenate([self.score, np.asarray(score, np.float32)]),
                         np.concatenate([self.via, np.full(len(q), via, object)]))

    def lists(self, n_questions: int, names: np.ndarray, top: int = 10
              ) -> list[list[SeedEntity]]:
        """Per question, its ``top`` seeds by score (ties: in the order found)."""
        order = np.lexsort((np.arange(len(self.q)), -self.score.astype(np.float64), self.q))
        qs = self.q[order]
        pos = np.arange(len(qs)) - np.searchsorted(qs, qs)
        order = order[pos < top]
        out: list[list[SeedEntity]] = [[] for _ in range(n_questions)]
        for qi, e, s, v in zip(self.q[order].tolist(), self.entity[order].tolist(),
                               self.score[order].tolist(), self.via[order].tolist(),
                               strict=True):
            out[qi].append(SeedEntity(e, str(names[e]), s, v))
        return out


Hits = tuple[np.ndarray, np.ndarray]  # (scores, ids), each (q, k), ids -1 padded


@dataclass(frozen=True)
class SeedArrays:
    """What the seeds read from an index: node counts, each entity's specificity (entities
    found in fewer passages weigh more) and the fact -> entities CSR."""

    n_ent: int
    n_psg: int
    specificity: np.ndarray
    fact_indptr: np.ndarray
    fact_entities: np.ndarray


@dataclass(frozen=True)
class SeedHits:
    """One batch's seed sources: FAISS hits of entity names and facts (None where not
    searched), the dense passage hits, BM25 passage hits (or None) and the named entities
    (or None)."""

    entities: Hits | None
    facts: Hits | None
    dense: Hits
    lexical: Hits | None = None
    named: LinkedBatch | None = None


def reset_matrix(parts: SeedArrays, hits: SeedHits, cfg: Any) -> tuple[sp.csr_array, SeedTable]:
    """The ``(q, n)`` personalization matrix and the batch's seed entities.

    Entity and fact hits within ``entity_margin``/``fact_margin`` of the question's best weigh
    ``similarity ** sim_power`` times the specificity (a fact: each of its entities); dense and
    BM25 passages their min-max score; every weight scaled by its source's ``*_weight`` of
    ``cfg``. With ``named`` entities, rows are scaled to sum 1 plus ``link_weight`` shared by
    the named entities; a question with no seed at all gets its top dense passage."""
    q = len(hits.dense[1])
    n = parts.n_ent + parts.n_psg
    rows, cols, vals = [], [], []
    seeds = SeedTable.empty()
    if hits.entities is not None:
        es, ei = hits.entities
        keep = (ei >= 0) & (es >= es[:, :1] - cfg.entity_margin)
        w = np.where(keep, np.clip(es, 0, None) ** cfg.sim_power, 0.0)
        w = w * parts.specificity[np.maximum(ei, 0)]
        r, c = np.nonzero(w > 0)
        rows.append(r)
        cols.append(ei[r, c])
        vals.append(w[r, c] * cfg.entity_weight)
        seeds = seeds.extend(r, ei[r, c], es[r, c], "entity")
    if hits.facts is not None:
        fs, fi = hits.facts
        keep = (fi >= 0) & (fs >= fs[:, :1] - cfg.fact_margin)
        w = np.where(keep, np.clip(fs, 0, None) ** cfg.sim_power, 0.0)
        r, c = np.nonzero(w > 0)
        f = fi[r, c]
        # Every entity of each seed fact (CSR fact -> entities), vectorized.
        lo = parts.fact_indptr[f]
        size = parts.fact_indptr[f + 1] - lo  # not a diff of every fact's pointer
        owner = np.repeat(np.arange(len(f)), size)
        ends = parts.fact_entities[np.repeat(lo, size) + (np.arange(size.sum()) - np.repeat(
            np.cumsum(size) - size, size))]
        rows.append(r[owner])
        cols.append(ends)
        vals.append(w[r, c][owner] * parts.specificity[ends] * cfg.fact_weight)
    ds, di = hits.dense
    if cfg.seed_passages:
        take = min(cfg.seed_passages, di.shape[1])
        ps, pi = ds[:, :take], di[:, :take]
        w = np.where(pi >= 0, minmax(ps), 0.0) * cfg.passage_weight
        r, c = np.nonzero(w > 0)
        rows.append(r)
        cols.append(pi[r, c] + parts.n_ent)
        vals.append(w[r, c])
    if hits.lexical is not None and cfg.lexical_weight > 0:
        ls, li = hits.lexical
        ok = li >= 0
        w = np.where(ok, minmax(np.where(ok, ls, 0.0)), 0.0) * cfg.lexical_weight
        r, c = np.nonzero(w > 0)
        rows.append(r)
        cols.append(li[r, c] + parts.n_ent)
        vals.append(w[r, c])
    reset = summed_csr(np.concatenate(vals) if vals else np.zeros(0),
                       np.concatenate(rows) if rows else np.zeros(0, np.int64),
                       np.concatenate(cols) if cols else np.zeros(0, np.int64), (q, n))
    if hits.named is not None and cfg.link_weight > 0 and parts.n_ent:
        reset, seeds = add_named(reset, hits.named, cfg.link_weight, parts, seeds)
    empty = np.flatnonzero(np.diff(reset.indptr) == 0)
    if len(empty):  # no seed at all: fall back to the dense top passage
        fill = sp.csr_array((np.ones(len(empty)), (empty, di[empty, 0] + parts.n_ent)),
                            shape=(q, n))
        reset = reset + fill
    return reset, seeds


def add_named(reset: sp.csr_array, named: LinkedBatch, link_weight: float, parts: SeedArrays,
              seeds: SeedTable) -> tuple[sp.csr_array, SeedTable]:
    """Rows scaled to sum 1, plus ``link_weight`` shared equally by the entities each
    question names (each share scaled by the entity's specificity); the named entities
    that are not seeds yet join the seeds."""
    if not len(named.entity):
        return reset, seeds
    sums = np.asarray(reset.sum(axis=1)).ravel()
    scale = np.where(sums > 0, 1.0 / np.maximum(sums, 1e-30), 0.0)
    q_idx, ents = named.q, named.entity
    # Each named entity's equal share, scaled by its specificity: a name found in many
    # passages ("English", "Show") says less about where the answer is.
    count = np.bincount(q_idx, minlength=named.n)[q_idx]
    share = link_weight * parts.specificity[ents] / count
    # the named entities that are not similarity seeds (a name named twice, twice)
    new = ~isin_sorted(q_idx * parts.n_ent + ents, seeds.q * parts.n_ent + seeds.entity)
    seeds = seeds.extend(q_idx[new], ents[new], np.ones(int(new.sum())), "name")
    return scaled_plus(reset, scale, q_idx, ents, share), seeds


def scaled_plus(m: sp.csr_array, scale: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                values: np.ndarray) -> sp.csr_array:
    """``diag(scale) @ m`` plus the entries ``(rows, cols, values)`` (repeats added), as a
    canonical CSR array: the sparse product and sum to the bit (``m`` canonical: each entry
    scaled once, then the repeats' sum added; repeats of one position are equal in
    :func:`add_named`, so their order does not matter), without the sparse operations'
    set-up, about a millisecond a call whatever the batch."""
    n = m.shape[1]
    owner = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    scaled = m.data * scale[owner]
    keep = scaled != 0  # the product keeps no zero
    # the entries' repeats summed first, then added to the scaled entry (as the sparse sum)
    extra, at = np.unique(np.asarray(rows, np.int64) * n + np.asarray(cols, np.int64),
                          return_inverse=True)
    extra_data = np.bincount(at, weights=values, minlength=len(extra))
    uniq, inv = np.unique(np.concatenate([owner[keep] * n + m.indices[keep], extra]),
                          return_inverse=True)
    data = np.bincount(inv, weights=np.concatenate([scaled[keep], extra_data]),
                       minlength=len(uniq))
    ok = data != 0
    uniq, data = uniq[ok], data[ok]
    indptr = np.zeros(m.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(uniq // n, minlength=m.shape[0]), out=indptr[1:])
    out = sp.csr_array((data, uniq % n, indptr), shape=m.shape)
    out.has_canonical_format = True
    return out


def title_pages(title_entity: np.ndarray, n_ent: int) -> tuple[np.ndarray, np.ndarray]:
    """Entity -> the passages it titles, as CSR ``(indptr, rows)`` (rows ascending)."""
    has = np.flatnonzero(title_entity >= 0)
    order = has[np.argsort(title_entity[has], kind="stable")]
    indptr = np.zeros(n_ent + 1, np.int64)
    np.cumsum(np.bincount(title_entity[has], minlength=n_ent), out=indptr[1:])
    return indptr, order


def title_rows(named: LinkedBatch, pages: tuple[np.ndarray, np.ndarray],
               dense_rows: np.ndarray) -> np.ndarray:
    """Per question, the passages titled by an entity it names (``pages``:
    :func:`title_pages`), in dense order (``dense_rows``, ``(q, d)``), then the rest by row;
    ``(q, d)`` -1 padded."""
    from gpurag.query.sparse_rows import csr_rows, pack_rows

    q, d = dense_rows.shape
    indptr, rows = pages
    if not len(named.entity):
        return np.full((q, d), -1, np.int64)
    lo = indptr[named.entity]
    owner, page = csr_rows(named.q, lo, indptr[named.entity + 1] - lo, rows)
    span = int(max(rows.max(initial=0), dense_rows.max(initial=0))) + 1
    key = unique_sorted(owner * span + page)
    owner, page = key // span, key % span
    # each (question, page)'s first dense position, d when it is not among the dense rows
    dq, dpos = np.nonzero(dense_rows >= 0)
    uniq, at = np.unique(dq * span + dense_rows[dq, dpos], return_index=True)
    pos = np.full(len(key), d, np.int64)
    if len(uniq):
        where = np.minimum(np.searchsorted(uniq, key), len(uniq) - 1)
        pos = np.where(uniq[where] == key, dpos[at][where], d)
    order = np.lexsort((page, pos, owner))
    return pack_rows(owner[order], page[order], q, d)
