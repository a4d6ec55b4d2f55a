"""NumPy float64 reference for personalized PageRank (what ``kernels.ppr_batched`` must match).

Convention (as :mod:`gpurag.graph.ppr`): a walker follows an out-edge with probability
``damping``, chosen proportionally to edge weight, and otherwise jumps to the personalization
vector ``r``; at a dangling node (no out-edges, or zero out-weight) it always jumps to ``r``::

    x = (1 - d) r + d (P^T x + (sum of x over dangling nodes) r),    P = D_out^-1 A

Two deliberately simple solvers, independent of the batched kernel:

* ``method="solve"``: the linear system ``(I - d P^T - d r 1_D^T) x = (1 - d) r`` solved densely
  (exact; for small graphs, n up to a few thousand);
* ``method="power"``: float64 power iteration, one query at a time, with the sparse product done
  by ``np.bincount`` over the edge list (no SciPy), until the L1 change is below ``tol``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np


def _edges(
    indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, transition probability of each edge, dangling mask) in float64."""
    indptr = np.asarray(indptr, dtype=np.int64)
    n = indptr.size - 1
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    dst = np.asarray(indices, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    out_w = np.bincount(src, weights=w, minlength=n)
    dangling = out_w <= 0
    prob = np.divide(w, out_w[src], out=np.zeros_like(w), where=out_w[src] > 0)
    return src, dst, prob, dangling


def _normalize(reset: np.ndarray, n: int) -> np.ndarray:
    r = np.atleast_2d(np.asarray(reset, dtype=np.float64))
    if r.ndim != 2 or r.shape[1] != n:
        raise ValueError(f"reset must have shape (q, {n})")
    if (r < 0).any() or not np.isfinite(r).all():
        raise ValueError("reset must be finite and nonnegative")
    sums = r.sum(axis=1, keepdims=True)
    if (sums <= 0).any():
        raise ValueError("every reset row needs positive mass")
    return r / sums


def ppr_reference(
    indptr: np.ndarray,
    indices: np.ndarray,
    weights: np.ndarray,
    reset: np.ndarray,
    damping: float = 0.5,
    method: Literal["solve", "power"] = "solve",
    tol: float = 1e-13,
    max_iter: int = 10_000,
) -> np.ndarray:
    """PPR of every row of the dense ``(q, n)`` (or ``(n,)``) ``reset``; returns ``(q, n)`` f64.

    Rows of ``reset`` are normalized to sum 1; results are probability vectors.
    """
    if not 0.0 <= damping < 1.0:
        raise ValueError("damping must lie in [0, 1)")
    n = np.asarray(indptr).size - 1
    r = _normalize(reset, n)
    src, dst, prob, dangling = _edges(indptr, indices, weights)
    d = float(damping)
    if method == "solve":
        pt = np.zeros((n, n))
        np.add.at(pt, (dst, src), prob)  # P^T[v, u] = P[u, v]
        out = np.empty_like(r)
        for i, ri in enumerate(r):
            m = np.eye(n) - d * pt - d * np.outer(ri, dangling.astype(np.float64))
            out[i] = np.linalg.solve(m, (1.0 - d) * ri)
        return out
    if method != "power":
        raise ValueError(f"unknown method {method!r}")
    out = np.empty_like(r)
    for i, ri in enumerate(r):
        x = ri.copy()
        for _ in range(max_iter):
            y = d * np.bincount(dst, weights=prob * x[src], minlength=n)
            y += ri * ((1.0 - d) + d * x[dangling].sum())
            done = np.abs(y - x).sum() < tol
            x = y
            if done:
                break
        out[i] = x / x.sum()
    return out
