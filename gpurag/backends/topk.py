"""The top-k component per device: ``kernels.topk`` (torch) on cuda, NumPy ``argpartition``
on the host; ``topk(scores, k) -> (values, ids)`` per row of a 2-D array."""

from __future__ import annotations

from typing import Any

from gpurag.backends.part import Part
from gpurag.device import package_version
from gpurag.graph.ppr_top import numpy_topk


def torch_topk(scores: Any, k: int) -> tuple[Any, Any]:
    """Top-``k`` of each row of a 2-D torch tensor on its device, ties (also at the cut) to
    the lower id, as the host's :func:`~gpurag.graph.ppr_top.numpy_topk` breaks them
    (``kernels.topk.topk_dense_stable``)."""
    from gpurag.kernels.topk import topk_dense_stable

    return topk_dense_stable(scores, k)


def topk_part(device: str) -> Part:
    """The top-k component on ``device``."""
    if device == "cpu":
        return Part(numpy_topk, "numpy " + (package_version("numpy") or "?") + " argpartition")
    return Part(torch_topk, "kernels.topk (torch " + (package_version("torch") or "?") + ")")
