"""gpurag: a GraphRAG engine -- documents to a knowledge graph to multi-hop answers, on one
GPU or on the CPU."""

from gpurag._version import __version__
from gpurag.api import Index
from gpurag.config import IndexConfig, QueryConfig
from gpurag.errors import ConfigError, GpuragError, IndexFormatError, InputError

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
