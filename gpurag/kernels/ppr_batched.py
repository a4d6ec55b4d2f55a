"""Batched personalized PageRank as a sparse x dense power iteration in torch (any device).

Same convention as :mod:`gpurag.graph.ppr` (``damping`` = probability of following an edge,
dangling mass returns to the personalization vector, results are probability vectors)::

    X <- d * P^T X + R * ((1 - d) + d * colsum(X[dangling]))        X, R: (n, q)

Per iteration: one ``torch.addmm`` (cuSPARSE SpMM on CUDA, the ``d *`` scaling folded in as
``alpha``) reads ``P^T`` once for all ``q`` queries; the dangling mass is a gather of the
dangling rows only; the reset is a scatter of its few nonzeros (the ``(n, q)`` reset is never
materialized). The per-column L1 change is computed only every ``check_every`` iterations
(in place, ``X_old -= X_new`` then its absolute values summed in float64, as are the
dangling sums; no temporary), which is also the only host sync, so
the GPU runs ``check_every`` iterations back to back. Columns that have converged at a check
are frozen and the rest iterate alone, as in :mod:`gpurag.graph.ppr`, so a query's result does
not depend on the other queries of its batch. Float32 by default (float64 accepted).

Queries are processed in column chunks sized to fit device memory (``batch_size``); pass
``k`` to get per-query top-k instead of the dense ``(q, n)`` result.

See ``docs/GPU.md`` for the byte and FLOP counts.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gpurag.kernels.topk import topk_dense

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, eq=False)
class TransitionOperator:
    """``P^T`` of a graph as a torch sparse CSR matrix, plus its dangling nodes."""

    pt: torch.Tensor  # (n, n) sparse CSR, P^T[v, u] = w_uv / out_weight(u)
    dangling: torch.Tensor  # int64 ids of nodes without out-weight
    n_nodes: int
    n_edges: int

    @property
    def device(self) -> torch.device:
        return self.pt.device

    @property
    def dtype(self) -> torch.dtype:
        return self.pt.dtype

    def nbytes(self) -> int:
        """Bytes of the CSR arrays (what one SpMM must read at least once)."""
        return sum(
            t.numel() * t.element_size()
            for t in (self.pt.crow_indices(), self.pt.col_indices(), self.pt.values())
        )


def _as_tensor(a: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a.to(device=device, dtype=dtype)
    return torch.as_tensor(np.ascontiguousarray(a), device=device).to(dtype)


def build_operator(
    indptr: Any,
    indices: Any,
    weights: Any,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    index_dtype: torch.dtype | None = None,
) -> TransitionOperator:
    """Build ``P^T`` on ``device`` from CSR arrays (NumPy or torch) of the adjacency matrix.

    Rows of the input are out-edges (``CSRGraph`` layout, sorted columns, no duplicates).
    Out-weights are summed in float64. ``index_dtype`` defaults to int32 when the graph fits
    (half the index bytes per iteration), else int64.
    """
    device = torch.device(device)
    crow_in = _as_tensor(indptr, torch.int64, device)
    n = crow_in.numel() - 1
    dst = _as_tensor(indices, torch.int64, device)
    w = _as_tensor(weights, torch.float64, device)
    nnz = dst.numel()
    if n < 0 or w.numel() != nnz:
        raise ValueError("indptr must have n+1 entries and weights one per index")
    deg = crow_in[1:] - crow_in[:-1]
    src = torch.repeat_interleave(torch.arange(n, device=device), deg, output_size=nnz)
    out_w = torch.zeros(n, dtype=torch.float64, device=device).index_add_(0, src, w)
    dangling = torch.nonzero(out_w <= 0).flatten()
    prob = (w / out_w[src].clamp(min=torch.finfo(torch.float64).tiny)).to(dtype)
    del w
    # A stable sort by destination keeps sources ascending within each row of P^T.
    key = dst.to(torch.int32) if n <= _INT32_MAX else dst
    order = torch.sort(key, stable=True).indices
    del key
    counts = torch.bincount(dst, minlength=n) if nnz else torch.zeros(n, dtype=torch.int64,
                                                                      device=device)
    crow = torch.zeros(n + 1, dtype=torch.int64, device=device)
    torch.cumsum(counts, 0, out=crow[1:])
    if index_dtype is None:
        index_dtype = torch.int32 if max(n, nnz) <= _INT32_MAX else torch.int64
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
        pt = torch.sparse_csr_tensor(
            crow.to(index_dtype),
            src[order].to(index_dtype),
            prob[order],
            size=(n, n),
            check_invariants=False,
        )
    return TransitionOperator(pt=pt, dangling=dangling, n_nodes=n, n_edges=nnz)


def _reset_triples(
    reset: Any, n: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Validate ``reset`` (q, n) / (n,): dense, SciPy sparse or torch; return its nonzeros as
    (query, node, value) sorted by query with rows normalized to sum 1, and q."""
    if hasattr(reset, "tocoo") and not isinstance(reset, torch.Tensor):  # scipy sparse
        coo = reset.tocoo()
        coo.sum_duplicates()
        if coo.ndim == 1:
            rows, cols, q = np.zeros(coo.nnz, np.int64), coo.coords[0], 1
        else:
            rows, cols, q = coo.row, coo.col, coo.shape[0]
        width = coo.shape[-1]
        qi = torch.as_tensor(np.asarray(rows, dtype=np.int64), device=device)
        node = torch.as_tensor(np.asarray(cols, dtype=np.int64), device=device)
        val = torch.as_tensor(np.asarray(coo.data, dtype=np.float64), device=device)
    else:
        r = _as_tensor(reset, torch.float64, device)
        if r.is_sparse or r.layout != torch.strided:
            r = r.to_dense()
        if r.ndim == 1:
            r = r[None, :]
        if r.ndim != 2:
            raise ValueError(f"reset must be 1-D or 2-D, got shape {tuple(r.shape)}")
        q, width = r.shape
        qi, node = torch.nonzero(r, as_tuple=True)
        val = r[qi, node]
    if width != n:
        raise ValueError(f"reset has {width} columns but the graph has {n} nodes")
    return normalized_triples(qi, node, val, q, dtype)


def normalized_triples(
    qi: torch.Tensor, node: torch.Tensor, val: torch.Tensor, q: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """A ``(q, n)`` reset given by its nonzeros (``qi`` query, ``node``, ``val`` float64, on
    one device) validated (finite, nonnegative, no all-zero row) and returned sorted by query
    with each row scaled to sum 1, in ``dtype``: what :func:`power_chunks` takes."""
    device = val.device
    if val.numel() and (not bool(torch.isfinite(val).all()) or bool((val < 0).any())):
        raise ValueError("reset weights must be finite and nonnegative")
    sums = torch.zeros(q, dtype=torch.float64, device=device).index_add_(0, qi, val)
    if q and bool((sums <= 0).any()):
        row = int(torch.nonzero(sums <= 0)[0, 0])
        raise ValueError(f"reset row {row} is all zero (personalization needs positive weight)")
    keep = val > 0
    qi, node, val = qi[keep], node[keep], val[keep]
    order = torch.argsort(qi, stable=True)
    qi, node, val = qi[order], node[order], val[order]
    return qi, node, (val / sums[qi]).to(dtype), q


def auto_columns(n: int, q: int, device: str | torch.device, bytes_per_entry: int,
                 share: float = 0.8) -> int:
    """Columns (queries) per chunk so that ``bytes_per_entry`` bytes per node and column fit
    in ``share`` of the device's free memory, the allocator's reserved-but-unused cache
    counted as free; ``max(q, 1)`` off cuda or for an empty graph."""
    device = torch.device(device)
    if device.type != "cuda" or n == 0:
        return max(q, 1)
    free, _ = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(max(1, min(q, (share * free) // (bytes_per_entry * n))))


def _auto_batch(n: int, q: int, device: torch.device, itemsize: int) -> int:
    """Columns per chunk: two (n, b) iterates and one transposed copy (for the top-k or the
    result) in ~80% of the free device memory."""
    return auto_columns(n, q, device, 3 * itemsize)


def _power_chunk(
    op: TransitionOperator,
    qi: torch.Tensor,
    node: torch.Tensor,
    val: torch.Tensor,
    q: int,
    damping: float,
    tol: float,
    max_iter: int,
    check_every: int,
) -> tuple[torch.Tensor, int, float]:
    """Power iteration for ``q`` queries; returns (X (n, q) normalized, iterations, max err).

    A column that has converged (or stalled) at a check is frozen: copied out, and the rest
    iterate alone (compacted), so a query's result does not depend on the batch it is in
    (checks fall on the same iterations however many columns there are).
    """
    n, dev, dt = op.n_nodes, op.device, op.dtype
    x = torch.zeros((n, q), dtype=dt, device=dev)
    a = q  # active (not yet frozen) columns: x[:, j] is query cols[j]
    flat = node * a + qi
    x.view(-1).index_put_((flat,), val)
    y = torch.empty_like(x)
    d = float(damping)
    eps = torch.finfo(dt).eps
    noise_floor = 1e3 * eps
    # Exact arithmetic: the L1 change shrinks by at least d per step, d**check_every per check
    # (and often by exactly that). Stalled = shrinking clearly slower, i.e. rounding noise.
    stall_ratio = 0.5 * (1.0 + d**check_every)
    prev = torch.full((q,), math.inf, dtype=torch.float64, device=dev)
    cols = torch.arange(q, device=dev)
    frozen: torch.Tensor | None = None  # (n, q), made when the first columns freeze early
    frozen_err = 0.0
    has_dangling = op.dangling.numel() > 0
    err_max, it = math.inf, 0
    for it in range(1, max_iter + 1):
        if has_dangling:
            # the dangling mass summed in float64, as the host does (float32 sums over long
            # columns drift by ~1e-5)
            coef = (x.index_select(0, op.dangling).sum(dim=0, dtype=torch.float64)
                    .mul_(d).add_(1.0 - d).to(dt))
        else:
            coef = torch.full((a,), 1.0 - d, dtype=dt, device=dev)
        torch.addmm(y, op.pt, x, beta=0.0, alpha=d, out=y)  # y = d P^T x (y's old data unused)
        y.view(-1).index_add_(0, flat, val * coef[qi])
        if it % check_every == 0 or it == max_iter:
            x.sub_(y)  # x := x_old - x_new (x_old is not needed any more)
            err = x.abs_().sum(dim=0, dtype=torch.float64)  # L1 change, summed in float64
            x, y = y, x
            stalled = (err > stall_ratio * prev) & (err < noise_floor)
            done = (err < tol) | stalled
            # the check's one host sync: the largest change, the largest among the converged
            # columns (err >= 0) and how many converged
            top, top_done, n_done = torch.stack([
                err.max(), torch.where(done, err, 0.0).max(), done.sum().to(err.dtype)
            ]).tolist()
            err_max = max(frozen_err, top)
            if n_done == a:
                break
            prev = err
            if n_done:
                frozen_err = max(frozen_err, top_done)
                if frozen is None:
                    frozen = torch.empty((n, q), dtype=dt, device=dev)
                frozen[:, cols[done]] = x[:, done]
                keep = ~done
                new_pos = torch.cumsum(keep, 0) - 1  # old active column -> new one
                on = keep[qi]
                qi, node, val = new_pos[qi[on]], node[on], val[on]
                del y  # scratch: its data is not needed
                x = x[:, keep].contiguous()
                y = torch.empty_like(x)
                cols, prev, a = cols[keep], prev[keep], a - int(n_done)
                flat = node * a + qi
        else:
            x, y = y, x
    else:
        warnings.warn(
            f"ppr_batched did not converge in {max_iter} iterations "
            f"(max L1 change {err_max:.2e} > tol {tol:.1e})",
            RuntimeWarning,
            stacklevel=3,
        )
    del y
    if frozen is not None:
        frozen[:, cols] = x
        x = frozen
    x.div_(x.sum(dim=0, keepdim=True))
    return x, it, err_max


def ppr_batched(
    graph: TransitionOperator | Any,
    reset: Any,
    damping: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 100,
    check_every: int = 4,
    batch_size: int | None = None,
    k: int | None = None,
    device: str | torch.device | None = None,
    stats: dict | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Personalized PageRank of every row of ``reset`` by batched power iteration.

    ``graph`` is a :class:`TransitionOperator` (reuse it across calls) or anything with CSR
    ``indptr``/``indices``/``weights`` (a ``CSRGraph``; built on ``device``, default cpu).
    ``reset`` is a ``(q, n)`` or ``(n,)`` nonnegative matrix (NumPy, SciPy sparse or torch);
    rows are normalized to sum 1, an all-zero row is an error. A query has converged when the
    L1 change of its column is below ``tol`` (or has stalled at float rounding level: below
    ``1e3 * eps`` and shrinking clearly slower than the exact contraction ``d`` per step).

    Returns the ``(q, n)`` scores on the operator's device (rows sum to 1), or with ``k`` the
    per-query top-k ``(values, node ids)``, each ``(q, k)``, best first. A ``stats`` dict is
    filled with ``iterations`` and ``max_l1_change`` (one entry per column chunk) and
    ``batch_size``.
    """
    check_settings(damping, max_iter, check_every)
    if isinstance(graph, TransitionOperator):
        op = graph
    else:
        op = build_operator(graph.indptr, graph.indices, graph.weights, device or "cpu")
    n, dev, dt = op.n_nodes, op.device, op.dtype
    qi, node, val, q = _reset_triples(reset, n, dev, dt)
    if k is None:
        out = torch.empty((q, n), dtype=dt, device=dev)
    else:
        kk = max(int(k), 0)
        out_v = torch.empty((q, kk), dtype=dt, device=dev)
        out_i = torch.empty((q, kk), dtype=torch.int64, device=dev)
    for c0, c1, x in power_chunks(op, qi, node, val, q, damping=damping, tol=tol,
                                  max_iter=max_iter, check_every=check_every,
                                  batch_size=batch_size, stats=stats):
        if k is None:
            out[c0:c1] = x.T
        else:
            out_v[c0:c1], out_i[c0:c1] = topk_dense(x.T, kk)
        del x
    return out if k is None else (out_v, out_i)


def power_chunks(
    op: TransitionOperator,
    qi: torch.Tensor,
    node: torch.Tensor,
    val: torch.Tensor,
    q: int,
    *,
    damping: float,
    tol: float,
    max_iter: int = 100,
    check_every: int = 4,
    batch_size: int | None = None,
    stats: dict | None = None,
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """Power iteration over the reset's nonzeros (:func:`normalized_triples`), in column chunks
    that fit device memory (``batch_size``, default from the free memory): yields ``(c0, c1,
    X)`` with ``X`` the ``(n, c1 - c0)`` scores of queries ``c0:c1`` (columns sum to 1; freed
    when the caller moves on). ``stats`` as in :func:`ppr_batched`. Bad settings raise here,
    before the first chunk."""
    check_settings(damping, max_iter, check_every)
    return _chunks(op, qi, node, val, q, damping, tol, max_iter, check_every, batch_size, stats)


def check_settings(damping: float, max_iter: int, check_every: int) -> None:
    """A clear ``ValueError`` for a damping outside [0, 1) or a ``max_iter``/``check_every``
    that is not an integer >= 1 (the damping check is the host PPR's)."""
    from gpurag.graph.ppr import _check_damping

    _check_damping(damping)
    for name, value in (("max_iter", max_iter), ("check_every", check_every)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _chunks(op: TransitionOperator, qi: torch.Tensor, node: torch.Tensor, val: torch.Tensor,
            q: int, damping: float, tol: float, max_iter: int, check_every: int,
            batch_size: int | None, stats: dict | None
            ) -> Iterator[tuple[int, int, torch.Tensor]]:
    n, dev, dt = op.n_nodes, op.device, op.dtype
    b = batch_size or _auto_batch(n, q, dev, torch.empty((), dtype=dt).element_size())
    bounds = torch.searchsorted(qi, torch.arange(0, q + b, b, device=dev).clamp(max=q)).tolist()
    if stats is not None:
        stats["batch_size"] = b
    for c, c0 in enumerate(range(0, q, b)):
        c1 = min(c0 + b, q)
        lo, hi = bounds[c], bounds[c + 1]
        x, iterations, err = _power_chunk(
            op, qi[lo:hi] - c0, node[lo:hi], val[lo:hi], c1 - c0,
            damping, tol, max_iter, check_every,
        )
        if stats is not None:
            stats.setdefault("iterations", []).append(iterations)
            stats.setdefault("max_l1_change", []).append(err)
        yield c0, c1, x
        del x
