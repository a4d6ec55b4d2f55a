"""The trace vectors of a memory in RAM, as a list of blocks: appending never copies what is
stored (a doubling array copies it all at each growth and, at the moment of the copy, holds
it twice: 2.4 GB for 1M 384-d vectors), and the array read from ``vectors.f32`` at open is
adopted as the first block without a copy."""

from __future__ import annotations

import numpy as np

from gpurag.arrays import unique_sorted

BLOCK = 1 << 16  # rows per block appended to


class VectorStore:
    """Rows of float32 vectors, indexable like an ``(n, dim)`` array by a slice or by ids."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._blocks: list[np.ndarray] = []
        self._starts: list[int] = []  # first row of each block
        self._n = 0
        self._room = 0  # unused rows at the end of the last block

    def __len__(self) -> int:
        return self._n

    def extend(self, vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        if not self._blocks and len(vectors) >= BLOCK and vectors.flags.c_contiguous:
            self._blocks, self._starts = [vectors], [0]  # adopted: no copy
            self._n, self._room = len(vectors), 0
            return
        done = 0
        while done < len(vectors):
            if not self._room:
                self._blocks.append(np.zeros((BLOCK, self.dim), np.float32))
                self._starts.append(self._n)
                self._room = BLOCK
            block = self._blocks[-1]
            at = len(block) - self._room
            take = min(self._room, len(vectors) - done)
            block[at:at + take] = vectors[done:done + take]
            done += take
            self._n += take
            self._room -= take

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            lo, hi, step = key.indices(self._n)
            if step != 1:
                raise ValueError("vector slices take step 1")
            if hi <= lo:
                return np.zeros((0, self.dim), np.float32)
            b = int(np.searchsorted(self._starts, lo, "right")) - 1
            start = self._starts[b]
            if hi - start <= len(self._blocks[b]):  # one block: a view
                return self._blocks[b][lo - start:hi - start]
            return self.take(np.arange(lo, hi))
        return self.take(np.asarray(key, np.int64))

    def take(self, ids: np.ndarray) -> np.ndarray:
        """The rows ``ids`` (a copy)."""
        ids = np.asarray(ids, np.int64)
        if ids.ndim == 0:
            ids = ids[None]
        if len(ids) and (ids.min() < 0 or ids.max() >= self._n):
            raise IndexError(f"vector rows {ids.min()}..{ids.max()} outside [0, {self._n})")
        out = np.empty((len(ids), self.dim), np.float32)
        block = np.searchsorted(self._starts, ids, "right") - 1
        for b in unique_sorted(block).tolist():
            sel = block == b
            out[sel] = self._blocks[b][ids[sel] - self._starts[b]]
        return out

    @property
    def nbytes(self) -> int:
        return sum(int(b.nbytes) for b in self._blocks)
