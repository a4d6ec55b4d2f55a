"""Zero-token agent memory: traces appended as they happen, retrieved with a dense, a lexical,
a relational (PPR from the question's anchor entities) and a temporal view; no LLM on write
or read.

The names below load on first use, so ``gpurag`` commands that never touch memory (the
command line imports :mod:`gpurag.memory.cli` to list its subcommands) do not pay for it."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpurag.memory.config import MemoryConfig
    from gpurag.memory.consistency import Dropped
    from gpurag.memory.memory import Hit, Memory, MemoryResult

_WHERE = {"MemoryConfig": "gpurag.memory.config", "Dropped": "gpurag.memory.consistency",
          "Hit": "gpurag.memory.memory", "Memory": "gpurag.memory.memory",
          "MemoryResult": "gpurag.memory.memory"}
__all__ = ["Dropped", "Hit", "Memory", "MemoryConfig", "MemoryResult"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'gpurag.memory' has no attribute {name!r}")
