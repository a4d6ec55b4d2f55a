"""The host walk's rewritten solvers give the bits of the straightforward ones (tests/graph/
ppr_before.py): the per-call costs were cut without changing a single score."""

import threading

import numpy as np
import pytest
import scipy.sparse as sp

from gpurag.graph import ppr
from gpurag.graph.csr import build_csr
from tests.graph.ppr_before import old_normalized_reset, old_power


def graph(seed: int, n: int = 300, m: int = 1500, symmetric: bool = True, sinks: int = 0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(sinks, n, m), rng.integers(0, n, m)
    return build_csr(src, dst, rng.random(m) * 3 + 0.1, n, symmetric=symmetric)


def resets(n: int, q: int, seed: int, dense_rows: int = 0) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    r = np.zeros((q, n))
    for i in range(q):
        k = n // 2 if i < dense_rows else 1 + rng.integers(0, 40)
        r[i, rng.choice(n, size=k, replace=False)] = rng.random(k) + 0.01
    return sp.csr_array(r)


@pytest.mark.parametrize("q", [1, 2, 7])
def test_normalized_reset_same_arrays(q):
    r = resets(300, q, seed=q)
    r.data[::5] = 0.0  # explicit zeros are dropped
    for given in (r, r.toarray(), sp.csr_matrix(r)):
        new, old = ppr.normalized_reset(given, 300), old_normalized_reset(given, 300)
        for a in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(new, a), getattr(old, a))
    one = ppr.normalized_reset(r.toarray()[0], 300)  # a 1-D row
    np.testing.assert_array_equal(one.data, old_normalized_reset(r.toarray()[0], 300).data)


@pytest.mark.parametrize("sinks", [0, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("damping,tol", [(0.8, 1e-4), (0.5, 1e-8), (np.float32(0.85), 1e-6),
                                         (0.8, 1e-13)])
def test_one_question_same_bits_and_iterations(sinks, dtype, dense, damping, tol):
    """A single question's walk (:func:`ppr._power_one`, its convergence test on Python
    floats) gives the bits of the straightforward loop (so it stopped at the same iteration),
    for several resets, the dense-reset path, dangling nodes, a NumPy float32 damping and a
    tolerance only the stall test meets."""
    g = graph(5, symmetric=sinks == 0, sinks=sinks)
    for seed in range(6):
        r = ppr.normalized_reset(resets(g.n_nodes, 1, seed=seed, dense_rows=int(dense)),
                                 g.n_nodes)
        stats: dict = {}
        new = ppr._power(g, r, damping, tol, 100, np.dtype(dtype), stats=stats)
        old = old_power(g, r, damping, tol, 100, np.dtype(dtype))
        assert new.shape == old.shape == (1, g.n_nodes)
        np.testing.assert_array_equal(new, old)
        assert stats["iterations"].shape == (1,) and stats["iterations"][0] >= 2
        assert stats["products"] == int(stats["iterations"][0])
        if tol < 1e-12:  # below float32's resolution: stopped where the change stalled
            assert stats["iterations"][0] < 100


def test_one_question_not_converging_warns_as_the_batch_loop():
    g = graph(6)
    r = ppr.normalized_reset(resets(g.n_nodes, 1, seed=1), g.n_nodes)
    with pytest.warns(RuntimeWarning, match="did not converge in 3 iterations") as got:
        new = ppr._power(g, r, 0.8, 1e-12, 3, np.dtype(np.float32))
    with pytest.warns(RuntimeWarning) as want:
        old = old_power(g, r, 0.8, 1e-12, 3, np.dtype(np.float32))
    np.testing.assert_array_equal(new, old)
    assert str(got[0].message) == str(want[0].message)


@pytest.mark.parametrize("symmetric,sinks", [(True, 0), (False, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("q,dense_rows", [(1, 0), (9, 0), (6, 6)])
def test_power_same_bits_as_before(symmetric, sinks, dtype, q, dense_rows):
    """One column, a batch whose columns converge at different iterations (compaction), the
    dense-reset path, graphs with and without dangling nodes."""
    g = graph(3, symmetric=symmetric, sinks=sinks)
    assert (ppr._operator(g).dangling.size > 0) == (sinks > 0)
    r = ppr.normalized_reset(resets(g.n_nodes, q, seed=4, dense_rows=dense_rows), g.n_nodes)
    stats: dict = {}
    new = ppr._power(g, r, 0.8, 1e-4, 100, np.dtype(dtype), stats=stats)
    old = old_power(g, r, 0.8, 1e-4, 100, np.dtype(dtype))
    np.testing.assert_array_equal(new, old)
    assert stats["iterations"].shape == (q,) and stats["iterations"].min() >= 1
    if q > 1 and not dense_rows:
        assert stats["iterations"].min() < stats["iterations"].max()  # compaction was hit
    assert stats["products"] == int(stats["iterations"].sum())


def test_power_not_converged_same_bits_and_warns():
    g = graph(5)
    r = ppr.normalized_reset(resets(g.n_nodes, 3, seed=6), g.n_nodes)
    with pytest.warns(RuntimeWarning):
        new = ppr._power(g, r, 0.85, 1e-30, 5, np.dtype(np.float32))
    with pytest.warns(RuntimeWarning):
        old = old_power(g, r, 0.85, 1e-30, 5, np.dtype(np.float32))
    np.testing.assert_array_equal(new, old)


def test_operator_is_kept_on_the_graph_and_built_once_under_threads():
    g = graph(7)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(ppr._operator(g))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(op is got[0] for op in got) and g.__dict__[ppr._OPERATOR_ATTR] is got[0]
    pt = ppr._transition_transpose(g, got[0], np.dtype(np.float32))
    assert ppr._transition_transpose(g, got[0], np.dtype(np.float32)) is pt
    assert graph(7).__dict__.get(ppr._OPERATOR_ATTR) is None  # another graph: its own


def test_a_walked_graph_still_pickles_and_copies_without_its_cache():
    """The walk keeps its operator (with a lock) on the graph object; pickling or copying the
    graph (a distributed build ships graphs to workers) carries the arrays only, and the copy
    walks to the same bits."""
    import copy
    import pickle

    g = graph(3)
    r = resets(300, 2, seed=3)
    want = ppr.ppr_power(g, r)
    assert ppr._OPERATOR_ATTR in g.__dict__
    for other in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g)):
        assert ppr._OPERATOR_ATTR not in other.__dict__
        np.testing.assert_array_equal(other.indices, g.indices)
        np.testing.assert_array_equal(ppr.ppr_power(other, r), want)


def test_the_private_kernels_are_checked_once_and_the_walk_falls_back(monkeypatch):
    """SciPy's private ``csr_matvec(s)`` are used only when they take our arguments and give
    ``@``'s bits; with kernels that fail, the walk runs on ``pt @ x`` to the same bits."""
    assert ppr._kernels_agree()  # the installed SciPy's kernels are the ones in use

    def broken(*args):
        raise TypeError("csr_matvec() takes 7 arguments")

    g, r = graph(5), resets(300, 3, seed=5)
    want = ppr.ppr_power(g, r)
    monkeypatch.setattr(ppr, "_csr_matvec", broken)
    monkeypatch.setattr(ppr, "_csr_matvecs", broken)
    assert not ppr._kernels_agree()
    monkeypatch.setattr(ppr, "_csr_matvec", None)
    monkeypatch.setattr(ppr, "_csr_matvecs", None)
    np.testing.assert_array_equal(ppr.ppr_power(g, r), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_sums_are_the_float64_sums_bit_for_bit(dtype):
    """The walk's column sums (einsum's loop, ~2x faster) are ``sum(axis=0, dtype=float64)``
    bit for bit: a row-by-row accumulation down each column, over sizes around NumPy's
    8,192-element buffers and entries spread over many magnitudes (where another order of the
    additions rounds differently); one column and a non-contiguous view take ``sum`` itself."""
    rng = np.random.default_rng(7)
    for n in (1, 3, 100, 8191, 8193, 20_000):
        for q in (1, 2, 3, 8, 31, 64, 65):
            a = (rng.random((n, q)) ** 6 * 10.0 ** rng.integers(-9, 3, size=(n, 1))).astype(dtype)
            want = a.sum(axis=0, dtype=np.float64)
            assert ppr.column_sums(a).tobytes() == want.tobytes(), (n, q)
            view = a[::2]
            assert (ppr.column_sums(view).tobytes()
                    == view.sum(axis=0, dtype=np.float64).tobytes())
