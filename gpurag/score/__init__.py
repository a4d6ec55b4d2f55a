"""Deprecated: the rerankers moved to :mod:`gpurag.rerank` (the setting is ``rerank``).

``gpurag.score`` and ``gpurag.score.<module>`` stay importable (they are the
``gpurag.rerank`` modules themselves) and warn.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

warnings.warn("gpurag.score is deprecated: import gpurag.rerank", DeprecationWarning,
              stacklevel=2)

from gpurag.rerank import *  # noqa: E402,F403
from gpurag.rerank import __all__  # noqa: E402,F401


class _RerankAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``gpurag.score.X`` as the module ``gpurag.rerank.X``."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.startswith(__name__ + "."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec: Any) -> Any:
        return importlib.import_module("gpurag.rerank." + spec.name.split(".", 2)[2])

    def exec_module(self, module: Any) -> None:
        return None


if not any(isinstance(f, _RerankAlias) for f in sys.meta_path):
    sys.meta_path.insert(0, _RerankAlias())
