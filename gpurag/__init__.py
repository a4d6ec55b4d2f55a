"""gpurag: a GraphRAG engine -- documents to a knowledge graph to multi-hop answers, on one
GPU or on the CPU."""

__version__ = "0.1.0"

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
