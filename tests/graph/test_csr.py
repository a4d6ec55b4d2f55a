import numpy as np
import pytest
import scipy.sparse as sp

from gpurag.graph.csr import CSRGraph, build_csr, from_scipy, load, save, to_scipy


def _dense(src, dst, w, n, symmetric):
    """Reference adjacency built edge by edge."""
    a = np.zeros((n, n))
    for u, v, x in zip(src, dst, w, strict=True):
        if u == v or x == 0:
            continue
        a[u, v] += x
        if symmetric:
            a[v, u] += x
    return a


@pytest.mark.parametrize("symmetric", [True, False])
def test_build_matches_reference(symmetric):
    rng = np.random.default_rng(0)
    n, m = 25, 120  # many duplicates and some self loops at this density
    src, dst = rng.integers(0, n - 2, m), rng.integers(0, n - 2, m)  # last 2 nodes isolated
    w = rng.random(m).astype(np.float32) + 0.5
    g = build_csr(src, dst, w, n, symmetric=symmetric)
    ref = _dense(src, dst, w.astype(np.float64), n, symmetric)
    np.testing.assert_allclose(to_scipy(g).toarray(), ref, rtol=1e-6)
    assert g.n_nodes == n
    assert g.n_edges == np.count_nonzero(ref)
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int32
    assert g.weights.dtype == np.float32
    np.testing.assert_array_equal(g.degree(), np.count_nonzero(ref, axis=1))
    np.testing.assert_allclose(g.out_weight(), ref.sum(axis=1), rtol=1e-6)
    # canonical rows: strictly increasing column indices, no diagonal
    for u in range(n):
        cols = g.indices[g.indptr[u] : g.indptr[u + 1]]
        assert np.all(np.diff(cols) > 0) and u not in cols


def test_self_loops_and_zero_weights_dropped():
    g = build_csr(np.array([0, 1, 2]), np.array([0, 2, 1]), np.array([5.0, 0.0, 1.0]), 3)
    dense = to_scipy(g).toarray()
    assert dense[0, 0] == 0
    np.testing.assert_array_equal(dense, [[0, 0, 0], [0, 0, 1], [0, 1, 0]])
    assert g.degree().tolist() == [0, 1, 1]


def test_default_weight_and_symmetric_sum():
    g = build_csr(np.array([0, 1, 0]), np.array([1, 0, 1]), None, 2)
    # three unit edges between 0 and 1, stored both ways
    np.testing.assert_array_equal(to_scipy(g).toarray(), [[0, 3], [3, 0]])


def test_empty_graph():
    g = build_csr(np.zeros(0, int), np.zeros(0, int), None, 4)
    assert g.n_nodes == 4 and g.n_edges == 0
    np.testing.assert_array_equal(g.out_weight(), np.zeros(4))


@pytest.mark.parametrize(
    "src,dst,w,match",
    [
        ([0, 5], [1, 1], None, "node ids"),
        ([0, -1], [1, 1], None, "node ids"),
        ([0, 1], [1, 2], [1.0, -1.0], "nonnegative"),
        ([0, 1], [1, 2], [1.0, np.nan], "finite"),
        ([0, 1], [1], None, "same length"),
    ],
)
def test_build_rejects_bad_input(src, dst, w, match):
    with pytest.raises(ValueError, match=match):
        build_csr(np.array(src), np.array(dst), None if w is None else np.array(w), 3)


def test_from_scipy_roundtrip():
    a = sp.random_array((10, 10), density=0.3, random_state=1, format="csr")
    g = from_scipy(a)
    ref = a.toarray()
    np.fill_diagonal(ref, 0)
    np.testing.assert_allclose(to_scipy(g).toarray(), ref, rtol=1e-6)


@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_roundtrip(tmp_path, mmap):
    rng = np.random.default_rng(2)
    g = build_csr(rng.integers(0, 50, 200), rng.integers(0, 50, 200), rng.random(200), 50)
    save(g, tmp_path / "graph")
    assert sorted(p.name for p in (tmp_path / "graph").iterdir()) == [
        "indices.npy",
        "indptr.npy",
        "weights.npy",
    ]
    h = load(tmp_path / "graph", mmap=mmap)
    assert isinstance(h.indptr, np.memmap) == mmap
    for name in ("indptr", "indices", "weights"):
        np.testing.assert_array_equal(getattr(h, name), getattr(g, name))
        assert getattr(h, name).dtype == getattr(g, name).dtype


def test_constructor_validates_and_casts():
    with pytest.raises(ValueError):
        CSRGraph(np.array([0, 2]), np.array([1], np.int32), np.array([1.0], np.float32))
    g = CSRGraph(np.array([0, 1, 1], np.int32), np.array([1]), np.array([2.0]))
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int32
    assert g.weights.dtype == np.float32
