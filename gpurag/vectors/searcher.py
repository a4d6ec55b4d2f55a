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
CPU as is; on ``cuda`` its vectors, decoded in bounded chunks, move to the device as float16)
and :func:`query_index` is what an opened index searches at query time.
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


# Rows decoded from a FAISS index at a time when its vectors move to the device.
DECODE_ROWS = 1 << 16


def _ivf_of(index: Any) -> Any:
    import faiss

    try:
        return faiss.try_extract_index_ivf(index)
    except (AttributeError, RuntimeError):  # not an IVF index (or an older faiss)
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


def _faiss_gpu_from_index(index: Any, metric: str) -> FaissSearcher:
    """A FAISS-GPU flat index (float16 storage) filled from ``index`` chunk by chunk."""
    import faiss

    if not _FAISS_GPU_RES:
        _FAISS_GPU_RES.append(faiss.StandardGpuResources())
    cfg = faiss.GpuIndexFlatConfig()
    cfg.useFloat16 = True
    cls = faiss.GpuIndexFlatIP if metric == "ip" else faiss.GpuIndexFlatL2
    gpu = cls(_FAISS_GPU_RES[0], int(index.d), cfg)
    for _, chunk in decoded_chunks(index):
        gpu.add(chunk)
    flat = "GpuIndexFlat" + metric.upper()
    return FaissSearcher(gpu, metric, f"{_faiss_label(True)} {flat} float16 (from "
                                      f"{type(index).__name__})")


def searcher_for_index(index: Any, device: str = "cpu", backend: str = "auto",
                       dtype: Any = None) -> FaissSearcher | TorchSearcher:
    """A searcher over a loaded FAISS index: the index itself on the CPU (flat, SQ, HNSW or
    IVF, as built); on ``cuda`` (or with ``backend="torch"``) an exact device searcher over its
    decoded vectors (``reconstruct_n``, in bounded chunks), held as float16 on cuda (``dtype``
    chooses; float32 on the CPU) with a float32 re-rank of the candidates from those vectors."""
    import faiss

    metric = "ip" if index.metric_type == faiss.METRIC_INNER_PRODUCT else "l2"
    kind = choose_backend(device, backend)
    if kind == "faiss":  # the CPU, or faiss asked for where FAISS has no GPU: the index as is
        return FaissSearcher(index, metric, f"{_faiss_label(False)} {type(index).__name__}")
    if kind == "faiss-gpu":
        return _faiss_gpu_from_index(index, metric)
    if metric == "l2":  # the augmented L2 form needs the float32 vectors
        vectors = np.zeros((0, index.d), np.float32)
        if index.ntotal:
            vectors = np.concatenate([c for _, c in decoded_chunks(index)])
        return make_searcher(vectors, device, metric, "torch", dtype)
    return TorchSearcher.from_index(index, device, dtype)


def query_index(index: Any, device: str) -> Any:
    """What a query searches for a loaded vector index: on the CPU ``index`` itself (host
    FAISS, results exactly as before); on cuda a device searcher made from it: a FAISS index
    through :func:`searcher_for_index`, another object (e.g. an adapter over a names index)
    through its own ``to_device(device)`` when it has one, else as it is. Either way the
    result has ``search(x, k) -> (scores, ids)`` and ``ntotal``."""
    if not str(device).startswith("cuda"):
        return index
    if hasattr(index, "reconstruct_n") and hasattr(index, "metric_type"):
        return searcher_for_index(index, device)
    to_device = getattr(index, "to_device", None)
    return to_device(device) if callable(to_device) else index
