"""The rerank stage: a reranker's scores for each question's head candidates put in place.

Candidates outside the reranked head keep their order, shifted below the reranked ones, so
the reranker decides the head of the list. Array operations over ``(q, c)`` candidates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpurag.query.fusion import best_candidates


def rerank(reranker: Any, qvecs: np.ndarray, cand: np.ndarray, score: np.ndarray,
           ppr_scores: Any, dense: tuple[np.ndarray, np.ndarray], n_cand: int) -> np.ndarray:
    """Scores of the candidates ``cand`` (``(q, c)`` rows, -1 padded) after ``reranker``
    rescored the best ``n_cand`` of them (``reranker.score(qvecs, rows, ppr_scores, dense)``
    gives ``(q, n_cand)``). ``ppr_scores``: the PPR component's ``local`` scores (recorded
    around the candidates, never the ``(q, n)`` rows)."""
    head_rows, _ = best_candidates(cand, score, n_cand)
    new = reranker.score(qvecs, head_rows, ppr_scores, dense)  # (q, n_cand)
    return place(cand, score, head_rows, new)


def place(cand: np.ndarray, score: np.ndarray, head_rows: np.ndarray, new: np.ndarray
          ) -> np.ndarray:
    """``score`` with the rows ``head_rows`` (``(q, h)``) scored ``new`` and every other
    candidate shifted below the lowest new score (``-inf`` where ``cand`` is padding)."""
    valid = cand >= 0
    out = score - score[valid].max() - 1.0 - np.abs(new).max()
    out[~valid] = -np.inf
    # Put the new scores where each reranked row sits among the candidates.
    match = cand[:, :, None] == head_rows[:, None, :]
    hit = match.any(axis=2)
    out[hit] = np.take_along_axis(new, match.argmax(axis=2), axis=1)[hit]
    return out
