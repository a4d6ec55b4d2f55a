"""Name registries of plug-in parts, below :mod:`gpurag.config` (it imports nothing of gpurag's).

``EXTRACTORS`` maps an extractor name to its factory. :mod:`gpurag.extract` fills it with the
built-in extractors and re-exports it, so a plug-in registers with
``gpurag.extract.EXTRACTORS["mine"] = Mine`` (the same dict); :mod:`gpurag.config` checks
``IndexConfig.extractor`` against its names without importing an extractor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

EXTRACTORS: dict[str, Callable[..., Any]] = {}
