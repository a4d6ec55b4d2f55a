"""Append-only inverted lists (key -> rows in row order) kept as a few sorted runs.

Rows arrive in increasing order (trace ids). Each append goes to a pending buffer; a buffer of
``seal`` rows or more, or any pending rows at a lookup, is sorted by key into a *run*; a run at
least half the size of the one before it is merged into it (a binary counter: O(log n) runs,
every entry merged O(log n) times, each merge a stable sort of two sorted runs, which numpy's
timsort does in linear time). Each run keeps the offset of every key's entries, so a lookup
reads two offsets per key and run (no binary search) and its cost follows the lists it
returns, not the number of rows stored.
"""

from __future__ import annotations

import numpy as np


def unique(a: np.ndarray, return_inverse: bool = False):
    """``np.unique`` of a 1-D integer array by one sort (numpy 2's hash-based unique is ~20x
    slower on 30k ids spread over a large range); the same values, and the same inverse."""
    a = np.asarray(a)
    s = np.sort(a, kind="stable")
    u = s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s
    return (u, np.searchsorted(u, a)) if return_inverse else u


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


def _run(keys: np.ndarray, rows: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, ...]:
    """A sealed run: its entries sorted by key and ``ptr``, where key ``k``'s entries are
    ``ptr[k]:ptr[k + 1]`` (keys past the end have none): a lookup reads two offsets, with no
    binary search."""
    ptr = np.zeros(int(keys[-1]) + 2 if len(keys) else 1, np.int64)
    if len(keys):
        np.cumsum(np.bincount(keys), out=ptr[1:])
    return keys, rows, vals, ptr


class Postings:
    """Key -> (rows, values) inverted lists over rows appended in increasing order."""

    def __init__(self, seal: int = 8192) -> None:
        self.seal = seal
        self._runs: list[tuple[np.ndarray, ...]] = []  # keys, rows, vals, ptr
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_rows = 0
        self.size = 0

    def add(self, keys: np.ndarray, rows: np.ndarray, vals: np.ndarray | None = None) -> None:
        """Append entries ``(key, row, value)``; rows must not precede any row added before."""
        keys = np.asarray(keys, dtype=np.int32)
        if not len(keys):
            return
        if keys.min() < 0:
            raise ValueError("posting keys must be >= 0")
        rows = np.asarray(rows, dtype=np.int32)
        vals = (np.ones(len(keys), np.float32) if vals is None
                else np.asarray(vals, dtype=np.float32))
        self._pending.append((keys, rows, vals))
        self._pending_rows += len(keys)
        self.size += len(keys)
        if self._pending_rows >= self.seal:
            self._flush()

    def set_run(self, keys: np.ndarray, rows: np.ndarray, vals: np.ndarray) -> None:
        """Hold exactly one run: ``keys`` sorted, rows increasing within a key (a saved list
        read back)."""
        self._pending, self._pending_rows = [], 0
        self._runs = [_run(keys.astype(np.int32), rows.astype(np.int32),
                           vals.astype(np.float32))] if len(keys) else []
        self.size = len(keys)

    def merged(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(keys, rows, vals)``: every entry as one run, keys sorted and rows increasing
        within a key (what :meth:`set_run` takes back; pending entries included)."""
        self._flush()
        if not self._runs:
            return np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32)
        keys, rows, vals = (np.concatenate(p) for p in list(zip(*self._runs, strict=True))[:3])
        order = np.argsort(keys, kind="stable")  # runs are in row order: rows stay increasing
        return keys[order], rows[order], vals[order]

    def _flush(self) -> None:
        if not self._pending:
            return
        keys, rows, vals = (np.concatenate(p) for p in zip(*self._pending, strict=True))
        self._pending, self._pending_rows = [], 0
        order = np.argsort(keys, kind="stable")
        self._runs.append(_run(keys[order], rows[order], vals[order]))
        while len(self._runs) > 1 and 2 * len(self._runs[-1][0]) >= len(self._runs[-2][0]):
            (k1, r1, v1, _), (k2, r2, v2, _) = self._runs[-2], self._runs[-1]
            keys, rows, vals = np.r_[k1, k2], np.r_[r1, r2], np.r_[v1, v2]
            order = np.argsort(keys, kind="stable")  # two sorted runs: linear
            self._runs[-2:] = [_run(keys[order], rows[order], vals[order])]

    def _spans(self, keys: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per run: (first entry, entry count) of each of ``keys``."""
        out = []
        for _, _, _, ptr in self._runs:
            k = np.minimum(keys, len(ptr) - 1)
            lo = ptr[k]
            out.append((lo, np.where(keys < len(ptr) - 1, ptr[np.minimum(k + 1, len(ptr) - 1)]
                                     - lo, 0)))
        return out

    def get(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(owner, rows, vals)``: the entries of each of ``keys`` (``owner``: its position
        in ``keys``), grouped by owner, rows increasing within each."""
        self._flush()
        keys = np.asarray(keys, dtype=np.int64)
        spans = self._spans(keys)
        total_of = sum((size for _, size in spans), np.zeros(len(keys), np.int64))
        total = int(total_of.sum())
        if not total:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        owner = np.repeat(np.arange(len(keys)), total_of)
        if len(self._runs) == 1:  # one run (a bulk fill, a snapshot read back): one gather
            (_, rr, rv, _), (lo, size) = self._runs[0], spans[0]
            at = np.arange(total) + np.repeat(lo - (np.cumsum(size) - size), size)
            return owner, rr[at].astype(np.int64), rv[at]
        rows = np.empty(total, np.int64)
        vals = np.empty(total, np.float32)
        dest0 = np.cumsum(total_of) - total_of  # each owner's first output slot
        for (_, rr, rv, _), (lo, size) in zip(self._runs, spans, strict=True):
            n = int(size.sum())
            if not n:
                continue
            first = np.cumsum(size) - size  # each owner's first place among this run's
            pos = np.arange(n)
            at = pos + np.repeat(lo - first, size)
            dest = pos + np.repeat(dest0 - first, size)  # runs in row order: per owner
            rows[dest] = rr[at]
            vals[dest] = rv[at]
            dest0 = dest0 + size
        return owner, rows, vals

    def values_at(self, key: int, rows: np.ndarray) -> np.ndarray:
        """The value of each of the sorted ``rows`` in ``key``'s list (0 where absent), by a
        search of that list alone (a long list is not copied)."""
        self._flush()
        rows = np.asarray(rows, np.int64)
        out = np.zeros(len(rows), np.float32)
        for _, rr, rv, ptr in self._runs:
            if key >= len(ptr) - 1 or ptr[key] == ptr[key + 1]:
                continue
            seg = rr[ptr[key]:ptr[key + 1]]
            at = np.minimum(np.searchsorted(seg, rows), len(seg) - 1)
            hit = seg[at] == rows
            out[hit] = rv[ptr[key]:ptr[key + 1]][at[hit]]
        return out

    def count(self, keys: np.ndarray) -> np.ndarray:
        """Entries per key."""
        self._flush()
        keys = np.asarray(keys, dtype=np.int64)
        out = np.zeros(len(keys), np.int64)
        for _, size in self._spans(keys):
            out += size
        return out

    @property
    def n_runs(self) -> int:
        return len(self._runs) + bool(self._pending)

    @property
    def nbytes(self) -> int:
        return (sum(sum(a.nbytes for a in run) for run in self._runs)
                + sum(k.nbytes + r.nbytes + v.nbytes for k, r, v in self._pending))
