"""The walk: personalized PageRank from the batch's reset matrix, and the candidates it scores.

Only each question's top passages and the gathered rows (the head sources' passages) come
back from the PPR component (:class:`~gpurag.graph.ppr_top.PPRTop`), never a ``(q, n)`` array;
:func:`candidate_scores` turns them into one candidate list per question.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from gpurag.graph.ppr_top import PPRTop
from gpurag.query.fusion import minmax


def walk(ppr: Any, graph: Any, reset: sp.csr_array, *, n_ent: int, n_psg: int, k: int,
         gather: np.ndarray, damping: float, tol: float, method: str, eps: float = 1e-6,
         local_fanout: tuple[int, ...] | None = None, push_min_edges: int | None = None,
         push_max_seeds: int | None = None) -> PPRTop:
    """The PPR component ``ppr`` (the runtime's, host or device) over ``graph`` from the
    ``(q, n)`` ``reset`` rows: the top-``k`` passages (nodes ``[n_ent, n_ent + n_psg)``, ids
    relative to ``n_ent``) and the scores at ``gather`` (``(q, g)`` passage rows); ``eps``
    is the local push's threshold where it pushes, ``push_min_edges`` and
    ``push_max_seeds`` the size rule of where it does (:func:`gpurag.graph.ppr.ppr`; None:
    its defaults)."""
    return ppr(graph, reset, k=min(k, n_psg), lo=n_ent, hi=n_ent + n_psg, gather=gather,
               damping=damping, tol=tol, method=method, eps=eps, local_fanout=local_fanout,
               push_min_edges=push_min_edges, push_max_seeds=push_max_seeds)


def candidate_scores(top: PPRTop, gather: np.ndarray, dense: tuple[np.ndarray, np.ndarray],
                     dense_blend: float) -> tuple[np.ndarray, np.ndarray]:
    """Candidate passage rows ``(q, c)`` (-1 where padded or repeated) and their scores
    (float64, ``-inf`` there) from the PPR top-k and the gathered rows (the dense hits first).

    A passage's score is its PPR mass over the question's largest passage mass, plus
    ``dense_blend`` times its min-max dense score. Every passage outside the candidates scores
    at most the lowest top-k value, so the best ones are among them.
    """
    ds, di = dense
    k = top.ids.shape[1]
    denom = np.maximum(top.values[:, :1].astype(np.float64), 1e-30)
    cand = np.concatenate([top.ids, gather], axis=1)
    score = np.concatenate([top.values, top.gathered], axis=1).astype(np.float64) / denom
    if dense_blend:
        blend = np.where(di >= 0, minmax(ds), 0.0).astype(np.float64)
        score[:, k:k + di.shape[1]] += dense_blend * blend
    # One copy per row: the dense one first (it carries the blend), then the other gathered
    # ones, then the top-k one.
    q, c = cand.shape
    priority = np.r_[np.full(k, 2), np.zeros(di.shape[1]), np.ones(c - k - di.shape[1])]
    order = np.lexsort((np.broadcast_to(priority, (q, c)), cand), axis=-1)
    sorted_cand = np.take_along_axis(cand, order, axis=1)
    repeat = np.zeros((q, c), dtype=bool)
    repeat[:, 1:] = sorted_cand[:, 1:] == sorted_cand[:, :-1]
    valid = np.ones((q, c), dtype=bool)
    np.put_along_axis(valid, order, ~repeat, axis=1)
    valid &= cand >= 0
    score[~valid] = -np.inf
    return np.where(valid, cand, -1), score
