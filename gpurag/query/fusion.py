"""Fusion and the head of the list: array operations over a batch's candidate passages.

Every function takes ``(q, ·)`` arrays of passage rows (-1 padded) and scores and returns
arrays; none reads an index. The walk's candidates (:mod:`gpurag.query.walk`) are ranked here,
the head sources (dense, BM25, PPR, titles) fused by reciprocal rank and lifted to the top.
"""

from __future__ import annotations

import numpy as np


def minmax(x: np.ndarray, axis: int = 1) -> np.ndarray:
    lo = x.min(axis=axis, keepdims=True)
    hi = x.max(axis=axis, keepdims=True)
    return (x - lo) / np.maximum(hi - lo, 1e-9)


def rrf_order(*rankings: np.ndarray, n: int, c: float = 60.0) -> np.ndarray:
    """Rows fused by reciprocal rank (each ``(q, d)`` of row ids in ``[0, n)``, -1 padded),
    best first (ties: lower row first), -1 padded to the widest ranking. Works on the rows the
    rankings name, never a ``(q, n)`` array."""
    q = rankings[0].shape[0]
    depth = max(r.shape[1] for r in rankings)
    qs = np.concatenate([np.broadcast_to(np.arange(q)[:, None], r.shape)[r >= 0]
                         for r in rankings])
    ids = np.concatenate([r[r >= 0] for r in rankings])
    gain = np.concatenate([np.broadcast_to(1.0 / (c + 1.0 + np.arange(r.shape[1])),
                                           r.shape)[r >= 0] for r in rankings])
    key = qs * (n + 1) + ids
    uniq, inv = np.unique(key, return_inverse=True)
    score = np.zeros(len(uniq))
    np.add.at(score, inv, gain)  # in ranking order, as a dense accumulation would
    uq, urow = uniq // (n + 1), uniq % (n + 1)
    order = np.lexsort((urow, -score, uq))
    uq, urow = uq[order], urow[order]
    first = np.searchsorted(uq, np.arange(q))
    pos = np.arange(len(uq)) - first[uq]
    out = np.full((q, depth), -1, np.int64)
    keep = pos < depth
    out[uq[keep], pos[keep]] = urow[keep]
    return out


def union_head(rankings: list[np.ndarray], ppr: np.ndarray, per_source: int, n: int
               ) -> np.ndarray:
    """The first ``per_source`` rows of each ranking (``(q, d)``, -1 padded), each once, in
    the order of the reciprocal-rank fusion of the rankings and ``ppr``: ``(q, h)``, -1
    padded."""
    fused = rrf_order(*rankings, ppr, n=n)
    tops = np.concatenate([r[:, :per_source] for r in rankings], axis=1)
    chosen = (fused[:, :, None] == tops[:, None, :]).any(axis=2) & (fused >= 0)
    order = np.argsort(~chosen, axis=1, kind="stable")[:, :tops.shape[1]]
    rows = np.take_along_axis(fused, order, axis=1)
    return np.where(np.take_along_axis(chosen, order, axis=1), rows, -1)


def lift_head(cand: np.ndarray, score: np.ndarray, head_rows: np.ndarray, head: int) -> None:
    """Lift ``head_rows`` (q, <= head) above every other candidate, in their order (in place);
    the rows are among the candidates."""
    lift = score.max(axis=1, keepdims=True) + 1.0 + (head - np.arange(head_rows.shape[1]))
    match = (cand[:, :, None] == head_rows[:, None, :]) & (head_rows[:, None, :] >= 0)
    hit = match.any(axis=2)
    score[hit] = np.take_along_axis(np.broadcast_to(lift, head_rows.shape),
                                    match.argmax(axis=2), axis=1)[hit]


def best_candidates(cand: np.ndarray, score: np.ndarray, k: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best candidates per row by score (ties: lower passage row first)."""
    order = np.lexsort((np.where(cand >= 0, cand, np.iinfo(np.int64).max), -score), axis=-1)
    order = order[:, :k]
    rows = np.take_along_axis(cand, order, axis=1)
    scores = np.take_along_axis(score, order, axis=1)
    return np.where(np.isfinite(scores), rows, -1), scores


def shown_scores(rows: np.ndarray, cand: np.ndarray, relevance: np.ndarray) -> np.ndarray:
    """The score each ranked row (``(q, k)``, -1 padded) shows: the best relevance from the
    walk at its rank or below (``relevance`` of the candidates ``cand``: PPR mass over the
    question's best passage's, plus the dense blend; 0 for a row the walk did not rank), so
    scores never rise down the list and a cut at a score keeps every row the walk rated that
    high. The order itself comes from the head, the fusions and any reranker; the internal
    fusion scores (1e6 for a head row) are not shown."""
    match = (rows[:, :, None] == cand[:, None, :]) & (rows[:, :, None] >= 0)
    found = np.take_along_axis(np.where(np.isfinite(relevance), relevance, 0.0),
                               match.argmax(axis=2), axis=1)
    value = np.where(match.any(axis=2), np.maximum(found, 0.0), 0.0)
    best_below = np.maximum.accumulate(value[:, ::-1], axis=1)[:, ::-1]
    return np.where(rows >= 0, best_below, 0.0)


def head_rows(rankings: dict[str, np.ndarray], ppr: np.ndarray, *, sources: list[str],
              mode: str, head: int, n: int) -> np.ndarray:
    """Passage rows for the head of the list, ``(q, h)`` -1 padded, best first.

    ``rankings``: each available head source's ranking (``"dense"``, ``"bm25"``, ``"title"``,
    ``(q, d)`` rows); ``ppr``: the walk's ranking of the candidates, used for the source
    ``"ppr"`` and by ``mode="union"``. ``mode`` "fused": the first ``head`` rows of the first
    source, or of the reciprocal-rank fusion of ``sources``. "union": the first ``head`` rows
    of each source, in the order of that fusion with the PPR ranking added, so a passage that
    one source ranks first keeps a place when the sources disagree (1 to ``head`` x sources
    rows)."""
    chosen = []
    for source in sources:
        if source == "ppr":
            chosen.append(ppr)
        elif source in rankings:
            chosen.append(rankings[source])
    if mode == "union" and len(chosen) > 1:
        return union_head(chosen, ppr, head, n)
    fused = chosen[0] if len(chosen) == 1 else rrf_order(*chosen, n=n)
    return fused[:, :head]
