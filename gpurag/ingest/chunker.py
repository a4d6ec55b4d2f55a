"""Token-window chunking with overlap, using the embedder's tokenizer offsets."""

from __future__ import annotations

import hashlib

import numpy as np


def window_spans(offsets: np.ndarray, max_tokens: int, overlap: int) -> np.ndarray:
    """Windows of ``max_tokens`` tokens overlapping by ``overlap`` tokens, as ``(k, 3)`` rows of
    (char start, char end, token count).

    ``offsets`` is the ``(n_tokens, 2)`` char offset array of one text. Vectorized.
    """
    if max_tokens <= 0 or not 0 <= overlap < max_tokens:
        raise ValueError("need max_tokens > 0 and 0 <= overlap < max_tokens")
    n = len(offsets)
    if n == 0:
        return np.zeros((0, 3), dtype=np.int64)
    stride = max_tokens - overlap
    starts = np.arange(0, max(n - overlap, 1), stride)
    ends = np.minimum(starts + max_tokens, n) - 1
    return np.stack([offsets[starts, 0], offsets[ends, 1], ends - starts + 1], axis=1)


def chunk_id(text: str) -> str:
    """Stable content-hash id of a chunk (whitespace-insensitive)."""
    canonical = " ".join(text.split())
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=8).hexdigest()
