"""The local push as the walk of large graphs (issue 26): its per-node error bound against the
exact PPR, its reused work arrays, the sparse top-k it is read through, and which rows
``method="auto"`` pushes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import gpurag.graph.ppr as ppr_module
from gpurag.graph.csr import CSRGraph, build_csr
from gpurag.graph.ppr import _operator, _push_one, _seed_arrays, ppr, push_rows
from gpurag.graph.ppr_top import gather_at, host_ppr_topk, numpy_topk, sparse_gather, sparse_topk
from tests.graph.test_ppr import exact_ppr


def undirected_graph(seed: int, n: int = 60, m: int = 150) -> CSRGraph:
    """Unweighted, symmetric, every node on a ring (no dangling node)."""
    rng = np.random.default_rng(seed)
    src = np.concatenate([np.arange(n), rng.integers(0, n, m)])
    dst = np.concatenate([(np.arange(n) + 1) % n, rng.integers(0, n, m)])
    pairs = np.unique(np.sort(np.stack([src, dst], axis=1), axis=1), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]  # each undirected edge once, weight 1
    return build_csr(pairs[:, 0], pairs[:, 1], None, n, symmetric=True)


def seeded_row(n: int, seeds: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    row = np.zeros(n)
    row[rng.choice(n, seeds, replace=False)] = rng.random(seeds) + 0.1
    return row


@pytest.mark.parametrize("eps", [1e-2, 1e-3, 3e-5])
@pytest.mark.parametrize("damping", [0.5, 0.8])
def test_push_error_per_node_within_eps_times_degree(eps, damping):
    """On an undirected unweighted graph the push leaves ``r_u <= eps * deg(u)`` everywhere, so
    ``0 <= x_v - p_v <= eps * deg(v)`` (reversibility: ``deg(u) ppr_u(v) = deg(v) ppr_v(u)``);
    the returned score ``p + r`` is within ``eps * deg(v)`` of the exact PPR at every node."""
    g = undirected_graph(3)
    deg = g.degree().astype(np.float64)
    assert weights_are_unit(g) and deg.min() > 0
    for i in range(4):
        row = seeded_row(g.n_nodes, 1 + 3 * i, seed=i)
        s, w = _seed_arrays(g.n_nodes, np.flatnonzero(row), row[row > 0])
        nodes, p, r = _push_one(g, _operator(g), s, w, damping, eps)
        exact = exact_ppr(g, row, damping)
        assert (r <= eps * deg[nodes] + 1e-15).all()
        settled, est = np.zeros(g.n_nodes), np.zeros(g.n_nodes)
        settled[nodes], est[nodes] = p, p + r
        gap = exact - settled
        assert gap.min() >= -1e-12
        assert (gap <= eps * deg + 1e-12).all()
        assert (np.abs(est - exact) <= eps * deg + 1e-12).all()
        assert abs(p.sum() + r.sum() - 1.0) < 1e-12  # the push moves mass, never loses it


def weights_are_unit(g: CSRGraph) -> bool:
    return bool(np.all(g.weights == 1.0))


def test_reused_work_arrays_leave_nothing_behind():
    """The push keeps its dense work arrays per graph and thread: a row pushed after others on
    the same graph scores as on a fresh copy of the graph."""
    g = undirected_graph(5)
    rows = [seeded_row(g.n_nodes, k, seed=k) for k in (1, 5, 9, 2)]
    got = [ppr(g, row, method="push", eps=1e-4) for row in rows]
    for row, mine in zip(rows, got, strict=True):
        fresh = CSRGraph(g.indptr.copy(), g.indices.copy(), g.weights.copy())
        np.testing.assert_array_equal(mine, ppr(fresh, row, method="push", eps=1e-4))


def test_sparse_topk_and_gather_equal_the_dense_ones():
    """The pushed rows' top-k and gathered scores, read from the stored entries, are the dense
    rows' (ties by id, also at the cut; a row with few entries completed by its zeros)."""
    rng = np.random.default_rng(0)
    q, n, lo, hi = 7, 50, 12, 44
    dense = np.zeros((q, n), np.float32)
    for i in range(q):
        cols = rng.choice(n, [40, 3, 0, 25, 8, 30, 1][i], replace=False)
        dense[i, cols] = rng.choice([0.5, 0.25, 0.125, 0.0625], cols.size)  # many ties
    dense[3, [20, 21]] = 0.0  # stored zeros
    rows = sp.csr_array(dense)
    rows.data[rows.data == 0] = 0.0
    gather = rng.integers(-1, hi - lo, (q, 9))
    for k in (1, 5, 20, 40):
        want_v, want_i = numpy_topk(dense[:, lo:hi], k)
        got_v, got_i = sparse_topk(rows, k, lo, hi)
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_array_equal(got_v, want_v)
    np.testing.assert_array_equal(sparse_gather(rows, gather, lo),
                                  gather_at(dense[:, lo:], gather))


def test_host_topk_of_pushed_rows_is_that_of_their_dense_scores():
    """``host_ppr_topk`` reads pushed rows sparsely: the same top-k, values and gathered
    scores as the dense rows of ``ppr`` would give, with the ``eps`` it is handed."""
    g = build_csr(*np.random.default_rng(1).integers(0, 80, (2, 400)), None, 80, symmetric=True)
    reset = np.vstack([seeded_row(80, k, seed=k) for k in (1, 4, 12)])
    gather = np.random.default_rng(2).integers(-1, 60, (3, 6))
    for eps in (1e-3, 1e-5):
        top = host_ppr_topk(g, reset, k=10, lo=20, hi=None, gather=gather, damping=0.8,
                            tol=1e-6, method="push", eps=eps)
        full = ppr(g, reset, method="push", damping=0.8, eps=eps)[:, 20:]
        v, i = numpy_topk(full, 10)
        np.testing.assert_array_equal(top.ids, i)
        np.testing.assert_array_equal(top.values, v)
        np.testing.assert_array_equal(top.gathered, gather_at(full, gather))
    coarse = host_ppr_topk(g, reset, k=10, lo=20, gather=gather, damping=0.8, tol=1e-6,
                           method="push", eps=1e-2)
    assert not np.array_equal(coarse.values, top.values)  # eps reaches the push


def test_auto_pushes_every_question_of_a_large_graph(monkeypatch):
    """From ``AUTO_PUSH_MIN_EDGES`` stored edges every row with up to ``AUTO_PUSH_MAX_SEEDS``
    seeds is pushed (the graph queries' ~40-120 seeds included: at 148k passages 2/3 of them
    had more than the old cap of 64 and took power iteration); below it, power iteration."""
    g = undirected_graph(7, n=400, m=1200)
    cap = ppr_module.AUTO_PUSH_MAX_SEEDS
    counts = [1, 64, 65, 121, cap, cap + 1]
    reset = sp.csr_array(np.vstack([seeded_row(g.n_nodes, c, seed=c) for c in counts]))
    monkeypatch.setattr(ppr_module, "AUTO_PUSH_MIN_EDGES", g.n_edges)
    assert push_rows(g, reset).tolist() == [True] * 5 + [False]  # one seed over: power
    monkeypatch.setattr(ppr_module, "AUTO_PUSH_MIN_EDGES", g.n_edges + 1)
    assert not push_rows(g, reset).any()


def test_push_from_many_threads_gives_the_same_bits_and_keeps_peak_work_arrays():
    """Eight threads pushing rows of one graph at once get each row's single-thread scores to
    the bit; the work arrays go back to the operator's free list zeroed, so a graph keeps at
    most as many sets as pushes ran at once (not one per thread that ever pushed)."""
    from concurrent.futures import ThreadPoolExecutor

    g = undirected_graph(11, n=300, m=900)
    rows = [seeded_row(g.n_nodes, 1 + i % 9, seed=100 + i) for i in range(96)]
    alone = [ppr(g, row, method="push", damping=0.8, eps=1e-5) for row in rows]
    op = _operator(g)
    assert len(op.scratch) == 1  # one push at a time: one set, reused
    for _ in range(2):  # a fresh pool's threads reuse the sets the last one left
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda row: ppr(g, row, method="push", damping=0.8,
                                                eps=1e-5), rows))
        for a, b in zip(alone, got, strict=True):
            np.testing.assert_array_equal(a, b)
        assert 1 <= len(op.scratch) <= 8
    for work in op.scratch:
        assert not work["p"].any() and not work["r"].any() and not work["seen"].any()


def test_a_small_push_on_a_large_graph_touches_and_scores_the_same_nodes():
    """The touched nodes are read from the work arrays' ``seen`` scan or, when the push is
    small for the graph, from its receivers: isolated nodes added to a graph (never touched)
    move a push from the one way to the other and change no id, bit or dtype."""
    g = undirected_graph(5, n=200, m=400)
    n_big = 200 * 1024
    big = CSRGraph(np.concatenate([g.indptr, np.full(n_big - 200, g.indptr[-1])]),
                   g.indices, g.weights)
    for seed in range(3):
        s, w = _seed_arrays(g.n_nodes, np.array([seed, 50 + seed]), np.array([1.0, 2.0]))
        small = _push_one(g, _operator(g), s, w, 0.8, 1e-3)
        large = _push_one(big, _operator(big), s, w, 0.8, 1e-3)
        assert 2 < small[0].size < g.n_nodes  # a local push, touching a part of the graph
        for a, b in zip(small, large, strict=True):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_the_push_reads_an_int32_graph_in_place_and_keeps_two_thresholds():
    """An int32 graph's neighbour ids are the push's as they are (an opened index's memory
    map, shared by the processes serving it; not a private copy), and only the last
    ``THRESHOLDS_KEPT`` eps values' thresholds stay cached, each ``eps * max(deg, 1)``."""
    g = undirected_graph(5)
    ro = np.asarray(g.indices, np.int32).copy()
    ro.flags.writeable = False  # as a read-only memory map is
    g = CSRGraph(g.indptr, ro, g.weights)
    op = _operator(g)
    arrays = ppr_module._push_arrays(g, op)
    assert np.shares_memory(arrays["indices"], g.indices)
    row = seeded_row(g.n_nodes, 3, seed=1)
    s, w = _seed_arrays(g.n_nodes, np.flatnonzero(row), row[row > 0])
    first = _push_one(g, op, s, w, 0.5, 1e-3)
    for eps in (1e-3, 1e-4, 1e-5, 1e-3):
        _push_one(g, op, s, w, 0.5, eps)
        assert len(arrays["thresholds"]) <= ppr_module.THRESHOLDS_KEPT
        assert np.array_equal(arrays["thresholds"][eps], eps * np.maximum(g.degree(), 1))
    again = _push_one(g, op, s, w, 0.5, 1e-3)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))


def test_sparse_topk_key_sort_orders_as_the_dense_rows():
    """The one-sort top-k (row, inverted score bits, column keys) orders every positive
    float32, subnormal ones and ties among them included, as the dense rows' top-k does."""
    rng = np.random.default_rng(5)
    q, n, lo, hi = 9, 300, 40, 290
    dense = np.zeros((q, n), np.float32)
    for i in range(q):
        cols = rng.choice(n, int(rng.integers(0, n)), replace=False)
        vals = rng.random(cols.size).astype(np.float32)
        vals[::3] = np.float32(1e-40)  # subnormal, and tied
        vals[1::5] = vals[1]  # ties at ordinary values
        dense[i, cols] = vals
    rows = sp.csr_array(dense)
    for k in (1, 7, 64, 260):
        want_v, want_i = numpy_topk(dense[:, lo:hi], k)
        got_v, got_i = sparse_topk(rows, k, lo, hi)
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_array_equal(got_v.view(np.int32), want_v.view(np.int32))
