"""The query stages' shortcuts for sparse products give what the sparse products gave, bit for
bit: the second hop's reach (:func:`gpurag.query.second_hop.reached`, for ``hops @ matrix``)
and the seeds' named-entity shares (:func:`gpurag.query.seeds.scaled_plus`, for
``diag(scale) @ m + extra``)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from gpurag.query.second_hop import expansion_pairs, reached
from gpurag.query.seeds import scaled_plus


def _random_csr(rng, shape, density, integer=False) -> sp.csr_array:
    m = sp.random_array(shape, density=density, format="csr", rng=rng)
    if integer:
        m.data[:] = 1.0
    m.sum_duplicates()
    return sp.csr_array(m)


def _product_reach(top: np.ndarray, matrix: sp.csr_array):
    """What the second hop computed before: the 0/1 rows of ``top`` times ``matrix``."""
    r, c = np.nonzero(top >= 0)
    hops = sp.csr_array((np.ones(len(r)), (r, top[r, c])), shape=(len(top), matrix.shape[0]))
    reach = sp.coo_array(hops @ matrix)
    order = np.lexsort((reach.col, reach.row))
    return reach.row[order].astype(np.int64), reach.col[order].astype(np.int64), reach.data[order]


def test_reached_equals_the_sparse_product():
    rng = np.random.default_rng(0)
    matrix = _random_csr(rng, (300, 300), 0.03, integer=True)
    for q, m in ((1, 5), (7, 10), (64, 40)):
        top = rng.integers(0, 300, size=(q, m))
        top[rng.random((q, m)) < 0.2] = -1  # padding
        top[0, :2] = top[0, 2]  # a row repeated within a question counts twice
        want = _product_reach(top, matrix)
        got = reached(top, matrix)
        for w, g in zip(want, got, strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


def test_reached_keeps_no_explicit_zero():
    matrix = sp.csr_array((np.array([0.0, 1.0]), np.array([1, 2]), np.array([0, 2, 2, 2])),
                          shape=(3, 3))
    qr, col, value = reached(np.array([[0, -1]]), matrix)
    assert qr.tolist() == [0] and col.tolist() == [2] and value.tolist() == [1.0]


def test_expansion_pairs_of_weighted_mentions_as_before():
    rng = np.random.default_rng(1)
    mentions = _random_csr(rng, (200, 50), 0.05)
    top = rng.integers(0, 200, size=(8, 5))
    title = rng.integers(-1, 50, size=200)
    named = (np.array([0, 3]), np.array([int(mentions[[top[0, 0]]].indices[0]) if
                                         mentions[[top[0, 0]]].nnz else 0, 7]))
    owner, entity = expansion_pairs(top, mentions, title, named)
    qr, ent, _ = _product_reach(top, mentions)
    key = qr * 50 + ent
    r, c = np.nonzero(top >= 0)
    own = title[top[r, c]]
    drop = np.concatenate([named[0] * 50 + named[1], (r * 50 + own)[own >= 0]])
    key = np.unique(key[~np.isin(key, drop)])
    np.testing.assert_array_equal(owner, key // 50)
    np.testing.assert_array_equal(entity, key % 50)


def test_scaled_plus_equals_the_sparse_expression():
    rng = np.random.default_rng(2)
    for q in (1, 3, 40):
        m = _random_csr(rng, (q, 500), 0.02)
        m.data *= 10.0 ** rng.uniform(-8, 2, size=m.nnz)  # magnitudes far apart
        sums = np.asarray(m.sum(axis=1)).ravel()
        scale = np.where(sums > 0, 1.0 / np.maximum(sums, 1e-30), 0.0)
        rows = rng.integers(0, q, size=12)
        cols = np.where(rng.random(12) < 0.5, rng.integers(0, 500, size=12),
                        m.indices[rng.integers(0, max(m.nnz, 1), size=12)] if m.nnz else 0)
        rows[-1], cols[-1] = rows[0], cols[0]  # a position named twice
        values = rng.uniform(0.01, 1.0, size=12)
        values[-1] = values[0]  # repeats are equal, as in add_named
        want = sp.csr_array(sp.diags_array(scale) @ m
                            + sp.csr_array((values, (rows, cols)), shape=m.shape))
        want.sum_duplicates()
        got = scaled_plus(m, scale, rows, cols, values)
        assert got.has_canonical_format
        assert got.indices.dtype == want.indices.dtype
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.data, want.data)


def test_summed_csr_is_scipys_construction_and_sum_bit_for_bit():
    """The reset matrix's assembly (gpurag/query/seeds.py) calls SciPy's kernels directly:
    the same canonical arrays and the same float sums of repeated entries, whatever their
    order (many repeats of few positions, so the index sort's order shows in the sums)."""
    import pytest

    from gpurag.query.sparse_rows import summed_csr

    rng = np.random.default_rng(3)
    for q, n, nnz, dtype in ((1, 50, 400, np.float64), (7, 3000, 900, np.float64),
                             (3, 20, 200, np.float32), (4, 10, 0, np.float64)):
        rows = rng.integers(0, q, nnz)
        cols = rng.integers(0, n, nnz)
        vals = (rng.random(nnz) * 10.0 ** rng.integers(-8, 8, nnz)).astype(dtype)
        want = sp.csr_array((vals, (rows, cols)), shape=(q, n))
        want.sum_duplicates()
        got = summed_csr(vals, rows, cols, (q, n))
        assert got.has_canonical_format and got.dtype == want.dtype
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)
        assert got.data.tobytes() == want.data.tobytes()
    with pytest.raises(ValueError):
        summed_csr(np.ones(1), np.array([0]), np.array([5]), (1, 5))
    with pytest.raises(ValueError):
        summed_csr(np.ones(1), np.array([-1]), np.array([0]), (1, 5))
