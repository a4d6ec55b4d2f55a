"""Personalized PageRank over a :class:`~gpurag.graph.csr.CSRGraph`, CPU backend.

Convention (igraph's, as HippoRAG uses it): a walker follows an out-edge with probability
``damping`` (chosen proportionally to edge weight) and jumps back to the personalization
(reset) distribution ``r`` with probability ``1 - damping``; at a dangling node (no out-edges)
it always jumps back to ``r``. The score vector ``x`` is the stationary distribution::

    x = (1 - d) r + d (P^T x + (sum of x over dangling nodes) r),   P = D_out^-1 A

Two solvers:

* :func:`ppr_power` -- batched power iteration, the sparse matrix read once per iteration for
  all queries (sparse x dense ``(n, q)``); exact up to ``tol``.
* :func:`ppr_push` / :func:`ppr_push_batch` -- frontier ("parallel") local push (Andersen,
  Chung & Lang, FOCS 2006, with all above-threshold nodes pushed per round as in the parallel
  variants of Shun et al., 2016); cost follows the touched neighbourhood, not the graph size.

:func:`ppr` dispatches between them (``method="auto"``: see :func:`choose_method`). All
results are probability vectors (rows sum to 1). Self loops, where a hand-made graph has them,
are ordinary edges here (``build_csr`` drops them).
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import scipy.sparse as sp

from gpurag.arrays import unique_sorted
from gpurag.graph.csr import CSRGraph, ranges

ResetLike = np.ndarray | sp.sparray | sp.spmatrix

try:  # the kernels behind SciPy's ``csr @ dense`` (called directly into reused buffers)
    from scipy.sparse._sparsetools import csr_matvec as _csr_matvec
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # pragma: no cover - renamed in some future SciPy: plain ``pt @ x``
    _csr_matvec = _csr_matvecs = None
try:  # the kernel behind SciPy's row selection ``csr[rows]`` (the push's neighbour lists)
    from scipy.sparse._sparsetools import csr_row_index as _csr_row_index
except ImportError:  # pragma: no cover - renamed in some future SciPy: gathered by ranges
    _csr_row_index = None


def _kernels_agree() -> bool:
    """Whether SciPy's private kernels take the arguments :func:`_matmul_into` passes and give
    ``@``'s bits (checked once at import on a small matrix: a SciPy that changed their
    signature falls back to ``pt @ x`` instead of failing every walk)."""
    if _csr_matvec is None:
        return False
    pt = sp.csr_array(np.array([[0.5, 0.0, 0.25], [0.0, 1.0, 0.0], [0.5, 0.0, 0.75]]))
    x = np.array([[0.25, 1.0], [0.5, 0.125], [0.25, 2.0]])
    try:
        one, two = np.zeros(3), np.zeros((3, 2))
        _csr_matvec(3, 3, pt.indptr, pt.indices, pt.data, x[:, 0].copy(), one)
        _csr_matvecs(3, 3, 2, pt.indptr, pt.indices, pt.data, x.reshape(-1), two.reshape(-1))
    except Exception:  # any failure means: use the public operator
        return False
    return bool(np.array_equal(one, pt @ x[:, 0]) and np.array_equal(two, pt @ x))


if not _kernels_agree():  # pragma: no cover - only on a SciPy whose kernels changed
    _csr_matvec = _csr_matvecs = None


def _row_index_agrees() -> bool:
    """Whether SciPy's private ``csr_row_index`` takes the arguments :func:`_row_entries`
    passes and copies the rows SciPy's ``csr[rows]`` gives (checked once at import)."""
    if _csr_row_index is None:
        return False
    pt = sp.csr_array(np.array([[0.5, 0.0, 0.25], [0.0, 1.0, 0.0], [0.5, 0.0, 0.75]]))
    rows = np.array([2, 0], dtype=np.int32)
    nbrs, vals = np.empty(4, np.int32), np.empty(4)
    try:
        _csr_row_index(2, rows, pt.indptr.astype(np.int32), pt.indices.astype(np.int32),
                       pt.data, nbrs, vals)
    except Exception:  # any failure means: gather the rows by their ranges
        return False
    want = pt[rows]
    return bool(np.array_equal(nbrs, want.indices) and np.array_equal(vals, want.data))


if not _row_index_agrees():  # pragma: no cover - only on a SciPy whose kernel changed
    _csr_row_index = None

# "auto" pushes each query with at most AUTO_PUSH_MAX_SEEDS seeds on a graph with at least
# AUTO_PUSH_MIN_EDGES stored edges, power iteration otherwise (see :func:`choose_method`):
# the defaults of a direct call; the query passes its ranking profile's ``push_min_edges``
# and ``push_max_seeds`` (gpurag.profile, the same values: tests/graph/test_ppr.py).
AUTO_PUSH_MIN_EDGES = 500_000
AUTO_PUSH_MAX_SEEDS = 256


@dataclass(eq=False)
class _Operator:
    """Per-graph arrays shared by both solvers, built once per graph object (see
    :func:`_operator`): nothing the walk derives from the graph alone is rebuilt per call."""

    inv_out_weight: np.ndarray  # float64, 0 at dangling nodes
    degree: np.ndarray  # int64 out-degree
    dangling: np.ndarray  # int64 ids of nodes without out-edges
    transposes: dict  # dtype -> P^T as csr_array (lazily built)
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards the lazy parts
    push: dict | None = None  # the push's per-graph arrays (lazily built, _push_arrays)
    # idle push work arrays, zeroed (a free list under ``lock``: as many as the peak number of
    # concurrent pushes on this graph, not one per thread that ever pushed)
    scratch: list = field(default_factory=list)


# The operator lives on the graph object itself (an opened index's graph, shared by the
# service's threads); the lock only makes its first build happen once.
_OPERATOR_ATTR = "_ppr_operator"
_BUILD_LOCK = threading.Lock()


def _operator(g: CSRGraph) -> _Operator:
    """The :class:`_Operator` of ``g``, built on first use and kept on ``g``."""
    op = g.__dict__.get(_OPERATOR_ATTR)
    if op is None:
        with _BUILD_LOCK:
            op = g.__dict__.get(_OPERATOR_ATTR)
            if op is None:
                out_w = g.out_weight()
                inv = np.zeros_like(out_w)
                np.divide(1.0, out_w, out=inv, where=out_w > 0)
                op = _Operator(inv, g.degree(), np.flatnonzero(out_w <= 0), {})
                object.__setattr__(g, _OPERATOR_ATTR, op)  # a frozen dataclass: its own cache
    return op


def _transition_transpose(g: CSRGraph, op: _Operator, dtype: np.dtype) -> sp.csr_array:
    """``P^T`` (column-stochastic on non-dangling columns) as CSR in ``dtype``, cached."""
    key = np.dtype(dtype).str
    pt = op.transposes.get(key)
    if pt is None:
        with op.lock:
            pt = op.transposes.get(key)
            if pt is None:
                pt = _build_transpose(g, op, dtype)
                op.transposes[key] = pt
    return pt


def _build_transpose(g: CSRGraph, op: _Operator, dtype: np.dtype) -> sp.csr_array:
    n = g.n_nodes
    rows = np.repeat(np.arange(n, dtype=np.int64), op.degree)
    data = g.weights.astype(np.float64) * op.inv_out_weight[rows]
    p = sp.csr_array((data, np.asarray(g.indices), np.asarray(g.indptr)), shape=(n, n))
    pt = p.T.tocsr()
    pt.sum_duplicates()
    idx_type = np.int32 if pt.nnz < np.iinfo(np.int32).max else np.int64
    return sp.csr_array(
        (pt.data.astype(dtype), pt.indices.astype(idx_type), pt.indptr.astype(idx_type)),
        shape=(n, n),
    )


def _matmul_into(pt: sp.csr_array, x: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = pt @ x`` for C-contiguous ``x``/``out`` ``(n, q)`` of ``pt``'s dtype, by
    the kernel SciPy's ``@`` calls (``csr_matvec`` for one column, ``csr_matvecs`` for more),
    into a reused buffer: the same bits without SciPy's per-call dispatch and allocation."""
    m, n = pt.shape
    q = x.shape[1]
    if _csr_matvec is None:  # pragma: no cover - SciPy's kernels missing or changed
        out[...] = pt @ x
        return
    out.fill(0)  # the kernels accumulate into ``out``, as into SciPy's zeros
    if q == 1:
        _csr_matvec(m, n, pt.indptr, pt.indices, pt.data, x.reshape(-1), out.reshape(-1))
    else:
        _csr_matvecs(m, n, q, pt.indptr, pt.indices, pt.data, x.reshape(-1), out.reshape(-1))


def column_sums(a: np.ndarray) -> np.ndarray:
    """``a.sum(axis=0, dtype=np.float64)`` of a 2-D float array, the same bits. With two or
    more columns of a C-contiguous ``a`` that sum adds each column's entries one row after
    another; ``np.einsum("ij->j", a, dtype=np.float64)`` runs the same additions in the same
    order (its loop is along the rows' contiguous axis, the output accumulating row by row:
    tests/graph/test_ppr_bits.py checks the bits), in ~0.4-0.7x the time (the walk's L1
    changes and normalization at 2k passages: 440 -> 325 us at 64 columns, 158 -> 56 at 2).
    One column (a contiguous reduction: NumPy's pairwise sum) or another layout: ``sum``."""
    if a.ndim != 2 or a.shape[1] < 2 or not a.flags.c_contiguous:
        return a.sum(axis=0, dtype=np.float64)
    return np.einsum("ij->j", a, dtype=np.float64)


def normalized_reset(reset: ResetLike, n: int) -> sp.csr_array:
    """Validate ``reset`` (q, n) or (n,), return it as float64 CSR with rows summing to 1.

    Each row keeps its stored order reversed (the order a diagonal scaling by SciPy's sparse
    product left it in, which the push follows), zeros dropped."""
    if sp.issparse(reset):
        mat = sp.csr_array(reset, dtype=np.float64)
    else:
        arr = np.asarray(reset, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2:
            raise ValueError(f"reset must be 1-D or 2-D, got shape {arr.shape}")
        mat = sp.csr_array(arr)
    if mat.shape[1] != n:
        raise ValueError(f"reset has {mat.shape[1]} columns but the graph has {n} nodes")
    mat.sum_duplicates()
    data = mat.data
    if mat.nnz and (not np.all(np.isfinite(data)) or data.min() < 0):
        raise ValueError("reset weights must be finite and nonnegative")
    q = mat.shape[0]
    indptr = np.asarray(mat.indptr, dtype=np.int64)
    counts = np.diff(indptr)
    # row sums as SciPy's ``sum(axis=1)`` takes them (one reduceat over the stored rows)
    sums = np.zeros(q)
    stored = np.flatnonzero(counts)
    if stored.size:
        sums[stored] = np.add.reduceat(data, indptr[stored])
    zero = np.flatnonzero(sums <= 0)
    if zero.size:
        raise ValueError(
            f"reset row {int(zero[0])} is all zero (personalization needs positive weight)"
        )
    rows = np.repeat(np.arange(q, dtype=np.int64), counts)
    # each row's entries in reverse, scaled by 1 / its sum (what diags(1 / sums) @ mat gave)
    order = indptr[rows] + indptr[rows + 1] - 1 - np.arange(rows.size)
    vals = data[order] * (1.0 / sums)[rows]
    cols = mat.indices[order]
    keep = vals != 0
    if not keep.all():
        vals, cols = vals[keep], cols[keep]
        counts = np.bincount(rows[keep], minlength=q)
    out_ptr = np.zeros(q + 1, dtype=np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    idx = np.int32 if max(n, vals.size) < np.iinfo(np.int32).max else np.int64
    return sp.csr_array((vals, cols.astype(idx), out_ptr.astype(idx)), shape=(q, n))


_normalized_reset = normalized_reset


def ppr_power(
    g: CSRGraph,
    reset: ResetLike,
    damping: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 100,
    dtype: type[np.floating] = np.float32,
) -> np.ndarray:
    """Batched personalized PageRank by power iteration; returns ``(q, n)`` float32.

    ``reset`` is a ``(q, n)`` (or ``(n,)``) dense or scipy sparse matrix of nonnegative
    personalization weights; each row is normalized to sum 1 (an all-zero row is an error).
    Each iteration multiplies ``P^T`` by the ``(n, q)`` block of all queries at once. A query
    has converged when the L1 change of its column is below ``tol``. ``dtype=float32`` (the
    default, ~2x faster than float64) also stops once the change no longer shrinks at float32
    resolution (~1e-8 on 1e5 nodes); its L1 error is then ~1e-5 on 1e5 nodes, use
    ``dtype=np.float64`` for exact results. Rows are renormalized to sum 1 at the end.
    """
    _check_damping(damping)
    r = _normalized_reset(reset, g.n_nodes)
    return _power(g, r, damping, tol, max_iter, np.dtype(dtype))


def _power(
    g: CSRGraph, r: sp.csr_array, damping: float, tol: float, max_iter: int, dtype: np.dtype,
    stats: dict | None = None,
) -> np.ndarray:
    """Power iteration on a validated, row-normalized reset matrix. ``stats`` (a dict) gets
    ``iterations`` (per row: the iteration it converged at) and ``products`` (the columns
    multiplied, summed over the iterations). One row goes to :func:`_power_one` (the same
    bits)."""
    n, q = g.n_nodes, r.shape[0]
    if n == 0 or q == 0:
        return np.zeros((q, n), dtype=np.float32)
    op = _operator(g)
    pt = _transition_transpose(g, op, dtype)
    if q == 1:
        return _power_one(g, r, damping, tol, max_iter, dtype, op, pt, stats)
    d = dtype.type(damping)
    r_nodes = np.asarray(r.indices, dtype=np.int64)
    r_cols = np.repeat(np.arange(q, dtype=np.int64), np.diff(r.indptr))
    r_vals = r.data.astype(dtype)
    dense_reset = r.nnz > 0.05 * n * q
    r_dense = r.T.toarray().astype(dtype) if dense_reset else None
    x = np.zeros((n, q), dtype=dtype)  # the result: a column is written when it converges
    x[r_nodes, r_cols] = r_vals
    noise_floor = 1e3 * np.finfo(dtype).eps
    # Without dangling nodes the reset's coefficient is the constant (1 - d) (as d * 0 + it).
    no_dangling = op.dangling.size == 0
    coef0 = ((1 - d) + d * np.zeros(q)).astype(dtype)
    # The iterate holds the active (unconverged) columns only, contiguous; it is compacted
    # when some converge, not gathered every iteration. Each column's arithmetic is its own,
    # so a question's scores do not depend on the batch it came in. Two buffers take turns:
    # the new iterate, and the old one, which becomes |new - old| for the L1 change.
    active = np.arange(q)
    xa = x.copy()
    buf = np.empty_like(xa)
    flat = r_nodes * q + r_cols  # the reset's cells in the flattened (n, active) iterate
    prev = np.full(q, np.inf)
    err = np.zeros(q)
    iters = np.zeros(q, dtype=np.int64)
    products = 0
    # Without dangling nodes the reset's term is the same every iteration: made once per
    # active set (the same products), not per iteration.
    fixed = None
    for it in range(1, max_iter + 1):
        x_new = buf
        _matmul_into(pt, xa, x_new)
        products += xa.shape[1]
        x_new *= d
        if no_dangling:
            if fixed is None:
                coef = coef0[: xa.shape[1]]
                fixed = r_dense * coef if r_dense is not None else r_vals * coef[r_cols]
            term = fixed
        else:
            # Column sums accumulate in float64: float32 sums over long columns drift by ~1e-5.
            coef = ((1 - d) + d * column_sums(xa[op.dangling])).astype(dtype)
            term = r_dense * coef if r_dense is not None else r_vals * coef[r_cols]
        if r_dense is not None:
            x_new += term
        else:
            x_new.reshape(-1)[flat] += term
        diff = np.subtract(x_new, xa, out=xa)  # the old iterate is not needed any more
        np.abs(diff, out=diff)
        err_a = column_sums(diff)
        buf, xa = diff, x_new
        err[active] = err_a
        # L1 change contracts by >= damping per step in exact arithmetic; a change that stops
        # shrinking (by less than halfway to 1) under the noise floor is rounding noise.
        stalled = (err_a > 0.5 * (1 + damping) * prev) & (err_a < noise_floor)
        done = (err_a < tol) | stalled
        prev = err_a
        if done.any():
            x[:, active[done]] = xa[:, done]
            iters[active[done]] = it
            keep = ~done
            if not keep.any():
                break
            active, prev = active[keep], prev[keep]
            xa = np.ascontiguousarray(xa[:, keep])
            fixed = None
            buf = np.empty_like(xa)
            moved = np.cumsum(keep) - 1
            if r_dense is not None:
                r_dense = np.ascontiguousarray(r_dense[:, keep])
            else:
                sel = keep[r_cols]
                r_nodes, r_cols, r_vals = r_nodes[sel], moved[r_cols[sel]], r_vals[sel]
                flat = r_nodes * xa.shape[1] + r_cols
    else:
        x[:, active] = xa
        iters[active] = max_iter
        warnings.warn(
            f"ppr_power did not converge in {max_iter} iterations "
            f"(max L1 change {float(err.max()):.2e} > tol {tol:.1e})",
            RuntimeWarning,
            stacklevel=3,
        )
    if stats is not None:
        stats["iterations"] = iters
        stats["products"] = products
    x /= column_sums(x)[None, :].astype(dtype)
    return np.ascontiguousarray(x.T, dtype=np.float32)


def _power_one(
    g: CSRGraph, r: sp.csr_array, damping: float, tol: float, max_iter: int, dtype: np.dtype,
    op: _Operator, pt: sp.csr_array, stats: dict | None,
) -> np.ndarray:
    """:func:`_power` of one question (a single query's walk): the same array operations on
    the same ``(n, 1)`` iterate, so the same bits, with the convergence test on Python floats
    (float64, as the arrays' comparisons) instead of a dozen length-1 array operations an
    iteration (~10 us each time on the 2k-passage graph's ~28 iterations)."""
    n = g.n_nodes
    d = dtype.type(damping)
    r_nodes = np.asarray(r.indices, dtype=np.int64)
    r_vals = r.data.astype(dtype)
    dense_reset = r.nnz > 0.05 * n
    r_dense = r.T.toarray().astype(dtype) if dense_reset else None
    xa = np.zeros((n, 1), dtype=dtype)
    xa[r_nodes, 0] = r_vals
    buf = np.empty_like(xa)
    flat = r_nodes  # the reset's cells in the flattened (n, 1) iterate
    noise_floor = float(1e3 * np.finfo(dtype).eps)
    stall = float(0.5 * (1 + damping))  # float64 products and tests, as against the arrays
    tol = float(tol)
    no_dangling = op.dangling.size == 0
    coef0 = ((1 - d) + d * np.zeros(1)).astype(dtype)
    fixed = None
    prev = np.inf
    it, err = 0, 0.0
    for it in range(1, max_iter + 1):  # noqa: B007 - ``it`` is read after the loop
        x_new = buf
        _matmul_into(pt, xa, x_new)
        x_new *= d
        if no_dangling:
            if fixed is None:
                fixed = r_dense * coef0 if r_dense is not None else r_vals * coef0[0]
            term = fixed
        else:
            coef = ((1 - d) + d * xa[op.dangling].sum(axis=0, dtype=np.float64)).astype(dtype)
            term = r_dense * coef if r_dense is not None else r_vals * coef[0]
        if r_dense is not None:
            x_new += term
        else:
            x_new.reshape(-1)[flat] += term
        diff = np.subtract(x_new, xa, out=xa)
        np.abs(diff, out=diff)
        err = float(diff.sum(axis=0, dtype=np.float64)[0])
        buf, xa = diff, x_new
        if err < tol or (err > stall * prev and err < noise_floor):
            break
        prev = err
    else:
        warnings.warn(
            f"ppr_power did not converge in {max_iter} iterations "
            f"(max L1 change {err:.2e} > tol {tol:.1e})",
            RuntimeWarning,
            stacklevel=4,
        )
    if stats is not None:
        stats["iterations"] = np.array([it], dtype=np.int64)
        stats["products"] = it
    xa /= xa.sum(axis=0, keepdims=True, dtype=np.float64).astype(dtype)
    return np.ascontiguousarray(xa.T, dtype=np.float32)


def _push_arrays(g: CSRGraph, op: _Operator) -> dict:
    """What the push reads per graph, kept on the operator: the CSR arrays as plain ndarrays
    (an opened index's are memory maps, whose indexing costs ~10x more per call; viewed, not
    copied, where they have the type already) in one index type (int32 below 2^31 nodes and
    stored edges: SciPy's ``csr_row_index`` copies the pushed rows' neighbours and
    transition probabilities in one pass), each edge's transition
    probability, ``max(out_degree, 1)`` as floats (the threshold's scale) and, per recent ``eps``,
    the thresholds ``eps * scale`` (``thresholds``, filled by :func:`_thresholds`)."""
    arrays = op.push
    if arrays is None:
        with op.lock:
            arrays = op.push
            if arrays is None:
                indptr, indices = np.asarray(g.indptr), np.asarray(g.indices)
                rows = np.repeat(np.arange(g.n_nodes, dtype=np.int64), op.degree)
                prob = np.asarray(g.weights, dtype=np.float64) * op.inv_out_weight[rows]
                idx = (np.int32 if max(g.n_nodes, indices.size) < np.iinfo(np.int32).max
                       else np.int64)
                # copy=False: an int32 index's arrays as they are (its memory map's pages,
                # which every process serving the index shares), not a private copy each
                arrays = {"indptr": indptr.astype(idx, copy=False),
                          "indices": indices.astype(idx, copy=False),
                          "prob": prob, "scale": np.maximum(op.degree, 1).astype(np.float64),
                          "thresholds": {}}
                op.push = arrays
    return arrays


# How many ``eps`` values' thresholds (n float64 each) :func:`_thresholds` keeps per graph:
# a query uses one (the profile's push_eps), a sweep a few in turn.
THRESHOLDS_KEPT = 2


def _thresholds(op: _Operator, arrays: dict, eps: float) -> np.ndarray:
    """``eps * max(out_degree, 1)`` per node (float64, the push's test), cached for the last
    :data:`THRESHOLDS_KEPT` values of ``eps`` (the oldest dropped first)."""
    kept = arrays["thresholds"]
    thr = kept.get(eps)
    if thr is None:
        thr = eps * arrays["scale"]
        with op.lock:
            thr = kept.setdefault(eps, thr)
            while len(kept) > THRESHOLDS_KEPT:  # dicts keep insertion order: oldest first
                del kept[next(iter(kept))]
    return thr


def _row_entries(arrays: dict, active: np.ndarray, counts: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The out-neighbours and transition probabilities of the ``active`` nodes' rows, row
    after row (``counts``: their degrees), by SciPy's ``csr_row_index`` (one C pass)."""
    total = int(counts.sum())
    indices = arrays["indices"]
    nbrs = np.empty(total, dtype=indices.dtype)
    prob = np.empty(total, dtype=np.float64)
    if _csr_row_index is None:  # pragma: no cover - SciPy's kernel missing or changed
        edges = ranges(arrays["indptr"][active], counts)
        return indices[edges], arrays["prob"][edges]
    _csr_row_index(active.size, active.astype(indices.dtype, copy=False), arrays["indptr"],
                   indices, arrays["prob"], nbrs, prob)
    return nbrs, prob


def _take_scratch(op: _Operator, n: int) -> dict:
    """Dense work arrays for one push (25 bytes a node): an idle set from the operator's free
    list, else a new one; :func:`_push_one` hands it back with ``p``, ``r`` and ``seen``
    zeroed (``stamp`` holds any ids: each round writes the entries it reads)."""
    with op.lock:
        if op.scratch:
            return op.scratch.pop()
    return {"p": np.zeros(n), "r": np.zeros(n), "stamp": np.zeros(n, dtype=np.int64),
            "seen": np.zeros(n, dtype=bool), "pos": np.arange(1024, dtype=np.int64)}


def _push_one(
    g: CSRGraph,
    op: _Operator,
    seeds: np.ndarray,
    seed_weights: np.ndarray,
    damping: float,
    eps: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Frontier push for one query; returns (touched node ids, estimate p, residual r) there.

    ``seeds`` are unique with weights summing to 1. Each round pushes every node whose
    residual exceeds ``eps * max(out_degree, 1)``: ``1 - damping`` of it settles in ``p``, the
    rest goes to its out-neighbours by transition probability (a dangling node's to the
    seeds). Each round's receivers are summed with one ``bincount`` over their distinct ids
    (in the order of their last place among the round's entries: the sums, and so the bits,
    do not depend on anything else), and only they are tested in the next round.
    """
    arrays = _push_arrays(g, op)
    thr = _thresholds(op, arrays, eps)
    scratch = _take_scratch(op, g.n_nodes)  # an error below leaves none half-written behind
    p, r, stamp, seen = scratch["p"], scratch["r"], scratch["stamp"], scratch["seen"]
    degree = op.degree
    # node ids as intp: every fancy index below would otherwise convert its int32 ids
    seeds = seeds.astype(np.intp)
    no_dangling = op.dangling.size == 0
    r[seeds] = seed_weights
    seen[seeds] = True
    cand, cand_r = seeds, np.asarray(seed_weights, dtype=np.float64)
    received = seeds.size  # receivers over all rounds (with repeats): a bound on the touched
    parts = [seeds]
    while cand.size:
        keep = np.flatnonzero(cand_r > thr[cand])  # positions: two takes, not two masks
        if keep.size == 0:
            break
        active = cand[keep]
        mass = cand_r[keep]
        r[active] = 0.0
        p[active] += (1.0 - damping) * mass
        counts = degree[active]
        nbrs, prob = _row_entries(arrays, active, counts)
        nbrs = nbrs.astype(np.intp)  # converted once, not by each of the five indexings
        vals = np.repeat(damping * mass, counts) * prob
        dangling_mass = 0.0 if no_dangling else damping * float(mass[counts == 0].sum())
        if dangling_mass > 0.0:
            nbrs = np.concatenate([nbrs, seeds])
            vals = np.concatenate([vals, dangling_mass * seed_weights])
        # The distinct receivers in O(len) with a stamp array (last writer wins: ``last`` is
        # each entry's receiver's last place), then each one's sum by that place: one bincount,
        # not an unbuffered add per entry.
        m = nbrs.size
        if scratch["pos"].size < m:
            scratch["pos"] = np.arange(2 * m, dtype=np.int64)
        pos = scratch["pos"][:m]
        stamp[nbrs] = pos
        last = stamp[nbrs]
        first = np.flatnonzero(last == pos)
        cand = nbrs[first]
        cand_r = r[cand] + np.bincount(last, weights=vals, minlength=m)[first]
        r[cand] = cand_r
        seen[cand] = True
        received += cand.size
        parts.append(cand)
    # the touched nodes, ascending: a scan of ``seen`` where they may be many, else the
    # distinct receivers
    nodes = (np.flatnonzero(seen) if received * 16 > g.n_nodes
             else unique_sorted(np.concatenate(parts).astype(np.int64)))
    p_out, r_out = p[nodes], r[nodes]
    p[nodes] = 0.0
    r[nodes] = 0.0
    seen[nodes] = False
    with op.lock:  # zeroed again: the next push, of any thread, reuses it
        op.scratch.append(scratch)
    return nodes, p_out, r_out


def _seed_arrays(
    n: int, seeds: np.ndarray, seed_weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    seeds = np.asarray(seeds, dtype=np.int64).ravel()
    if seeds.size == 0:
        raise ValueError("ppr_push needs at least one seed")
    if seeds.min() < 0 or seeds.max() >= n:
        raise ValueError(f"seed ids must lie in [0, {n})")
    if seed_weights is None:
        w = np.ones(seeds.size)
    else:
        w = np.asarray(seed_weights, dtype=np.float64).ravel()
        if w.shape != seeds.shape:
            raise ValueError("seed_weights must have one weight per seed")
        if not np.all(np.isfinite(w)) or w.min() < 0:
            raise ValueError("seed weights must be finite and nonnegative")
    uniq, inv = np.unique(seeds, return_inverse=True)
    w = np.bincount(inv, weights=w, minlength=uniq.size)
    total = w.sum()
    if total <= 0:
        raise ValueError("seed weights are all zero")
    keep = w > 0
    return uniq[keep], w[keep] / total


def ppr_push(
    g: CSRGraph,
    seeds: np.ndarray,
    seed_weights: np.ndarray | None = None,
    damping: float = 0.5,
    eps: float = 1e-6,
) -> tuple[np.ndarray, np.ndarray]:
    """Approximate PPR of one query by frontier local push; returns ``(node_ids, scores)``.

    ``seeds`` (duplicates summed) with nonnegative ``seed_weights`` (default uniform) form the
    personalization vector. Each round pushes, with array operations, every node whose
    residual exceeds ``eps * max(out_degree, 1)``; the cost follows the touched neighbourhood.
    ``node_ids`` (int64, ascending) are the touched nodes; ``scores`` (float32) sum to 1 and
    are the settled estimate plus the unpushed residual.

    Error bound: with ``r`` the final residual, ``||scores - x||_1 <= 2 * damping * ||r||_1``
    and ``||r||_1 <= eps * sum over touched u of max(out_degree(u), 1)``
    ``<= eps * (n_edges + n_nodes)``, where ``x`` is the exact PPR vector (untouched nodes
    have exact score 0 only up to the same bound).
    """
    _check_damping(damping)
    _check_eps(eps)
    seeds, w = _seed_arrays(g.n_nodes, seeds, seed_weights)
    nodes, p, r = _push_one(g, _operator(g), seeds, w, damping, eps)
    return nodes, (p + r).astype(np.float32)


def ppr_push_batch(
    g: CSRGraph,
    reset_rows: ResetLike,
    damping: float = 0.5,
    eps: float = 1e-6,
) -> sp.csr_array:
    """:func:`ppr_push` for each row of a ``(q, n)`` reset matrix; returns ``(q, n)`` CSR."""
    _check_damping(damping)
    _check_eps(eps)
    return _push_batch(g, _normalized_reset(reset_rows, g.n_nodes), damping, eps)


def _push_batch(g: CSRGraph, r: sp.csr_array, damping: float, eps: float) -> sp.csr_array:
    """Push for each row of a validated, row-normalized reset matrix."""
    n = g.n_nodes
    op = _operator(g)
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    counts = np.zeros(r.shape[0], dtype=np.int64)
    for i in range(r.shape[0]):
        lo, hi = r.indptr[i], r.indptr[i + 1]
        seeds = r.indices[lo:hi].astype(np.int64)
        nodes, p, res = _push_one(g, op, seeds, r.data[lo:hi], damping, eps)
        cols.append(nodes)
        vals.append((p + res).astype(np.float32))
        counts[i] = nodes.size
    indptr = np.concatenate([[0], np.cumsum(counts)])
    data = np.concatenate(vals) if vals else np.zeros(0, np.float32)
    idx = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    return sp.csr_array((data, idx, indptr), shape=(r.shape[0], n))


def ppr(
    g: CSRGraph,
    reset: ResetLike,
    method: Literal["auto", "power", "push"] = "auto",
    damping: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 100,
    eps: float = 1e-6,
    output: Literal["dense", "sparse"] = "dense",
    push_min_edges: int | None = None,
    push_max_seeds: int | None = None,
) -> np.ndarray | sp.csr_array:
    """Personalized PageRank for a ``(q, n)`` reset matrix by the named or the faster method.

    ``method="auto"`` picks per row (:func:`push_rows`, with ``push_min_edges`` and
    ``push_max_seeds``; :func:`choose_method`): a row is scored as it would be alone,
    whatever the batch. Returns a dense ``(q, n)`` float32 array, or a CSR array with
    ``output="sparse"``.
    """
    if output not in ("dense", "sparse"):
        raise ValueError(f"unknown output {output!r}")
    r, push = routed_rows(g, reset, method, damping, eps, push_min_edges, push_max_seeds)
    if push.any() and not push.all():  # each row by its own method, as it would alone
        return _mixed(g, r, push, damping, tol, max_iter, eps, output)
    if not (push.all() if push.size else method == "push"):
        res = _power(g, r, damping, tol, max_iter, np.dtype(np.float32))
        return sp.csr_array(res) if output == "sparse" else res
    res_sp = _push_batch(g, r, damping, eps)
    return res_sp if output == "sparse" else res_sp.toarray()


def routed_rows(g: CSRGraph, reset: ResetLike, method: str, damping: float, eps: float,
                push_min_edges: int | None = None, push_max_seeds: int | None = None
                ) -> tuple[sp.csr_array, np.ndarray]:
    """The checks and routing of :func:`ppr`: ``method``, ``damping`` and ``eps`` validated,
    the reset matrix row-normalized (:func:`normalized_reset`) and, per row, whether it is
    pushed (``"auto"``: :func:`push_rows` with ``push_min_edges``/``push_max_seeds``;
    ``"push"``: every row; ``"power"``: none)."""
    if method not in ("auto", "power", "push"):
        raise ValueError(f"unknown PPR method {method!r}")
    _check_damping(damping)
    _check_eps(eps)
    r = _normalized_reset(reset, g.n_nodes)
    push = (push_rows(g, r, push_min_edges, push_max_seeds) if method == "auto"
            else np.full(r.shape[0], method == "push", dtype=bool))
    return r, push


def push_rows(g: CSRGraph, reset: ResetLike, push_min_edges: int | None = None,
              push_max_seeds: int | None = None) -> np.ndarray:
    """Per row of a ``(q, n)`` reset matrix, whether ``method="auto"`` pushes it: on a graph
    with at least ``push_min_edges`` stored edges, a query with at most ``push_max_seeds``
    seeds (None: ``AUTO_PUSH_MIN_EDGES``, ``AUTO_PUSH_MAX_SEEDS``, the defaults of a direct
    call; see :func:`choose_method` for the measurements)."""
    min_edges = AUTO_PUSH_MIN_EDGES if push_min_edges is None else push_min_edges
    max_seeds = AUTO_PUSH_MAX_SEEDS if push_max_seeds is None else push_max_seeds
    if sp.issparse(reset):
        seeds_per_row = np.diff(sp.csr_array(reset).indptr)
    else:
        seeds_per_row = np.count_nonzero(np.atleast_2d(np.asarray(reset)), axis=1)
    if g.n_edges < min_edges:
        return np.zeros(seeds_per_row.size, dtype=bool)
    return seeds_per_row <= max_seeds


def _mixed(g: CSRGraph, r: sp.csr_array, push: np.ndarray, damping: float, tol: float,
           max_iter: int, eps: float, output: str) -> np.ndarray | sp.csr_array:
    """Push for the ``push`` rows, power iteration for the rest, rows in their order: one
    query with many seeds no longer sends a whole batch to power iteration (on a 4.7M-edge
    graph that made a batch 1.5x slower per question than one question at a time)."""
    push_idx, power_idx = np.flatnonzero(push), np.flatnonzero(~push)
    pushed = _push_batch(g, r[push_idx], damping, eps)
    powered = _power(g, r[power_idx], damping, tol, max_iter, np.dtype(np.float32))
    if output == "sparse":  # stacked rows back in their order
        order = np.argsort(np.concatenate([push_idx, power_idx]), kind="stable")
        return sp.csr_array(sp.vstack([pushed, sp.csr_array(powered)], format="csr")[order])
    out = np.empty((r.shape[0], g.n_nodes), dtype=np.float32)
    out[push_idx] = pushed.toarray()
    out[power_idx] = powered
    return out


def choose_method(g: CSRGraph, reset: ResetLike, push_min_edges: int | None = None,
                  push_max_seeds: int | None = None) -> Literal["power", "push"]:
    """The method ``ppr(method="auto")`` uses for this graph and ``(q, n)`` reset matrix.

    Push when the graph has at least ``push_min_edges`` stored edges and every query at most
    ``push_max_seeds`` seeds; power iteration otherwise. A query passes its ranking
    profile's (:attr:`gpurag.profile.RankingProfile.push_min_edges`, ``push_max_seeds``);
    None takes the module's ``AUTO_PUSH_*``, the same values. Measured on power-law graphs
    (bench/graph_algos.py, 2 CPU cores, eps=1e-6, 5 seeds): at 100k nodes / 1.26M stored edges
    push takes ~20 ms per query, single or batched, against ~60-140 ms for power iteration
    (~50-110 ms per query in a batch of 64), with a top-20 agreement of ~0.98 with the exact
    scores; at 260k stored edges power iteration is as fast (18 ms per query in a batch) and
    exact. On the 148k-passage index (528,851 nodes, 4.78M stored edges, damping 0.8, the
    graph queries' 40-121 seeds; bench/results/walk_push_2026-12-01_cpu_148k.md) power
    iteration at tol 1e-4 costs ~910 CPU ms per question, the push at the ranking profile's
    ``push_eps`` (3e-6) ~29, with 99.8% of the same top-20 passages. Below the size rule
    the walk stays power iteration (the shared evaluation sets' ranks are its ranks).
    With ~1000 seeds per query each seed's mass can fall under the push threshold and push
    returns little more than the reset vector, so such rows take power iteration.
    """
    rows = push_rows(g, reset, push_min_edges, push_max_seeds)
    return "push" if rows.size and rows.all() else "power"


def _check_eps(eps: float) -> None:
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")


def _check_damping(damping: float) -> None:
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must lie in [0, 1), got {damping}")
