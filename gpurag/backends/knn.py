"""The build's kNN component per device (alias candidates): FAISS-GPU ``GpuIndexFlatIP`` on
cuda when present, else ``kernels.knn.ExactIndex`` (torch fp16 matmul + top-k, fp32 re-rank)
on cuda, else faiss-cpu (:func:`gpurag.vectors.hnsw.build_host_knn`). Call shape:
``knn(vectors, *, approximate_above=None) -> index`` with ``search(queries, k)`` and
``ntotal`` (``approximate_above``: a row count from which the host index may trade exactness
for speed; device indexes stay exact)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpurag.backends import probe
from gpurag.backends.part import Part
from gpurag.device import package_version
from gpurag.vectors.hnsw import build_host_knn


def make_device_knn(device: str) -> Any:
    """The device kNN (:func:`gpurag.backends.searcher.make_searcher`), exact at every size."""

    def build(vectors: np.ndarray, *, approximate_above: int | None = None) -> Any:
        from gpurag.backends.searcher import make_searcher

        return make_searcher(vectors, device)

    return build


def knn_part(device: str) -> Part:
    """The kNN component on ``device``."""
    if device == "cuda" and probe.faiss_gpu_available():
        name = probe.label(probe.FAISS_GPU_DISTS, "faiss (GPU)") + " GpuIndexFlatIP"
        return Part(make_device_knn("cuda"), name)
    if device == "cuda":
        name = "kernels.knn (torch " + (package_version("torch") or "?") + " fp16 matmul top-k)"
        return Part(make_device_knn("cuda"), name)
    return Part(build_host_knn, probe.label(("faiss-cpu",), "faiss-cpu (missing)"))
