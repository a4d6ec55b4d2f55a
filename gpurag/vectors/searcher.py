"""Exact vector searchers behind FAISS's ``search(x, k) -> (scores, ids)``: a FAISS index
(:class:`FaissSearcher`) or :class:`kernels.knn.ExactIndex` on a torch device
(:class:`TorchSearcher`; float16 scan, or bfloat16, with an exact float32 re-rank of the
candidates). Which one runs on a device is chosen by :mod:`gpurag.backends.searcher`.

Every searcher has ``search(x, k) -> (scores float32 (q, k), ids int64 (q, k))`` on NumPy
arrays (ids ``-1`` and scores ``-inf`` for ``+inf`` with L2, where fewer than ``k`` vectors
exist), ``ntotal``, ``dim``, ``metric`` and ``implementation`` (what ``gpurag info`` and the
manifest record). ``metric="l2"`` returns squared L2 distances, smallest first, as FAISS does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

METRICS = ("ip", "l2")


def _as_matrix(x: Any, dim: int | None = None, what: str = "vectors") -> np.ndarray:
    a = np.ascontiguousarray(np.atleast_2d(np.asarray(x)), dtype=np.float32)
    if a.ndim != 2 or (dim is not None and a.shape[1] != dim):
        want = f"(n, {dim})" if dim is not None else "(n, d)"
        raise ValueError(f"{what} must have shape {want}, got {np.shape(x)}")
    return a


def _pad(scores: np.ndarray, ids: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``(q, k)`` results with ``-1`` ids and +-inf scores where an index returned fewer."""
    q = ids.shape[0]
    fill = np.inf if metric == "l2" else -np.inf
    out_s = np.full((q, k), fill, dtype=np.float32)
    out_i = np.full((q, k), -1, dtype=np.int64)
    kk = min(k, ids.shape[1])
    out_s[:, :kk] = scores[:, :kk]
    out_i[:, :kk] = ids[:, :kk]
    out_s[out_i < 0] = fill
    return out_s, out_i


class FaissSearcher:
    """A FAISS index (CPU or GPU) with padded, float32/int64 NumPy results."""

    def __init__(self, index: Any, metric: str, implementation: str) -> None:
        self.index = index
        self.metric = metric
        self.dim = int(index.d)
        self.implementation = implementation

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def d(self) -> int:
        """The vector dimension (FAISS's name for it)."""
        return self.dim

    def search(self, x: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` per query row: ``(scores, ids)``."""
        from gpurag.vectors.faiss_index import search

        if k < 1:
            raise ValueError("k must be at least 1")
        q = _as_matrix(x, self.dim, "queries")
        scores, ids = search(self.index, q, k)
        return _pad(np.asarray(scores, np.float32), np.asarray(ids, np.int64), k, self.metric)


class TorchSearcher:
    """:class:`kernels.knn.ExactIndex` (inner product) on a torch device; L2 through an
    augmented inner product: ``<[x, 1], [y, -|y|^2/2]> = x.y - |y|^2/2``, whose order is that
    of ``-|x - y|^2``."""

    def __init__(self, vectors: np.ndarray, device: str, metric: str, dtype: Any = None) -> None:
        import torch

        from gpurag.kernels.knn import ExactIndex

        self.metric = metric
        self.dim = int(vectors.shape[1])
        self.device = torch.device(device)
        db = torch.from_numpy(vectors).to(self.device)
        if metric == "l2":
            db = torch.cat([db, -0.5 * (db * db).sum(dim=1, keepdim=True)], dim=1)
        self._index = ExactIndex(db.shape[1], self.device, compute_dtype=dtype)
        self._index.add(db)
        scan = str(self._index.compute_dtype).replace("torch.", "")
        rerank = " + float32 re-rank" if self._index.rerank else ""
        self.implementation = (f"kernels.knn torch-{self.device.type} {scan} scan{rerank} "
                               f"(torch {torch.__version__}, exact {metric})")

    @classmethod
    def from_index(cls, index: Any, device: str, dtype: Any = None) -> TorchSearcher:
        """Exact inner-product search over the decoded vectors of a FAISS ``index``, stored on
        ``device`` in ``dtype`` only (default float16 on cuda, float32 on the CPU); a reduced
        dtype re-ranks the candidates in float32 from the stored vectors."""
        import torch

        from gpurag.kernels.knn import ExactIndex

        self = cls.__new__(cls)
        self.metric = "ip"
        self.dim = int(index.d)
        self.device = torch.device(device)
        dtype = dtype or (torch.float16 if self.device.type == "cuda" else torch.float32)
        self._index = ExactIndex.from_scan(_device_vectors(index, self.device, dtype))
        scan = str(dtype).replace("torch.", "")
        rerank = " + float32 re-rank" if self._index.rerank else ""
        self.implementation = (f"kernels.knn torch-{self.device.type} {scan} vectors{rerank} "
                               f"(torch {torch.__version__}, exact ip over "
                               f"{type(index).__name__})")
        return self

    @property
    def ntotal(self) -> int:
        return self._index.ntotal

    @property
    def d(self) -> int:
        """The vector dimension (FAISS's name for it)."""
        return self.dim

    def search(self, x: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` per query row: ``(scores, ids)``."""
        import torch

        if k < 1:
            raise ValueError("k must be at least 1")
        q = torch.from_numpy(_as_matrix(x, self.dim, "queries")).to(self.device)
        if self.metric == "l2":
            q = torch.cat([q, torch.ones((q.shape[0], 1), dtype=q.dtype, device=q.device)], 1)
        scores, ids = self._index.search(q, k)
        if self.metric == "l2":  # |x - y|^2 = |x|^2 - 2 (x.y - |y|^2/2)
            scores = (q[:, :-1] * q[:, :-1]).sum(dim=1, keepdim=True) - 2 * scores
            scores = scores.clamp_min(0)
        return _pad(scores.float().cpu().numpy(), ids.cpu().numpy(), k, self.metric)


# Rows decoded from a FAISS index at a time when its vectors move to the device.
DECODE_ROWS = 1 << 16


def _ivf_of(index: Any) -> Any:
    from gpurag.vectors.faiss_setup import configured_faiss

    faiss = configured_faiss()

    try:
        return faiss.try_extract_index_ivf(index)
    except (AttributeError, RuntimeError, TypeError):  # not an IVF index (or not FAISS)
        return None


def decoded_chunks(index: Any, rows: int = DECODE_ROWS):
    """Yield ``(start, float32 (m, d) vectors)`` of any FAISS index (flat, scalar-quantized,
    HNSW or IVF), ``rows`` at a time through ``reconstruct_n`` (IVF gets its direct map first)."""
    ivf = _ivf_of(index)
    if ivf is not None:
        ivf.make_direct_map()
    n = int(index.ntotal)
    for start in range(0, n, rows):
        count = min(rows, n - start)
        yield start, np.asarray(index.reconstruct_n(start, count), np.float32)


def _device_vectors(index: Any, device: str, dtype: Any) -> Any:
    """The vectors of ``index`` as one ``(n, d)`` ``dtype`` tensor on ``device``, decoded in
    bounded chunks (host memory: one chunk of float32 at a time)."""
    import torch

    out = torch.empty((int(index.ntotal), int(index.d)), dtype=dtype, device=device)
    for start, chunk in decoded_chunks(index):
        out[start:start + len(chunk)] = torch.from_numpy(chunk).to(device=device, dtype=dtype)
    return out


