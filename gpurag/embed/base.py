"""The embedder interface shared by every embedding backend."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalized float32 vectors of a fixed dimension, in batches."""

    name: str
    implementation: str
    dim: int
    max_tokens: int

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Return an ``(len(texts), dim)`` float32 array of unit-norm rows."""
        ...

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Number of model tokens in each text (without special tokens)."""
        ...
