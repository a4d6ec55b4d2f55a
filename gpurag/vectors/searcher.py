"""Exact vector search on the build's device behind FAISS's ``search(x, k) -> (scores, ids)``.

:func:`make_searcher` picks, once, the implementation for a device:

* ``cuda`` with FAISS-GPU installed: ``faiss.GpuIndexFlatIP`` / ``GpuIndexFlatL2``;
* ``cuda`` without it: :class:`kernels.knn.ExactIndex` (torch; float16 scan, or bfloat16, with
  an exact float32 re-rank of the candidates);
* ``cpu``: faiss-cpu (``IndexFlatIP`` / ``IndexFlatL2``);
* ``backend="torch"`` forces the torch kernel on any device (CPU parity tests), with
  ``dtype`` choosing the scan precision.

Every searcher has ``search(x, k) -> (scores float32 (q, k), ids int64 (q, k))`` on NumPy
arrays (ids ``-1`` and scores ``-inf`` for ``+inf`` with L2, where fewer than ``k`` vectors
exist), ``ntotal``, ``dim``, ``metric`` and ``implementation`` (what ``gpurag info`` and the
manifest record). ``metric="l2"`` returns squared L2 distances, smallest first, as FAISS does.
On-disk indexes stay FAISS files: :func:`searcher_for_index` wraps a loaded FAISS index (on the
CPU as is; on ``cuda`` its vectors move to the device searcher).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpurag.device import package_version

METRICS = ("ip", "l2")
BACKENDS = ("auto", "faiss", "faiss-gpu", "torch")
_FAISS_GPU_RES: list[Any] = []


def _faiss_gpu_available() -> bool:
    try:
        import faiss
    except ImportError:
        return False
    try:
        return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    except Exception:  # a broken or CPU-only build
        return False


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

        from kernels.knn import ExactIndex

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

    @property
    def ntotal(self) -> int:
        return self._index.ntotal

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


def _faiss_flat(dim: int, metric: str, gpu: bool) -> Any:
    import faiss

    if not gpu:
        return faiss.IndexFlatIP(dim) if metric == "ip" else faiss.IndexFlatL2(dim)
    if not _FAISS_GPU_RES:
        _FAISS_GPU_RES.append(faiss.StandardGpuResources())
    cls = faiss.GpuIndexFlatIP if metric == "ip" else faiss.GpuIndexFlatL2
    return cls(_FAISS_GPU_RES[0], dim)


def _faiss_label(gpu: bool) -> str:
    if gpu:
        for dist in ("faiss-gpu-cu13-cuvs", "faiss-gpu-cu12-cuvs", "faiss-gpu-cu12", "faiss-gpu"):
            version = package_version(dist)
            if version:
                return f"{dist} {version}"
        return "faiss-gpu"
    return f"faiss-cpu {package_version('faiss-cpu') or ''}".strip()


def choose_backend(device: str, backend: str = "auto") -> str:
    """``"faiss-gpu"``, ``"torch"`` or ``"faiss"`` for ``device`` (see the module docstring)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown kNN backend {backend!r}: use one of {BACKENDS}")
    on_cuda = str(device).startswith("cuda")
    if backend == "auto":
        if not on_cuda:
            return "faiss"
        return "faiss-gpu" if _faiss_gpu_available() else "torch"
    if backend == "faiss" and on_cuda and _faiss_gpu_available():
        return "faiss-gpu"
    if backend == "faiss-gpu" and not (on_cuda and _faiss_gpu_available()):
        raise ValueError("backend 'faiss-gpu' needs device cuda and a FAISS build with GPUs")
    return backend


def make_searcher(vectors: Any, device: str = "cpu", metric: str = "ip",
                  backend: str = "auto", dtype: Any = None) -> FaissSearcher | TorchSearcher:
    """An exact searcher over ``vectors`` ``(n, d)`` for ``device`` (see the module docstring).

    ``dtype`` (torch backend only): the scan precision, float16 on CUDA and float32 on the CPU
    by default; a reduced one keeps float32 vectors for the re-rank.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}: use one of {METRICS}")
    db = _as_matrix(vectors)
    kind = choose_backend(device, backend)
    if kind == "torch":
        return TorchSearcher(db, device, metric, dtype)
    gpu = kind == "faiss-gpu"
    index = _faiss_flat(db.shape[1], metric, gpu)
    index.add(db)
    flat = ("GpuIndexFlat" if gpu else "IndexFlat") + metric.upper()
    return FaissSearcher(index, metric, f"{_faiss_label(gpu)} {flat}")


def searcher_for_index(index: Any, device: str = "cpu", backend: str = "auto",
                       dtype: Any = None) -> FaissSearcher | TorchSearcher:
    """A searcher over a loaded FAISS index: the index itself on the CPU (flat, HNSW or IVF, as
    built); on ``cuda`` an exact device searcher over its reconstructed vectors."""
    import faiss

    metric = "ip" if index.metric_type == faiss.METRIC_INNER_PRODUCT else "l2"
    kind = choose_backend(device, backend)
    if kind == "faiss" and not str(device).startswith("cuda"):
        return FaissSearcher(index, metric, f"{_faiss_label(False)} {type(index).__name__}")
    if index.ntotal == 0:
        vectors = np.zeros((0, index.d), np.float32)
    else:
        if hasattr(index, "make_direct_map"):  # IVF: reconstruct needs the direct map
            index.make_direct_map()
        vectors = index.reconstruct_n(0, index.ntotal)
    return make_searcher(vectors, device, metric, backend, dtype)
