"""Graph algorithms as pure functions over CSR arrays (CPU backend).

``csr`` holds the graph (:class:`CSRGraph`, :func:`build_csr`, :func:`save`, :func:`load`),
``ppr`` personalized PageRank (batched power iteration, frontier push; the dispatcher
``ppr.ppr`` is exported here as :func:`personalized_pagerank` so that ``gpurag.graph.ppr``
stays the module), ``leiden`` hierarchical Leiden with a community-size cap and modularity.
"""

from gpurag.graph.csr import CSRGraph, build_csr, from_scipy, load, save, to_scipy
from gpurag.graph.leiden import hierarchical_leiden, modularity
from gpurag.graph.ppr import ppr as personalized_pagerank
from gpurag.graph.ppr import ppr_power, ppr_push, ppr_push_batch

__all__ = [
    "CSRGraph",
    "build_csr",
    "from_scipy",
    "hierarchical_leiden",
    "load",
    "modularity",
    "personalized_pagerank",
    "ppr_power",
    "ppr_push",
    "ppr_push_batch",
    "save",
    "to_scipy",
]
