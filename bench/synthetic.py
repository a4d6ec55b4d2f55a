"""Synthetic power-law graphs and PPR reset batches for the graph-only benchmarks.

:func:`power_law_csr` makes a symmetric Chung-Lu graph (endpoint probability ~ rank^-alpha,
ids shuffled, self loops dropped, duplicate pairs summed into weights) with about ``n_edges``
stored entries, as CSR ``(indptr int64, indices int32, weights float32)``, with one of:

* ``pylibraft`` (``pylibraft.random.rmat``, an R-MAT graph, when RAPIDS is installed; cuda);
* ``torch`` (on a torch device, the fast path on a GPU);
* ``numpy`` (the host, in bounded chunks of endpoint pairs).

``generator="auto"`` takes the first that applies to the device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PAIR_FACTOR = 0.55  # pairs drawn per stored entry: symmetrized and deduplicated ~ n_edges
CHUNK_PAIRS = 1 << 24


def _csr_from_keys(keys: np.ndarray, counts: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    rows = keys // n
    indices = (keys - rows * n).astype(np.int32)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, indices, counts.astype(np.float32)


def power_law_numpy(n_edges: int, avg_degree: int = 10, alpha: float = 0.8,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chung-Lu graph on the host (see the module docstring)."""
    n = max(2, int(n_edges) // avg_degree)
    rng = np.random.default_rng(seed)
    w = np.arange(1, n + 1, dtype=np.float64) ** -alpha
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    perm = rng.permutation(n).astype(np.int64)
    m = int(n_edges * PAIR_FACTOR)
    parts = []
    for start in range(0, m, CHUNK_PAIRS):
        size = min(CHUNK_PAIRS, m - start)
        src = perm[np.minimum(np.searchsorted(cdf, rng.random(size)), n - 1)]
        dst = perm[np.minimum(np.searchsorted(cdf, rng.random(size)), n - 1)]
        keep = src != dst
        src, dst = src[keep], dst[keep]
        parts += [src * n + dst, dst * n + src]
    keys, counts = np.unique(np.concatenate(parts), return_counts=True)
    return _csr_from_keys(keys, counts, n)


def power_law_torch(n_edges: int, device: Any, avg_degree: int = 10, alpha: float = 0.8,
                    seed: int = 0) -> tuple[Any, Any, Any]:
    """Chung-Lu graph built with torch on ``device``; CSR tensors on that device."""
    import torch

    device = torch.device(device)
    n = max(2, int(n_edges) // avg_degree)
    gen = torch.Generator(device=device).manual_seed(seed)
    w = torch.arange(1, n + 1, dtype=torch.float64, device=device).pow_(-alpha)
    cdf = torch.cumsum(w, 0)
    cdf /= cdf[-1].clone()
    del w
    m = int(n_edges * PAIR_FACTOR)
    perm = torch.randperm(n, device=device, generator=gen)

    def pick() -> torch.Tensor:
        u = torch.rand(m, dtype=torch.float64, device=device, generator=gen)
        return perm[torch.searchsorted(cdf, u).clamp_(max=n - 1)]

    src, dst = pick(), pick()
    keep = src != dst
    src, dst = src[keep], dst[keep]
    key = torch.cat([src * n + dst, dst * n + src])
    src = dst = keep = None
    key, counts = torch.unique(key, sorted=True, return_counts=True)
    rows = key // n
    indices = (key - rows * n).to(torch.int32)
    key = None
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=device)
    torch.cumsum(torch.bincount(rows, minlength=n), 0, out=indptr[1:])
    return indptr, indices, counts.to(torch.float32)


def power_law_pylibraft(n_edges: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """R-MAT edges from ``pylibraft.random.rmat`` (a=0.57, b=c=0.19), symmetrized on the host."""
    import cupy as cp
    from pylibraft.random import rmat

    scale = max(1, int(np.ceil(np.log2(max(2, n_edges // 10)))))
    m = int(n_edges * PAIR_FACTOR)
    theta = cp.asarray(np.tile([0.57, 0.19, 0.19, 0.05], scale), dtype=cp.float32)
    out = cp.empty((m, 2), dtype=cp.int64)
    rmat(out, theta, scale, scale, seed=seed)
    n = 1 << scale
    src, dst = out[:, 0], out[:, 1]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    keys, counts = cp.unique(cp.concatenate([src * n + dst, dst * n + src]), return_counts=True)
    return _csr_from_keys(cp.asnumpy(keys), cp.asnumpy(counts), n)


def power_law_csr(n_edges: int, device: str = "cpu", generator: str = "auto",
                  seed: int = 0) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], str]:
    """Host CSR arrays of a synthetic power-law graph and the generator that made them."""
    if generator == "auto":
        generator = "numpy"
        if device.startswith("cuda"):
            try:
                import pylibraft.random  # noqa: F401

                generator = "pylibraft"
            except ImportError:
                generator = "torch"
    if generator == "pylibraft":
        try:
            return power_law_pylibraft(n_edges, seed), "pylibraft.random.rmat"
        except Exception as exc:  # never run here (no RAPIDS image yet): fall back, say why
            generator, fallback = "torch", f" (pylibraft failed: {type(exc).__name__}: {exc})"
    else:
        fallback = ""
    if generator == "torch":
        csr = power_law_torch(n_edges, device, seed=seed)
        return tuple(t.cpu().numpy() for t in csr), f"torch Chung-Lu ({device}){fallback}"
    if generator == "numpy":
        return power_law_numpy(n_edges, seed=seed), "numpy Chung-Lu"
    raise ValueError(f"unknown generator {generator!r}")


def random_reset(n: int, q: int, seed: int) -> Any:
    """``(q, n)`` SciPy CSR with 1-4 random seeds per query (as entity seeds would be)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    per = rng.integers(1, 5, q)
    rows = np.repeat(np.arange(q), per)
    cols = rng.integers(0, n, per.sum())
    r = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(q, n))
    r.sum_duplicates()
    return r
