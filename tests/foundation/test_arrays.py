"""gpurag.arrays: the sort-based set helpers equal NumPy's, and no module calls the plain
(hash-path) ``np.unique``, ``np.union1d``, ``np.setdiff1d``, ``np.isin``, ``np.in1d`` or
``np.intersect1d`` on NumPy 2.4."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from gpurag.arrays import isin_sorted, setdiff_sorted, sorted_lookup, union_sorted, unique_sorted

PACKAGE = Path(__file__).resolve().parents[2] / "gpurag"


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.uint64, bool])
@pytest.mark.parametrize("size", [0, 1, 2, 7, 1000, 20000])
def test_unique_sorted_equals_numpy(dtype, size):
    rng = np.random.default_rng(size)
    a = rng.integers(0, 2 if dtype is bool else 100, size).astype(dtype)
    got, want = unique_sorted(a), np.unique(a)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_unique_sorted_flattens_and_takes_lists_and_floats_like_numpy():
    m = np.array([[3, 1], [3, 2]], np.int64)
    assert np.array_equal(unique_sorted(m), np.unique(m))
    assert unique_sorted([5, 5, 1]).tolist() == [1, 5]
    f = np.array([np.nan, 1.0, np.nan, 0.5])  # NumPy's NaN rule, not the sort's
    assert np.array_equal(unique_sorted(f), np.unique(f), equal_nan=True)
    s = np.array(["b", "a", "b"])
    assert unique_sorted(s).tolist() == ["a", "b"]


def test_union_and_setdiff_equal_numpy():
    rng = np.random.default_rng(1)
    for _ in range(20):
        a = rng.integers(0, 500, rng.integers(0, 300))
        b = rng.integers(0, 500, rng.integers(0, 300)).astype(np.int32)
        assert np.array_equal(union_sorted(a, b), np.union1d(a, b))
        assert np.array_equal(setdiff_sorted(a, b), np.setdiff1d(a, b))


@pytest.mark.parametrize("dtypes", [(np.int64, np.int64), (np.int32, np.int64), (np.int8, np.int16),
                                    (np.uint16, np.int32), (np.uint64, np.uint64), (bool, bool)])
def test_isin_sorted_equals_numpy(dtypes):
    rng = np.random.default_rng(7)
    hi = 2 if dtypes[0] is bool else 60
    for size_a, size_b in [(0, 0), (0, 5), (5, 0), (1, 1), (300, 40), (40, 300), (2000, 2000)]:
        a = rng.integers(0, hi, size_a).astype(dtypes[0])  # duplicates on both sides
        b = rng.integers(0, hi, size_b).astype(dtypes[1])
        for invert in (False, True):
            got, want = isin_sorted(a, b, invert=invert), np.isin(a, b, invert=invert)
            assert got.dtype == bool and got.shape == want.shape and np.array_equal(got, want)
    big = rng.integers(0, 1 << 40, (30, 70))  # q * n + e keys: NumPy's hash path; 2-D kept
    b = np.concatenate([big.ravel()[::3], rng.integers(0, 1 << 40, 500)])
    assert np.array_equal(isin_sorted(big, b), np.isin(big, b))


def test_isin_sorted_keeps_numpys_rules_for_other_dtypes():
    f = np.array([0.5, np.nan, 2.0])
    assert np.array_equal(isin_sorted(f, [2.0, np.nan]), np.isin(f, [2.0, np.nan]))
    mixed = np.array([2**63 + 1, 3], np.uint64)  # with int64: float64 common type, np.isin's
    assert np.array_equal(isin_sorted(mixed, np.array([3], np.int64)),
                          np.isin(mixed, np.array([3], np.int64)))
    assert isin_sorted(np.array(["a", "b"]), ["b"]).tolist() == [False, True]


def test_sorted_lookup_positions_and_empties():
    keys = np.array([2, 5, 5, 9])
    pos, hit = sorted_lookup(keys, np.array([[5, 1], [9, 10]]))
    assert pos.tolist() == [[1, 0], [3, 3]] and hit.tolist() == [[True, False], [True, False]]
    pos, hit = sorted_lookup(np.zeros(0, np.int64), np.array([1, 2]))
    assert pos.tolist() == [0, 0] and not hit.any()


def _slow_calls() -> list[str]:
    out = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "arrays.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "np"
                    and node.func.attr in ("unique", "union1d", "setdiff1d", "isin", "in1d",
                                           "intersect1d")
                    and not any(k.arg in ("return_index", "return_inverse", "return_counts",
                                          "assume_unique") for k in node.keywords)):
                out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return out


def test_no_module_takes_numpys_hash_path_for_sets():
    assert _slow_calls() == []
