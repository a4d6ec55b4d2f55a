"""The Leiden component per device: pylibcugraph ``leiden`` on cuda when importable (flat;
the size-capped hierarchy is built by :func:`~gpurag.graph.leiden.hierarchical_leiden`
re-running it on oversize communities through ``labels_fn``), else the host Leiden
(graspologic-native or igraph). Call shape: ``leiden(g, *, max_cluster_size, seed) ->
DataFrame`` with ``attrs["implementation"]`` set."""

from __future__ import annotations

import functools
from typing import Any

from gpurag.backends import probe
from gpurag.backends.part import Part
from gpurag.graph import leiden as host_leiden
from gpurag.graph import ppr_cugraph
from gpurag.graph.csr import CSRGraph


def _call(fn: Any, g: CSRGraph, *, max_cluster_size: int, seed: int) -> Any:
    return fn(g, max_cluster_size=max_cluster_size, seed=seed)


def leiden_part(device: str) -> Part:
    """The Leiden component on ``device``."""
    if device == "cuda" and probe.cugraph_available():
        name = probe.label(probe.CUGRAPH_DISTS, "pylibcugraph") + " leiden"
        fn = functools.partial(host_leiden.hierarchical_leiden,
                               labels_fn=ppr_cugraph.leiden_labels, implementation=name)
    else:
        name = probe.label(("graspologic-native", "igraph"), "host leiden (missing)")
        fn = host_leiden.hierarchical_leiden
    return Part(functools.partial(_call, fn), name)
