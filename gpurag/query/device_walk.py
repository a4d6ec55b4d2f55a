"""The walk segment of a graph query on a device: what the retriever hands the runtime's
``query_walk`` part and what comes back.

On a GPU the runtime's ``query_walk`` (:mod:`gpurag.backends.query_device`) runs the reset
matrix, personalized PageRank, the candidates, their fusion with the dense and BM25 rankings
and the top-k on the device; only the per-question arrays of :class:`FusedWalk` (``(q, c)``
with ``c`` the candidates, about a hundred, never ``(q, n)``) cross to the host. On the CPU the
part is None and the NumPy stages run (:mod:`gpurag.query.seeds`, :mod:`gpurag.query.walk`,
:mod:`gpurag.query.fusion`); both give the same candidates and scores (tested).

:func:`seed_table` gives the batch's seed entities (for the entity paths) without the reset
matrix, as :func:`gpurag.query.seeds.reset_matrix` finds them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpurag.query.seeds import SeedArrays, SeedHits, SeedTable


@dataclass
class FusedWalk:
    """The walk segment's result for a batch, on the host: the candidates ``cand`` (``(q, c)``
    passage rows, -1 where padded or repeated), their fused ``score`` (head lifted) and
    ``relevance`` (before the head was lifted; float64, ``-inf`` at -1), the ``head`` rows
    (``(q, h)`` or None) and ``best`` (the ``(rows, scores)`` of the best candidates, at the
    depth asked for)."""

    cand: np.ndarray
    score: np.ndarray
    relevance: np.ndarray
    head: np.ndarray | None
    best: tuple[np.ndarray, np.ndarray]


def seed_table(parts: SeedArrays, hits: SeedHits, cfg) -> SeedTable:
    """The seed entities :func:`gpurag.query.seeds.reset_matrix` returns for ``hits``: the
    entity hits within ``entity_margin`` of the question's best (with a positive weight), then
    the named entities that are not among them."""
    seeds = SeedTable.empty()
    if hits.entities is not None:
        es, ei = hits.entities
        keep = (ei >= 0) & (es >= es[:, :1] - cfg.entity_margin)
        w = np.where(keep, np.clip(es, 0, None) ** cfg.sim_power, 0.0)
        w = w * parts.specificity[np.maximum(ei, 0)]
        r, c = np.nonzero(w > 0)
        seeds = seeds.extend(r, ei[r, c], es[r, c], "entity")
    named = hits.named
    if named is not None and cfg.link_weight > 0 and parts.n_ent and len(named.entity):
        q_idx, ents = named.q, named.entity
        new = ~np.isin(q_idx * parts.n_ent + ents, seeds.q * parts.n_ent + seeds.entity)
        seeds = seeds.extend(q_idx[new], ents[new], np.ones(int(new.sum())), "name")
    return seeds
