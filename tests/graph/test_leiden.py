import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import gpurag.graph.leiden as leiden_module
from gpurag.graph.csr import CSRGraph, build_csr, from_scipy, to_scipy
from gpurag.graph.leiden import hierarchical_leiden, modularity

IMPLEMENTATIONS = ["graspologic-native", "igraph"]


def planted_graph(
    n_groups: int = 6, size: int = 12, p_in: float = 0.6, n_between: int = 8, seed: int = 0
) -> tuple[CSRGraph, np.ndarray]:
    """Dense groups joined by a few edges, plus 2 isolated nodes at the end."""
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for k in range(n_groups):
        u, v = np.triu_indices(size, 1)
        keep = rng.random(u.size) < p_in
        src.append(u[keep] + k * size)
        dst.append(v[keep] + k * size)
    n = n_groups * size
    src.append(rng.integers(0, n, n_between))
    dst.append(rng.integers(0, n, n_between))
    s, d = np.concatenate(src), np.concatenate(dst)
    g = build_csr(s, d, rng.random(s.size) + 0.5, n + 2)
    return g, np.repeat(np.arange(n_groups), size)


def check_hierarchy(df: pd.DataFrame, n: int, max_cluster_size: int, capped: bool) -> None:
    assert list(df.columns) == ["node", "level", "community", "parent", "is_final"]
    assert df.dtypes.tolist() == [np.int32, np.int16, np.int32, np.int32, bool]
    # one community per node per level, level 0 covers every node
    assert not df.duplicated(["node", "level"]).any()
    assert sorted(df[df.level == 0].node) == list(range(n))
    assert (df[df.level == 0].parent == -1).all()
    # community ids are unique across levels, and each has one parent
    assert (df.groupby("community")["level"].nunique() == 1).all()
    assert (df.groupby("community").parent.nunique() == 1).all()
    # levels nest: a node's parent at L+1 is its community at L
    comm_at = df.set_index(["node", "level"]).community
    deeper = df[df.level > 0]
    expected_parent = comm_at.loc[list(zip(deeper.node, deeper.level - 1, strict=True))]
    np.testing.assert_array_equal(deeper.parent.to_numpy(), expected_parent.to_numpy())
    # only oversize communities have children, and those that do split (>1 child)
    sizes = df.groupby("community").size()
    children = deeper.groupby("parent").community.nunique()
    assert (sizes[children.index] > max_cluster_size).all()
    assert (children > 1).all()
    # exactly one final row per node, at its deepest level
    final = df[df.is_final]
    assert sorted(final.node) == list(range(n))
    np.testing.assert_array_equal(
        final.sort_values("node").level.to_numpy(),
        df.groupby("node")["level"].max().sort_index().to_numpy(),
    )
    if capped:
        assert final.groupby("community").size().max() <= max_cluster_size


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_planted_partition_is_found(implementation):
    g, truth = planted_graph(p_in=0.9)
    df = hierarchical_leiden(g, max_cluster_size=100, implementation=implementation)
    assert df.attrs["implementation"] == implementation
    assert df.level.max() == 0
    level0 = df.sort_values("node").community.to_numpy()
    n = truth.size
    # same partition of the planted groups (up to labels), isolated nodes alone
    assert pd.crosstab(level0[:n], truth).gt(0).sum(axis=1).eq(1).all()
    assert len(set(level0[:n])) == truth.max() + 1
    assert len({level0[n], level0[n + 1]} - set(level0[:n])) == 2
    check_hierarchy(df, g.n_nodes, 100, capped=True)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("max_cluster_size", [3, 5, 20])
def test_hierarchy_invariants_and_cap(implementation, max_cluster_size):
    g, _ = planted_graph(n_groups=5, size=25, p_in=0.3, seed=1)
    df = hierarchical_leiden(g, max_cluster_size=max_cluster_size, implementation=implementation)
    assert df.level.max() >= 1
    check_hierarchy(df, g.n_nodes, max_cluster_size, capped=True)


def test_unsplittable_without_boosts_matches_graspologic_rule():
    star = build_csr(np.zeros(30, int), np.arange(1, 31), None, 31)
    whole = hierarchical_leiden(star, max_cluster_size=10, resolution_boosts=0)
    assert whole.level.max() == 0 and whole.community.nunique() == 1
    check_hierarchy(whole, 31, 10, capped=False)
    split = hierarchical_leiden(star, max_cluster_size=10)
    check_hierarchy(split, 31, 10, capped=True)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_deterministic_with_seed(implementation):
    g, _ = planted_graph(n_groups=4, size=30, p_in=0.25, seed=3)
    a = hierarchical_leiden(g, max_cluster_size=8, seed=7, implementation=implementation)
    b = hierarchical_leiden(g, max_cluster_size=8, seed=7, implementation=implementation)
    pd.testing.assert_frame_equal(a, b)


def test_no_edges_and_empty_graph():
    g = build_csr(np.zeros(0, int), np.zeros(0, int), None, 4)
    df = hierarchical_leiden(g, max_cluster_size=1)
    assert sorted(df.community) == [0, 1, 2, 3] and df.is_final.all()
    empty = hierarchical_leiden(build_csr(np.zeros(0, int), np.zeros(0, int), None, 0))
    assert len(empty) == 0 and empty.columns[0] == "node"


def test_directed_input_is_symmetrized():
    g, _ = planted_graph(seed=4)
    directed = from_scipy(sp.triu(to_scipy(g)))
    a = hierarchical_leiden(g, max_cluster_size=5)
    b = hierarchical_leiden(directed, max_cluster_size=5)
    pd.testing.assert_frame_equal(a, b)


def test_self_loops_are_ignored():
    g, _ = planted_graph(seed=5)
    a = to_scipy(g).tolil()
    a.setdiag(3.0)
    looped = a.tocsr()
    h = CSRGraph(looped.indptr, looped.indices, looped.data)  # by hand: build_csr drops loops
    assert h.n_edges == g.n_edges + g.n_nodes
    pd.testing.assert_frame_equal(
        hierarchical_leiden(h, max_cluster_size=5), hierarchical_leiden(g, max_cluster_size=5)
    )


def test_custom_labels_fn():
    g, _ = planted_graph(n_groups=4, size=30, p_in=0.25, seed=3)
    calls = []

    def spy(*args):
        calls.append(args[3])
        return leiden_module._leiden_igraph(*args)

    a = hierarchical_leiden(g, max_cluster_size=8, labels_fn=spy, implementation="mine")
    b = hierarchical_leiden(g, max_cluster_size=8, implementation="igraph")
    assert a.attrs["implementation"] == "mine" and calls[0] == g.n_nodes and len(calls) > 1
    assert a.equals(b)  # same flat Leiden, same hierarchy


def test_bad_arguments():
    g, _ = planted_graph()
    with pytest.raises(ValueError):
        hierarchical_leiden(g, max_cluster_size=0)
    with pytest.raises(ValueError):
        hierarchical_leiden(g, resolution=0)
    with pytest.raises(ValueError):
        hierarchical_leiden(g, implementation="networkx")


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_block_diagonal_batching_matches_separate_runs(implementation):
    """Clustering several subnetworks in one call scores like clustering each alone."""
    _, leiden = leiden_module._backend(implementation)
    blocks = [planted_graph(n_groups=k, size=15, p_in=0.4, seed=k)[0] for k in (3, 4, 6)]
    a = sp.csr_array(sp.block_diag([to_scipy(b) for b in blocks]), dtype=np.float64)
    n = a.shape[0]
    rows = np.repeat(np.arange(n), np.diff(a.indptr))
    block = np.repeat(np.arange(3), [b.n_nodes for b in blocks])
    labels = leiden_module._split_blocks(a, rows, np.arange(n), block, 3, 1.0, 0.001, 5, leiden)
    for k, b in enumerate(blocks):
        sub = sp.csr_array(to_scipy(b), dtype=np.float64)
        alone = leiden(*leiden_module._canonical(sub), b.n_nodes, 1.0, 0.001, 5)
        batched = modularity(b, labels[block == k])
        assert batched >= modularity(b, alone) - 0.01
        assert batched > 0.4  # the planted groups are found inside each block


@pytest.mark.parametrize("resolution", [1.0, 0.5, 2.0])
def test_modularity_matches_igraph(resolution):
    ig = pytest.importorskip("igraph")
    rng = np.random.default_rng(5)
    n, m = 50, 160
    src, dst, w = rng.integers(0, n, m), rng.integers(0, n, m), rng.random(m) + 0.1
    g = build_csr(src, dst, w, n)
    membership = rng.integers(0, 5, n)
    a = sp.triu(sp.csr_array((g.weights.astype(np.float64), g.indices, g.indptr))).tocoo()
    graph = ig.Graph(n=n, edges=list(zip(a.row.tolist(), a.col.tolist(), strict=True)))
    expected = graph.modularity(membership.tolist(), weights=a.data.tolist(), resolution=resolution)
    assert modularity(g, membership, resolution) == pytest.approx(expected, abs=1e-6)
    # labels are arbitrary: relabeling changes nothing
    assert modularity(g, membership * 10 + 3, resolution) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError):
        modularity(g, membership[:-1])


def test_leiden_level0_beats_trivial_partitions():
    g, truth = planted_graph()
    df = hierarchical_leiden(g, max_cluster_size=1000)
    level0 = df.sort_values("node").community.to_numpy()
    planted = np.concatenate([truth, [100, 101]])
    assert modularity(g, level0) >= modularity(g, planted) - 1e-9
    assert modularity(g, np.zeros(g.n_nodes)) == pytest.approx(0.0, abs=1e-12)
