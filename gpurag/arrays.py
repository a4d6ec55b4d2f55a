"""Array helpers shared by every layer (NumPy only, imports nothing of gpurag)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def unique_sorted(values: ArrayLike) -> np.ndarray:
    """``np.unique(values)``: the sorted distinct values of the flattened input, same dtype.

    Integers and booleans go by one sort and a neighbour comparison. NumPy 2.4's plain
    ``np.unique`` takes a hash path that is 30-150x slower than that from a thousand values
    up (100k int64: ~150 ms against ~3 ms on this project's CI machine); with ``return_*``
    arguments it sorts and stays fast. Other dtypes (floats with their NaNs, strings,
    objects) keep ``np.unique``'s own rules.
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "iub":
        return np.unique(arr)
    s = np.sort(arr, axis=None)
    if s.size < 2:
        return s
    keep = np.empty(s.size, bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def union_sorted(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """``np.union1d(a, b)`` (it calls the slow plain ``np.unique``) by :func:`unique_sorted`."""
    return unique_sorted(np.concatenate([np.ravel(a), np.ravel(b)]))


def setdiff_sorted(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """``np.setdiff1d(a, b)``: the sorted distinct values of ``a`` not in ``b``."""
    ua = unique_sorted(a)
    return ua[~isin_sorted(ua, b)]


def sorted_lookup(sorted_keys: np.ndarray, keys: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``keys`` sits in the ascending array ``sorted_keys``: ``(pos, hit)``, the
    index of its first occurrence (clipped into range; 0 where ``sorted_keys`` is empty) and
    whether it occurs there (``sorted_keys[pos] == keys``), both of ``keys``' shape."""
    keys = np.asarray(keys)
    if sorted_keys.size == 0:
        return np.zeros(keys.shape, np.intp), np.zeros(keys.shape, bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
    return pos, sorted_keys[pos] == keys


def isin_sorted(a: ArrayLike, b: ArrayLike, *, invert: bool = False) -> np.ndarray:
    """``np.isin(a, b, invert=invert)`` by one sort of ``b`` and a ``searchsorted``.

    NumPy 2.4's ``np.isin`` takes the plain (hash-path) ``np.unique`` of ``b`` where the
    integer range is large, as ``question * n + entity`` keys always are (100k int64: ~75 ms
    against ~8 ms). Integer and boolean inputs only; other dtypes (and mixes whose common
    type is not an integer, such as int64 with uint64) keep ``np.isin``."""
    a, b = np.asarray(a), np.asarray(b)
    if (a.dtype.kind not in "iub" or b.dtype.kind not in "iub"
            or np.result_type(a.dtype, b.dtype).kind not in "iub"):
        return np.isin(a, b, invert=invert)
    common = np.result_type(a.dtype, b.dtype)
    _, hit = sorted_lookup(np.sort(b.astype(common, copy=False), axis=None),
                           a.astype(common, copy=False))
    return ~hit if invert else hit
