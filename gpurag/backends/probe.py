"""What the process can run: the availability probes and version labels the backends choose
by (the only place they are asked; module-level so tests can substitute them)."""

from __future__ import annotations

from functools import lru_cache

from gpurag.device import version_label

CUGRAPH_DISTS = ("pylibcugraph-cu13", "pylibcugraph-cu12", "pylibcugraph")
FAISS_GPU_DISTS = ("faiss-gpu-cu13-cuvs", "faiss-gpu-cu12-cuvs", "faiss-gpu-cu12", "faiss-gpu")


def label(dists: tuple[str, ...], fallback: str) -> str:
    """``"dist version"`` of the first installed of ``dists``, else ``fallback``."""
    return version_label(*dists) or fallback


def cugraph_available() -> bool:
    from gpurag.graph import ppr_cugraph

    return ppr_cugraph.available()


def faiss_gpu_available() -> bool:
    """FAISS built with GPUs and at least one GPU visible."""
    try:
        import faiss
    except ImportError:
        return False
    try:
        return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    except Exception:  # a broken or CPU-only build
        return False


@lru_cache(maxsize=1)
def torch_cuda_available() -> bool:
    """torch installed and seeing a GPU (asked once per process, like ``device.cuda_available``)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
