import numpy as np
import pytest
import scipy.sparse as sp

import gpurag.graph.ppr as ppr_module
from gpurag.graph.csr import CSRGraph, build_csr, to_scipy
from gpurag.graph.ppr import (
    _operator,
    _push_one,
    _seed_arrays,
    ppr,
    ppr_power,
    ppr_push,
    ppr_push_batch,
)


def random_graph(seed: int, n: int = 40, m: int = 90, symmetric: bool = False) -> CSRGraph:
    """Weighted graph whose last 3 nodes are isolated; directed ones also have sinks."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n - 3, m)
    dst = rng.integers(0, n - 3, m)
    if not symmetric:
        src = np.where(src < 4, 4, src)  # nodes 0..3 get no out-edges: dangling sinks
    return build_csr(src, dst, rng.random(m) * 3 + 0.1, n, symmetric=symmetric)


def exact_ppr(g: CSRGraph, r: np.ndarray, d: float) -> np.ndarray:
    """Solve x = (1-d) r + d (P^T x + (dangling . x) r) densely."""
    a = to_scipy(g).toarray().astype(np.float64)
    out = a.sum(axis=1)
    p = np.divide(a, out[:, None], out=np.zeros_like(a), where=out[:, None] > 0)
    dang = (out == 0).astype(np.float64)
    r = r / r.sum()
    m = np.eye(len(r)) - d * p.T - d * np.outer(r, dang)
    return np.linalg.solve(m, (1 - d) * r)


def reset_matrix(n: int, q: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    r = np.zeros((q, n))
    for i in range(q):
        r[i, rng.choice(n, size=1 + i % 4, replace=False)] = rng.random(1 + i % 4) + 0.1
    r[0, -1] = 1.0  # an isolated seed
    return r


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("damping", [0.5, 0.85])
@pytest.mark.parametrize("dtype,atol", [(np.float64, 1e-9), (np.float32, 1e-6)])
def test_power_matches_exact_solve(symmetric, damping, dtype, atol):
    g = random_graph(1, symmetric=symmetric)
    r = reset_matrix(g.n_nodes, 5, seed=2)
    x = ppr_power(g, r, damping=damping, tol=1e-12, max_iter=500, dtype=dtype)
    assert x.shape == r.shape and x.dtype == np.float32
    for i in range(r.shape[0]):
        np.testing.assert_allclose(x[i], exact_ppr(g, r[i], damping), atol=atol)
    np.testing.assert_allclose(x.sum(axis=1), 1.0, atol=1e-6)


def test_power_matches_igraph():
    ig = pytest.importorskip("igraph")
    rng = np.random.default_rng(4)
    n, m = 60, 150
    src, dst, w = rng.integers(0, n - 2, m), rng.integers(0, n - 2, m), rng.random(m) + 0.1
    keep = src != dst  # igraph keeps self loops, build_csr drops them
    src, dst, w = src[keep], dst[keep], w[keep]
    gi = ig.Graph(n=n, edges=list(zip(src.tolist(), dst.tolist(), strict=True)), directed=True)
    r = np.zeros(n)
    r[[3, 7, n - 1]] = [1.0, 2.0, 0.5]
    expected = gi.personalized_pagerank(
        damping=0.5, reset=r.tolist(), weights=w.tolist(), directed=True
    )
    x = ppr_power(build_csr(src, dst, w, n, symmetric=False), r, dtype=np.float64)
    np.testing.assert_allclose(x[0], expected, atol=1e-7)


def test_power_batch_equals_single_and_sparse_input():
    g = random_graph(3)
    r = reset_matrix(g.n_nodes, 6, seed=5)
    batch = ppr_power(g, r, dtype=np.float64)
    single = np.vstack([ppr_power(g, row, dtype=np.float64) for row in r])
    np.testing.assert_allclose(batch, single, atol=1e-8)
    np.testing.assert_allclose(ppr_power(g, sp.csr_array(r), dtype=np.float64), batch, atol=1e-12)
    # rows are normalized inside: scaling a row changes nothing
    np.testing.assert_allclose(ppr_power(g, r * 7.0, dtype=np.float64), batch, atol=1e-12)


def test_power_dense_reset_path():
    g = random_graph(6, symmetric=True)
    r = np.random.default_rng(0).random((3, g.n_nodes))  # every node a seed
    x = ppr_power(g, r, dtype=np.float64)
    for i in range(3):
        np.testing.assert_allclose(x[i], exact_ppr(g, r[i], 0.5), atol=1e-9)


def test_zero_row_is_an_error_naming_the_row():
    g = random_graph(0)
    r = reset_matrix(g.n_nodes, 4, seed=1)
    r[2] = 0.0
    for fn in (ppr_power, ppr_push_batch, ppr):
        with pytest.raises(ValueError, match="row 2"):
            fn(g, r)
    with pytest.raises(ValueError, match="nonnegative"):
        ppr_power(g, -reset_matrix(g.n_nodes, 1, seed=1))
    with pytest.raises(ValueError, match="columns"):
        ppr_power(g, np.ones((1, g.n_nodes + 1)))


def test_nonconvergence_warns():
    g = random_graph(0)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        ppr_power(g, reset_matrix(g.n_nodes, 1, 0), damping=0.85, max_iter=3, dtype=np.float64)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("eps", [1e-2, 1e-3, 1e-5])
def test_push_within_documented_bound(symmetric, eps):
    g = random_graph(7, symmetric=symmetric)
    d = 0.5
    r = reset_matrix(g.n_nodes, 4, seed=8)
    for row in r:
        seeds = np.flatnonzero(row)
        nodes, scores = ppr_push(g, seeds, row[seeds], damping=d, eps=eps)
        est = np.zeros(g.n_nodes)
        est[nodes] = scores
        err = np.abs(est - exact_ppr(g, row, d)).sum()
        s, w = _seed_arrays(g.n_nodes, seeds, row[seeds])
        touched, _, res = _push_one(g, _operator(g), s, w, d, eps)
        bound = 2 * d * res.sum()
        assert err <= bound + 1e-6
        assert res.sum() <= eps * np.maximum(g.degree()[touched], 1).sum() + 1e-12
        assert abs(scores.sum() - 1.0) < 1e-5
        assert np.all(np.diff(nodes) > 0)


def test_push_converges_to_exact_with_small_eps():
    g = random_graph(9, symmetric=True)
    row = reset_matrix(g.n_nodes, 1, seed=3)[0]
    seeds = np.flatnonzero(row)
    nodes, scores = ppr_push(g, seeds, row[seeds], eps=1e-10)
    est = np.zeros(g.n_nodes)
    est[nodes] = scores
    np.testing.assert_allclose(est, exact_ppr(g, row, 0.5), atol=1e-7)


def test_push_is_local():
    # two disconnected cliques-ish components: a seed in one never touches the other
    rng = np.random.default_rng(0)
    a = rng.integers(0, 20, 100)
    b = rng.integers(0, 20, 100)
    g = build_csr(np.concatenate([a, a + 20]), np.concatenate([b, b + 20]), None, 40)
    nodes, scores = ppr_push(g, np.array([3]), eps=1e-9)
    assert nodes.max() < 20 and scores.min() > 0


def test_push_seed_handling():
    g = random_graph(2)
    n1, s1 = ppr_push(g, np.array([5, 5, 9]), np.array([1.0, 1.0, 2.0]))
    n2, s2 = ppr_push(g, np.array([9, 5]), np.array([1.0, 1.0]))
    np.testing.assert_array_equal(n1, n2)
    np.testing.assert_allclose(s1, s2)
    with pytest.raises(ValueError):
        ppr_push(g, np.array([], dtype=int))
    with pytest.raises(ValueError):
        ppr_push(g, np.array([g.n_nodes]))
    with pytest.raises(ValueError, match="all zero"):
        ppr_push(g, np.array([1]), np.array([0.0]))


def test_push_batch_equals_one_by_one():
    g = random_graph(11)
    r = reset_matrix(g.n_nodes, 7, seed=12)
    batch = ppr_push_batch(g, sp.csr_array(r), eps=1e-4)
    assert isinstance(batch, sp.csr_array) and batch.shape == r.shape
    for i, row in enumerate(r):
        seeds = np.flatnonzero(row)
        nodes, scores = ppr_push(g, seeds, row[seeds], eps=1e-4)
        np.testing.assert_array_equal(batch[[i]].indices, nodes)
        np.testing.assert_allclose(batch[[i]].data, scores, rtol=1e-6)
    np.testing.assert_allclose(batch.sum(axis=1), 1.0, atol=1e-5)


def test_dispatcher(monkeypatch):
    monkeypatch.setattr(ppr_module, "AUTO_PUSH_MAX_SEEDS", 10)
    monkeypatch.setattr(ppr_module, "AUTO_PUSH_MIN_EDGES", 0)
    g = random_graph(13, symmetric=True)
    few = reset_matrix(g.n_nodes, 3, seed=1)
    many = np.ones((2, g.n_nodes))
    power = ppr_power(g, few)
    np.testing.assert_array_equal(ppr(g, few, method="power"), power)
    push = ppr(g, few, method="push", eps=1e-4, output="sparse")
    assert isinstance(push, sp.csr_array)
    np.testing.assert_allclose(push.toarray(), ppr_push_batch(g, few, eps=1e-4).toarray())
    # auto: push for sparse rows (result differs from power by push's error), power for dense
    auto_few = ppr(g, few, eps=1e-2)
    assert np.abs(auto_few - power).max() > 1e-6
    np.testing.assert_allclose(auto_few, ppr_push_batch(g, few, eps=1e-2).toarray())
    np.testing.assert_array_equal(ppr(g, many), ppr_power(g, many))
    assert ppr_module.choose_method(g, sp.csr_array(many)) == "power"
    assert ppr_module.choose_method(g, few) == "push"
    monkeypatch.setattr(ppr_module, "AUTO_PUSH_MIN_EDGES", g.n_edges + 1)  # small graph: power
    assert ppr_module.choose_method(g, few) == "power"
    np.testing.assert_array_equal(ppr(g, few), power)
    assert ppr(g, few[0]).shape == (1, g.n_nodes)
    with pytest.raises(ValueError):
        ppr(g, few, method="exact")


def test_auto_picks_the_method_per_row_so_a_batch_scores_as_its_rows_alone(monkeypatch):
    """One question with many seeds used to send its whole batch to power iteration."""
    monkeypatch.setattr(ppr_module, "AUTO_PUSH_MAX_SEEDS", 10)
    monkeypatch.setattr(ppr_module, "AUTO_PUSH_MIN_EDGES", 0)
    g = random_graph(13, symmetric=True)
    few = np.asarray(reset_matrix(g.n_nodes, 3, seed=1))
    batch = np.vstack([few[:1], np.ones((1, g.n_nodes)), few[1:]])  # row 1: every node a seed
    assert ppr_module.push_rows(g, batch).tolist() == [True, False] + [True] * (len(few) - 1)
    alone = np.vstack([ppr(g, row, eps=1e-2) for row in batch])
    np.testing.assert_allclose(ppr(g, batch, eps=1e-2), alone, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ppr(g, batch, eps=1e-2, output="sparse").toarray(), alone,
                               rtol=1e-6, atol=1e-9)
    # and the pushed rows really were pushed (push's error is visible against power)
    assert np.abs(alone[0] - ppr_power(g, batch[:1])[0]).max() > 1e-6


def test_power_iteration_scores_do_not_depend_on_the_batch():
    """A question's PPR scores are the same alone or in any batch (converged columns freeze),
    so a served request gets exactly what a direct query would."""
    from gpurag.graph import build_csr
    from gpurag.graph.ppr import ppr

    rng = np.random.default_rng(0)
    n, m = 3000, 20000
    g = build_csr(rng.integers(0, n, m), rng.integers(0, n, m), rng.random(m).astype(np.float32),
                  n_nodes=n, symmetric=True)
    reset = sp.random(16, n, density=0.002, random_state=1, format="csr")
    reset.data[:] = 1.0
    reset = reset + sp.csr_array((np.ones(16), (np.arange(16), np.arange(16))), shape=(16, n))
    batch = ppr(g, reset, method="power", damping=0.8, tol=1e-4)
    single = np.vstack([ppr(g, reset[[i]], method="power", damping=0.8, tol=1e-4)
                        for i in range(16)])
    assert np.array_equal(batch, single)


def test_the_modules_size_rule_is_the_ranking_profiles():
    """A direct ``ppr`` call routes rows as the query does: the module's defaults are the
    profile's ``push_min_edges`` / ``push_max_seeds``."""
    from gpurag.profile import RankingProfile

    profile = RankingProfile()
    rule = (profile.push_min_edges, profile.push_max_seeds)
    assert rule == (ppr_module.AUTO_PUSH_MIN_EDGES, ppr_module.AUTO_PUSH_MAX_SEEDS)
