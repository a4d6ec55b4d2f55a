"""The implementation of each part of the runtime on a device, chosen once (one module per
component): the only code that asks which device, library or GPU is there.

* :mod:`~gpurag.backends.embed` -- ``embedders(spec) -> Embedder`` (ONNX on the CPU, torch
  float16 on cuda);
* :mod:`~gpurag.backends.searcher` -- ``searcher(index) -> searchable``: what a query searches
  for a stored FAISS index (the index itself on the CPU, FAISS-GPU or ``kernels.knn`` on cuda);
* :mod:`~gpurag.backends.knn` -- the build's kNN (alias candidates);
* :mod:`~gpurag.backends.ppr` -- ``ppr(g, reset, *, k, lo=0, hi=None, gather=None, damping,
  tol, max_iter=100, method="auto", eps=1e-6, full=False, local_fanout=None,
  push_min_edges=None, push_max_seeds=None) -> PPRTop`` (the walk passes every keyword but
  ``max_iter`` and ``full``: :data:`~gpurag.backends.part.PPR_WALK_KEYWORDS`; a part may
  ignore ``method``, ``eps`` and the push's size rule ``push_min_edges``/``push_max_seeds``),
  and the full-output PPR (``scores_part``) that memory uses;
* :mod:`~gpurag.backends.leiden` -- ``leiden(g, *, max_cluster_size, seed) -> DataFrame``;
* :mod:`~gpurag.backends.topk` -- ``topk(scores, k) -> (values, ids)``;
* :mod:`~gpurag.backends.query_device` -- ``query_walk``: the walk segment of graph queries
  on the device (None on the CPU);
* :mod:`~gpurag.backends.rerank` -- ``rerankers(name, retriever, checkpoint=None)``;
* :mod:`~gpurag.backends.tables` -- the table engine (pandas).

Each part has ``implementation`` (see :class:`~gpurag.backends.part.Part`).
:func:`parts_for` is what :meth:`gpurag.runtime.Runtime.create` calls; nothing else below the
edge imports this package for a choice.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from gpurag.backends.embed import embedders_part
from gpurag.backends.knn import knn_part
from gpurag.backends.leiden import leiden_part
from gpurag.backends.ppr import ppr_part, scores_part
from gpurag.backends.query_device import query_walk_part
from gpurag.backends.rerank import rerankers_part
from gpurag.backends.searcher import searcher_part
from gpurag.backends.tables import tables_part
from gpurag.backends.topk import topk_part


@functools.lru_cache(maxsize=4)
def _device_parts(device: str) -> dict[str, Any]:
    return {"embedders": embedders_part(device), "searcher": searcher_part(device),
            "knn": knn_part(device), "ppr": ppr_part(device),
            "ppr_scores": scores_part(device), "leiden": leiden_part(device),
            "topk": topk_part(device), "tables": tables_part(device),
            "query_walk": query_walk_part(device)}


def parts_for(device: str, gat_checkpoint: str | os.PathLike | None = None) -> dict[str, Any]:
    """Every part on ``device`` (``"cpu"`` or ``"cuda"``), by :class:`~gpurag.runtime.Runtime`
    field name; the device parts are resolved once per process, the reranker loader (which
    caches per retriever) is new per call."""
    return {**_device_parts(device), "rerankers": rerankers_part(device, gat_checkpoint)}


__all__ = ["parts_for"]
