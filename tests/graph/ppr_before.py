"""The host walk's solvers as they were before their per-call costs were cut (main at
550431a): the rewritten ones in :mod:`gpurag.graph.ppr` must give the same bits."""

import warnings

import numpy as np
import scipy.sparse as sp

from gpurag.graph.csr import CSRGraph
from gpurag.graph.ppr import ResetLike, _operator, _transition_transpose


def old_normalized_reset(reset: ResetLike, n: int) -> sp.csr_array:
    """Validate ``reset`` (q, n) or (n,), return it as float64 CSR with rows summing to 1."""
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
    if mat.nnz and (not np.all(np.isfinite(mat.data)) or mat.data.min() < 0):
        raise ValueError("reset weights must be finite and nonnegative")
    sums = np.asarray(mat.sum(axis=1)).ravel()
    zero = np.flatnonzero(sums <= 0)
    if zero.size:
        raise ValueError(
            f"reset row {int(zero[0])} is all zero (personalization needs positive weight)"
        )
    mat = sp.csr_array(sp.diags_array(1.0 / sums) @ mat)
    mat.eliminate_zeros()
    return mat



def old_power(
    g: CSRGraph, r: sp.csr_array, damping: float, tol: float, max_iter: int, dtype: np.dtype
) -> np.ndarray:
    """Power iteration on a validated, row-normalized reset matrix."""
    n, q = g.n_nodes, r.shape[0]
    if n == 0 or q == 0:
        return np.zeros((q, n), dtype=np.float32)
    op = _operator(g)
    pt = _transition_transpose(g, op, dtype)
    d = dtype.type(damping)
    coo = r.tocoo()
    r_nodes, r_cols, r_vals = coo.col, coo.row, coo.data.astype(dtype)
    dense_reset = r.nnz > 0.05 * n * q
    r_dense = r.T.toarray().astype(dtype) if dense_reset else None
    x = np.zeros((n, q), dtype=dtype)  # the result: a column is written when it converges
    x[r_nodes, r_cols] = r_vals
    noise_floor = 1e3 * np.finfo(dtype).eps
    # The iterate holds the active (unconverged) columns only, contiguous; it is compacted
    # when some converge, not gathered every iteration. Each column's arithmetic is its own,
    # so a question's scores do not depend on the batch it came in.
    active = np.arange(q)
    xa = x.copy()
    prev = np.full(q, np.inf)
    err = np.zeros(q)
    for _ in range(max_iter):
        x_new = pt @ xa
        x_new *= d
        # Column sums accumulate in float64: float32 sums over long columns drift by ~1e-5.
        coef = ((1 - d) + d * xa[op.dangling].sum(axis=0, dtype=np.float64)).astype(dtype)
        if r_dense is not None:
            x_new += r_dense * coef
        else:
            x_new[r_nodes, r_cols] += r_vals * coef[r_cols]
        diff = np.subtract(x_new, xa)
        np.abs(diff, out=diff)
        err_a = diff.sum(axis=0, dtype=np.float64)
        del diff
        err[active] = err_a
        xa = x_new
        # L1 change contracts by >= damping per step in exact arithmetic; a change that stops
        # shrinking (by less than halfway to 1) under the noise floor is rounding noise.
        stalled = (err_a > 0.5 * (1 + damping) * prev) & (err_a < noise_floor)
        done = (err_a < tol) | stalled
        prev = err_a
        if done.any():
            x[:, active[done]] = xa[:, done]
            keep = ~done
            if not keep.any():
                break
            active, prev = active[keep], prev[keep]
            xa = np.ascontiguousarray(xa[:, keep])
            moved = np.cumsum(keep) - 1
            if r_dense is not None:
                r_dense = np.ascontiguousarray(r_dense[:, keep])
            else:
                sel = keep[r_cols]
                r_nodes, r_cols, r_vals = r_nodes[sel], moved[r_cols[sel]], r_vals[sel]
    else:
        x[:, active] = xa
        warnings.warn(
            f"ppr_power did not converge in {max_iter} iterations "
            f"(max L1 change {float(err.max()):.2e} > tol {tol:.1e})",
            RuntimeWarning,
            stacklevel=3,
        )
    x /= x.sum(axis=0, keepdims=True, dtype=np.float64).astype(dtype)
    return np.ascontiguousarray(x.T, dtype=np.float32)
