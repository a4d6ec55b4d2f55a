"""Exact inner-product kNN: chunked matmul over the database + running top-k merge (torch).

For each block of queries, the database is scanned in chunks of rows: ``S = Q @ D_c^T`` (a
dense GEMM, tensor cores on GPU), ``topk(S)`` per chunk, merged into the running top-k. The
score matrix of the whole database never exists, so memory is ``O(q * chunk)``.

Precision: on CUDA the GEMM runs in float16 (or bfloat16) with a float32 re-rank: the scan keeps
``k + rerank_extra`` candidates, whose scores are then recomputed exactly in float32 from the
float32 vectors, and the best ``k`` of those are returned. For unit vectors a float16 score is
within about 1.5e-3 of the exact one, so the result equals the exact float32 top-k unless more
than ``rerank_extra`` database rows score within ~3e-3 below the k-th best. On CPU everything
is float32 (no re-rank needed). Ties: order among equal scores is unspecified.

:func:`knn_reference` (NumPy, float64) is the specification the tests check against.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

# Budget for one (query block x database chunk) score tile, in elements.
TILE_ELEMENTS = 1 << 26
DEFAULT_RERANK_EXTRA = 64


def _default_compute_dtype(device: torch.device) -> torch.dtype:
    return torch.float16 if device.type == "cuda" else torch.float32


def _to_tensor(a: Any, device: torch.device) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a.to(device=device)
    return torch.as_tensor(np.ascontiguousarray(a, dtype=np.float32), device=device)


class ExactIndex:
    """Exact inner-product index held on one device, FAISS-like: ``add``, ``search``.

    ``compute_dtype`` defaults to float16 on CUDA and float32 on CPU; with a reduced
    ``compute_dtype`` a float32 copy is kept for the re-rank (``rerank=False`` drops it and
    returns the reduced-precision scores, cast to float32).
    """

    def __init__(
        self,
        dim: int,
        device: str | torch.device = "cpu",
        compute_dtype: torch.dtype | None = None,
        rerank: bool = True,
        rerank_extra: int = DEFAULT_RERANK_EXTRA,
    ) -> None:
        self.dim = int(dim)
        self.device = torch.device(device)
        self.compute_dtype = compute_dtype or _default_compute_dtype(self.device)
        self.reduced = self.compute_dtype != torch.float32
        self.rerank = rerank and self.reduced
        self.rerank_extra = int(rerank_extra)
        self._scan = torch.empty((0, self.dim), dtype=self.compute_dtype, device=self.device)
        self._exact: torch.Tensor | None = (
            torch.empty((0, self.dim), dtype=torch.float32, device=self.device)
            if self.rerank
            else None
        )

    @classmethod
    def from_scan(cls, scan: torch.Tensor, rerank: bool = True,
                  rerank_extra: int = DEFAULT_RERANK_EXTRA) -> ExactIndex:
        """An index over ``scan`` (n, dim), used as given (no copy): its dtype is the scan
        precision, and the re-rank (for a reduced dtype) recomputes the candidates' scores in
        float32 from ``scan`` itself (exact for the stored vectors, no float32 copy kept)."""
        if scan.ndim != 2:
            raise ValueError("scan must have shape (n, dim)")
        index = cls(scan.shape[1], scan.device, scan.dtype, rerank=False,
                    rerank_extra=rerank_extra)
        index._scan = scan
        index.rerank = rerank and index.reduced
        index._exact = scan if index.rerank else None
        return index

    @property
    def ntotal(self) -> int:
        return self._scan.shape[0]

    def add(self, vectors: Any) -> None:
        """Append ``(m, dim)`` vectors (NumPy or torch); ids continue from ``ntotal``."""
        x = _to_tensor(vectors, self.device).to(torch.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"vectors must have shape (m, {self.dim})")
        shared = self._exact is self._scan
        self._scan = torch.cat([self._scan, x.to(self.compute_dtype)])
        if shared:
            self._exact = self._scan
        elif self._exact is not None:
            self._exact = torch.cat([self._exact, x])

    def search(self, queries: Any, k: int, chunk_rows: int | None = None) -> tuple[Any, Any]:
        """Top-``k`` ``(scores float32, ids int64)`` per query; ids -1 where fewer than k.

        NumPy queries give NumPy results (FAISS's protocol); torch queries give tensors on the
        index's device.
        """
        as_numpy = not isinstance(queries, torch.Tensor)
        q = _to_tensor(queries, self.device).to(torch.float32)
        if q.ndim == 1:
            q = q[None, :]
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise ValueError(f"queries must have shape (q, {self.dim})")
        scores, ids = _search(q, self._scan, self._exact, k, self.rerank_extra, chunk_rows)
        if as_numpy:
            return scores.cpu().numpy(), ids.cpu().numpy()
        return scores, ids


def knn_search(
    queries: Any,
    database: Any,
    k: int,
    device: str | torch.device | None = None,
    compute_dtype: torch.dtype | None = None,
    rerank: bool = True,
    chunk_rows: int | None = None,
) -> tuple[Any, Any]:
    """Exact top-``k`` inner products of ``queries`` (q, d) against ``database`` (N, d).

    One-shot form of :class:`ExactIndex` (the database is copied/cast for the call). Device:
    ``device``, else the database tensor's, else cpu.
    """
    if device is None:
        device = database.device if isinstance(database, torch.Tensor) else "cpu"
    db = _to_tensor(database, torch.device(device))
    index = ExactIndex(db.shape[1], device, compute_dtype, rerank)
    index.add(db)
    return index.search(queries, k, chunk_rows)


def _merge(
    best_v: torch.Tensor, best_i: torch.Tensor, v: torch.Tensor, i: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    cat_v = torch.cat([best_v, v], dim=1)
    cat_i = torch.cat([best_i, i], dim=1)
    top_v, pos = torch.topk(cat_v, min(k, cat_v.shape[1]), dim=1)
    return top_v, torch.gather(cat_i, 1, pos)


def _search(
    q32: torch.Tensor,
    scan: torch.Tensor,
    exact: torch.Tensor | None,
    k: int,
    rerank_extra: int,
    chunk_rows: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    nq, dev = q32.shape[0], q32.device
    n = scan.shape[0]
    k = int(k)
    if k < 1:
        raise ValueError("k must be at least 1")
    out_v = torch.full((nq, k), float("-inf"), dtype=torch.float32, device=dev)
    out_i = torch.full((nq, k), -1, dtype=torch.int64, device=dev)
    if n == 0 or nq == 0:
        return out_v, out_i
    keep = min(n, k + rerank_extra if exact is not None else k)
    q_block = max(1, min(nq, 4096))
    rows = chunk_rows or max(keep, TILE_ELEMENTS // q_block)
    for a in range(0, nq, q_block):
        qs = q32[a : a + q_block]
        qc = qs.to(scan.dtype)
        best_v = torch.empty((qs.shape[0], 0), dtype=torch.float32, device=dev)
        best_i = torch.empty((qs.shape[0], 0), dtype=torch.int64, device=dev)
        for c in range(0, n, rows):
            s = qc @ scan[c : c + rows].T  # (qb, rows) in the compute dtype
            v, i = torch.topk(s, min(keep, s.shape[1]), dim=1)
            best_v, best_i = _merge(best_v, best_i, v.float(), i + c, keep)
        if exact is not None:  # exact float32 scores of the candidates, then the final top-k
            # elementwise product + sum: plain float32 (a bmm could run in TF32)
            best_v = (exact[best_i].float() * qs[:, None, :]).sum(dim=2)  # (qb, keep)
            best_v, pos = torch.topk(best_v, min(k, keep), dim=1)
            best_i = torch.gather(best_i, 1, pos)
        kk = best_v.shape[1]
        out_v[a : a + q_block, :kk] = best_v[:, :k]
        out_i[a : a + q_block, :kk] = best_i[:, :k]
    return out_v, out_i


def knn_reference(
    queries: np.ndarray, database: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy float64 reference: full score matrix, stable sort (ties by lower id)."""
    qd = np.atleast_2d(np.asarray(queries, dtype=np.float64))
    db = np.asarray(database, dtype=np.float64)
    scores = qd @ db.T
    kk = min(k, db.shape[0])
    order = np.argsort(-scores, axis=1, kind="stable")[:, :kk]
    out_v = np.full((qd.shape[0], k), -np.inf)
    out_i = np.full((qd.shape[0], k), -1, dtype=np.int64)
    out_v[:, :kk] = np.take_along_axis(scores, order, axis=1)
    out_i[:, :kk] = order
    return out_v, out_i
