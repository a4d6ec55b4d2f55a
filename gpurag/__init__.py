"""gpurag: a GraphRAG engine -- documents to a knowledge graph to multi-hop answers, on one
GPU or on the CPU."""

from gpurag._openmp import set_wait_policy

set_wait_policy()  # before faiss or torch loads its OpenMP runtime

from gpurag._version import __version__  # noqa: E402
from gpurag.api import Index  # noqa: E402
from gpurag.config import IndexConfig, QueryConfig  # noqa: E402
from gpurag.errors import ConfigError, GpuragError, IndexFormatError, InputError  # noqa: E402

__all__ = [
    "ConfigError",
    "GpuragError",
    "Index",
    "IndexConfig",
    "IndexFormatError",
    "InputError",
    "QueryConfig",
    "__version__",
]
