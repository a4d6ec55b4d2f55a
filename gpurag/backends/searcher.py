"""Which vector searcher runs on a device, chosen once: the searcher factory of the runtime.

* ``cuda`` with FAISS-GPU installed: ``faiss.GpuIndexFlatIP`` / ``GpuIndexFlatL2``;
* ``cuda`` without it: :class:`~gpurag.vectors.searcher.TorchSearcher` (``kernels.knn``);
* ``cpu``: faiss-cpu (``IndexFlatIP`` / ``IndexFlatL2``), a stored index searched as it is;
* ``backend="torch"`` forces the torch kernel on any device (CPU parity tests), with
  ``dtype`` choosing the scan precision.

On-disk indexes stay FAISS files: :func:`searcher_for_index` wraps a loaded FAISS index (on the
CPU as is; on ``cuda`` its vectors, decoded in bounded chunks, move to the device as float16)
and :func:`query_index` is what an opened index searches at query time
(:func:`searcher_part`: the runtime's ``searcher``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpurag.backends import probe
from gpurag.backends.part import Part
from gpurag.device import package_version
from gpurag.vectors.searcher import (
    METRICS,
    FaissSearcher,
    TorchSearcher,
    _as_matrix,
    decoded_chunks,
)

BACKENDS = ("auto", "faiss", "faiss-gpu", "torch")
_FAISS_GPU_RES: list[Any] = []


def _faiss_flat(dim: int, metric: str, gpu: bool) -> Any:
    from gpurag.vectors.faiss_setup import configured_faiss

    faiss = configured_faiss()

    if not gpu:
        return faiss.IndexFlatIP(dim) if metric == "ip" else faiss.IndexFlatL2(dim)
    cls = faiss.GpuIndexFlatIP if metric == "ip" else faiss.GpuIndexFlatL2
    return cls(_gpu_resources(faiss), dim)


def _faiss_label(gpu: bool) -> str:
    if gpu:
        return probe.label(probe.FAISS_GPU_DISTS, "faiss-gpu")
    return probe.label(("faiss-cpu",), "faiss-cpu")


def _gpu_resources(faiss: Any) -> Any:
    """The process's one ``StandardGpuResources``, made on first use."""
    if not _FAISS_GPU_RES:
        _FAISS_GPU_RES.append(faiss.StandardGpuResources())
    return _FAISS_GPU_RES[0]


def choose_backend(device: str, backend: str = "auto") -> str:
    """``"faiss-gpu"``, ``"torch"`` or ``"faiss"`` for ``device`` (see the module docstring)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown kNN backend {backend!r}: use one of {BACKENDS}")
    on_cuda = str(device).startswith("cuda")
    if backend == "auto":
        if not on_cuda:
            return "faiss"
        return "faiss-gpu" if probe.faiss_gpu_available() else "torch"
    if backend == "faiss" and on_cuda and probe.faiss_gpu_available():
        return "faiss-gpu"
    if backend == "faiss-gpu" and not (on_cuda and probe.faiss_gpu_available()):
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


def _faiss_gpu_from_index(index: Any, metric: str) -> FaissSearcher:
    """A FAISS-GPU flat index (float16 storage) filled from ``index`` chunk by chunk."""
    from gpurag.vectors.faiss_setup import configured_faiss

    faiss = configured_faiss()

    cfg = faiss.GpuIndexFlatConfig()
    cfg.useFloat16 = True
    cls = faiss.GpuIndexFlatIP if metric == "ip" else faiss.GpuIndexFlatL2
    gpu = cls(_gpu_resources(faiss), int(index.d), cfg)
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
    from gpurag.vectors.faiss_setup import configured_faiss

    faiss = configured_faiss()

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
    through its own ``searched_by(factory)`` when it has one, else as it is. Either way the
    result has ``search(x, k) -> (scores, ids)`` and ``ntotal``."""
    if not str(device).startswith("cuda"):
        return index
    from gpurag.vectors.masked import MaskedIndex

    if isinstance(index, MaskedIndex):  # a device searcher of the live rows only, ids mapped
        return index.live_searcher(lambda rows: query_index(rows, device))
    if hasattr(index, "reconstruct_n") and hasattr(index, "metric_type"):
        return searcher_for_index(index, device)
    searched_by = getattr(index, "searched_by", None)
    return searched_by(lambda rows: query_index(rows, device)) if callable(searched_by) else index


def searcher_part(device: str) -> Part:
    """The searcher factory on ``device``: ``searcher(index) -> searchable``
    (:func:`query_index`)."""
    if not str(device).startswith("cuda"):
        name = _faiss_label(False) + " (the stored index)"
    elif probe.faiss_gpu_available():
        name = _faiss_label(True) + " GpuIndexFlat float16"
    else:
        name = "kernels.knn (torch " + (package_version("torch") or "?") + " float16 vectors)"

    def searcher(index: Any) -> Any:
        return query_index(index, device)

    return Part(searcher, name)
