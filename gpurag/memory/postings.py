"""Append-only inverted lists (key -> rows in row order) kept as a few sorted runs.

Rows arrive in increasing order (trace ids). Each append goes to a pending buffer; a buffer of
``seal`` rows or more, or any pending rows at a lookup, is sorted by key into a *run*; a run at
least half the size of the one before it is merged into it (a binary counter: O(log n) runs,
every entry merged O(log n) times, each merge a stable sort of two sorted runs, which numpy's
timsort does in linear time). A lookup is one ``searchsorted`` per run for all its keys, so its
cost follows the lists it returns, not the number of rows stored.
"""

from __future__ import annotations

import numpy as np


class Grow:
    """A 1-D numpy array that grows by appending (capacity doubling); ``view()`` is the
    filled prefix (valid until the next append)."""

    def __init__(self, dtype, capacity: int = 1024) -> None:
        self._a = np.zeros(capacity, dtype=dtype)
        self.n = 0

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=self._a.dtype)
        need = self.n + len(values)
        if need > len(self._a):
            grown = np.zeros(max(need, 2 * len(self._a)), dtype=self._a.dtype)
            grown[: self.n] = self._a[: self.n]
            self._a = grown
        self._a[self.n:need] = values
        self.n = need

    def view(self) -> np.ndarray:
        return self._a[: self.n]

    def __len__(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        return int(self._a.nbytes)


class Postings:
    """Key -> (rows, values) inverted lists over rows appended in increasing order."""

    def __init__(self, seal: int = 8192) -> None:
        self.seal = seal
        self._runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # keys, rows, vals
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_rows = 0
        self.size = 0

    def add(self, keys: np.ndarray, rows: np.ndarray, vals: np.ndarray | None = None) -> None:
        """Append entries ``(key, row, value)``; rows must not precede any row added before."""
        keys = np.asarray(keys, dtype=np.int32)
        if not len(keys):
            return
        rows = np.asarray(rows, dtype=np.int32)
        vals = (np.ones(len(keys), np.float32) if vals is None
                else np.asarray(vals, dtype=np.float32))
        self._pending.append((keys, rows, vals))
        self._pending_rows += len(keys)
        self.size += len(keys)
        if self._pending_rows >= self.seal:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        keys, rows, vals = (np.concatenate(p) for p in zip(*self._pending, strict=True))
        self._pending, self._pending_rows = [], 0
        order = np.argsort(keys, kind="stable")
        self._runs.append((keys[order], rows[order], vals[order]))
        while len(self._runs) > 1 and 2 * len(self._runs[-1][0]) >= len(self._runs[-2][0]):
            (k1, r1, v1), (k2, r2, v2) = self._runs[-2], self._runs[-1]
            keys, rows, vals = np.r_[k1, k2], np.r_[r1, r2], np.r_[v1, v2]
            order = np.argsort(keys, kind="stable")  # two sorted runs: linear
            self._runs[-2:] = [(keys[order], rows[order], vals[order])]

    def get(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(owner, rows, vals)``: the entries of each of ``keys`` (``owner``: its position
        in ``keys``), grouped by owner, rows increasing within each."""
        self._flush()
        keys = np.asarray(keys, dtype=np.int32)
        owners, rows, vals = [], [], []
        for rk, rr, rv in self._runs:
            lo = np.searchsorted(rk, keys, "left")
            hi = np.searchsorted(rk, keys, "right")
            size = hi - lo
            total = int(size.sum())
            if not total:
                continue
            pos = np.arange(total) - np.repeat(np.cumsum(size) - size, size)
            at = np.repeat(lo, size) + pos
            owners.append(np.repeat(np.arange(len(keys)), size))
            rows.append(rr[at])
            vals.append(rv[at])
        if not owners:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        owner = np.concatenate(owners)
        order = np.argsort(owner, kind="stable")  # runs are in row order: rows stay sorted
        return (owner[order], np.concatenate(rows)[order].astype(np.int64),
                np.concatenate(vals)[order])

    def count(self, keys: np.ndarray) -> np.ndarray:
        """Entries per key."""
        self._flush()
        keys = np.asarray(keys, dtype=np.int32)
        out = np.zeros(len(keys), np.int64)
        for rk, _, _ in self._runs:
            out += np.searchsorted(rk, keys, "right") - np.searchsorted(rk, keys, "left")
        return out

    @property
    def n_runs(self) -> int:
        return len(self._runs) + bool(self._pending)

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + r.nbytes + v.nbytes for k, r, v in [*self._runs, *self._pending])
