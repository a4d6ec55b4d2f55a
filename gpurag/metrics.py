"""Retrieval metrics from the ranks of gold passages: the eval tables, the training score and
the ``rerank="auto"`` decision read them. Imports nothing of gpurag's (every layer may)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def gold_ranks(ranked_ids: Sequence[str], gold_ids: Sequence[str]) -> list[int | None]:
    """1-based rank of each gold id in ``ranked_ids`` (duplicates collapsed), None if absent."""
    first: dict[str, int] = {}
    for doc in ranked_ids:
        if doc not in first:
            first[doc] = len(first) + 1
    return [first.get(g) for g in gold_ids]


def _as_matrix(ranks: Sequence[Sequence[int | None]]) -> np.ndarray:
    width = max((len(r) for r in ranks), default=0)
    out = np.full((len(ranks), max(width, 1)), np.nan)
    for i, row in enumerate(ranks):
        out[i, : len(row)] = [np.inf if r is None else r for r in row]
    return out


def recall_per_question(ranks: Sequence[Sequence[int | None]], k: int) -> np.ndarray:
    """Per question, the share of its gold passages ranked in the top ``k`` (0 without gold)."""
    m = _as_matrix(ranks)
    valid = ~np.isnan(m)
    hit = (m <= k) & valid
    return hit.sum(axis=1) / np.maximum(valid.sum(axis=1), 1)


def all_gold_per_question(ranks: Sequence[Sequence[int | None]], k: int) -> np.ndarray:
    """Per question, 1.0 when every gold passage is in the top ``k`` (so without gold), else
    0.0."""
    m = _as_matrix(ranks)
    valid = ~np.isnan(m)
    return np.where(valid, m <= k, True).all(axis=1).astype(np.float64)


def recall_at(ranks: Sequence[Sequence[int | None]], k: int) -> float:
    """Mean over questions of the share of gold passages ranked in the top ``k``."""
    return float(recall_per_question(ranks, k).mean()) if len(ranks) else 0.0


def all_gold_at(ranks: Sequence[Sequence[int | None]], k: int) -> float:
    """Share of questions with every gold passage in the top ``k``."""
    return float(all_gold_per_question(ranks, k).mean()) if len(ranks) else 0.0


def mrr(ranks: Sequence[Sequence[int | None]]) -> float:
    """Mean reciprocal rank of the first gold passage found."""
    m = _as_matrix(ranks)
    best = np.nanmin(np.where(np.isnan(m), np.inf, m), axis=1) if len(m) else np.array([])
    return float(np.where(np.isfinite(best), 1.0 / best, 0.0).mean()) if len(m) else 0.0


def summarize(ranks: Sequence[Sequence[int | None]]) -> dict[str, float]:
    """The standard retrieval table row."""
    return {
        "recall@2": recall_at(ranks, 2),
        "recall@5": recall_at(ranks, 5),
        "all_gold@8": all_gold_at(ranks, 8),
        "mrr": mrr(ranks),
    }
