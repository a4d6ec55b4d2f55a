"""gpurag.arrays: the sort-based set helpers equal NumPy's, and no module calls the plain
(hash-path) ``np.unique``, ``np.union1d`` or ``np.setdiff1d`` on NumPy 2.4."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from gpurag.arrays import setdiff_sorted, union_sorted, unique_sorted

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


def _slow_calls() -> list[str]:
    out = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "arrays.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "np"
                    and node.func.attr in ("unique", "union1d", "setdiff1d")
                    and not any(k.arg in ("return_index", "return_inverse", "return_counts",
                                          "assume_unique") for k in node.keywords)):
                out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return out


def test_no_module_takes_numpys_hash_path_for_sets():
    assert _slow_calls() == []
