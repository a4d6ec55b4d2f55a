"""Zero-token agent memory: traces appended as they happen, retrieved with a dense, a lexical,
a relational (PPR from the question's anchor entities) and a temporal view; no LLM on write
or read."""

from gpurag.memory.config import MemoryConfig
from gpurag.memory.consistency import Dropped
from gpurag.memory.memory import Hit, Memory, MemoryResult

__all__ = ["Dropped", "Hit", "Memory", "MemoryConfig", "MemoryResult"]
