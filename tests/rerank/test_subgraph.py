"""Candidate subgraph extraction: batched equals one by one, caps, priorities, induced edges."""

from __future__ import annotations

import numpy as np
import pytest

from gpurag.graph.csr import build_csr
from gpurag.rerank.subgraph import extract_subgraphs, ranges


def _random_graph(seed: int = 0, n: int = 80, m: int = 300):
    rng = np.random.default_rng(seed)
    return build_csr(rng.integers(0, n, m), rng.integers(0, n, m), rng.uniform(0.1, 2, m), n)


def _edge_set(sub, s: int) -> set[tuple[int, int]]:
    lo, hi = sub.ptr[s], sub.ptr[s + 1]
    src, dst = sub.edge_index
    keep = (src >= lo) & (src < hi)
    assert np.all((dst[keep] >= lo) & (dst[keep] < hi)), "edge leaves its subgraph"
    return {(int(sub.node[a]), int(sub.node[b])) for a, b in zip(src[keep], dst[keep],
                                                                  strict=True)}


def test_ranges():
    assert ranges(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist() == [5, 6, 9, 10, 11]
    assert ranges(np.array([], np.int64), np.array([], np.int64)).size == 0


@pytest.mark.parametrize("fanout,max_nodes", [((4, 2), 12), ((3,), 5), ((6, 3, 2), 30)])
def test_batched_equals_one_by_one(fanout, max_nodes):
    g = _random_graph()
    rng = np.random.default_rng(1)
    prio = rng.random((3, g.n_nodes))
    roots = rng.integers(0, g.n_nodes, 20)
    owner = rng.integers(0, 3, 20)
    sub = extract_subgraphs(g, roots, owner, prio, fanout, max_nodes)
    assert sub.n_subgraphs == 20
    for s in range(20):
        one = extract_subgraphs(g, roots[s:s + 1], owner[s:s + 1], prio, fanout, max_nodes)
        lo, hi = sub.ptr[s], sub.ptr[s + 1]
        assert sub.node[lo:hi].tolist() == one.node.tolist()
        assert sub.hop[lo:hi].tolist() == one.hop.tolist()
        assert _edge_set(sub, s) == _edge_set(one, 0)


def test_caps_priority_and_induced_edges():
    g = _random_graph(2)
    rng = np.random.default_rng(3)
    prio = rng.random((1, g.n_nodes))
    roots = np.arange(10)
    sub = extract_subgraphs(g, roots, np.zeros(10, np.int64), prio, (3, 2), 8)
    dense = np.zeros((g.n_nodes, g.n_nodes))
    dense[np.repeat(np.arange(g.n_nodes), g.degree()), g.indices] = g.weights
    for s, root in enumerate(roots):
        lo, hi = sub.ptr[s], sub.ptr[s + 1]
        nodes, hops = sub.node[lo:hi], sub.hop[lo:hi]
        assert nodes[0] == root and hops[0] == 0
        assert len(set(nodes.tolist())) == len(nodes) <= 8
        nbrs = np.flatnonzero(dense[root])
        hop1 = nodes[hops == 1]
        assert len(hop1) == min(3, len(nbrs))
        # the highest-priority neighbours of the root are the ones kept
        assert set(hop1.tolist()) == set(nbrs[np.argsort(-prio[0, nbrs])][:3].tolist())
        assert np.all(np.diff(hops) >= 0)
        # induced: every graph edge among the nodes, with its weight, and nothing else
        want = {(int(a), int(b)) for a in nodes for b in nodes if dense[a, b] > 0}
        assert _edge_set(sub, s) == want
    src, dst = sub.edge_index
    np.testing.assert_allclose(sub.edge_weight, dense[sub.node[src], sub.node[dst]], rtol=1e-6)


def test_isolated_root_and_validation():
    g = build_csr(np.array([0]), np.array([1]), None, 4)
    sub = extract_subgraphs(g, np.array([3, 0]), np.array([0, 0]), np.ones((1, 4)))
    assert sub.ptr.tolist() == [0, 1, 3]
    assert sub.node.tolist() == [3, 0, 1]
    with pytest.raises(ValueError):
        extract_subgraphs(g, np.array([9]), np.array([0]), np.ones((1, 4)))


def _reference(g, root: int, prio: np.ndarray, fanout, max_nodes):
    """Plain-Python BFS with the documented rules, one root."""
    nbrs = {u: g.indices[g.indptr[u]:g.indptr[u + 1]].tolist() for u in range(g.n_nodes)}
    chosen = [(0, -np.inf, root)]
    seen, frontier = {root}, [root]
    for hop, cap in enumerate(fanout, start=1):
        new: dict[int, float] = {}
        for u in frontier:
            cand = sorted((v for v in nbrs[u] if v not in seen), key=lambda v: (-prio[v], v))
            for v in cand[:cap]:
                new[v] = prio[v]
        chosen += [(hop, -p, v) for v, p in new.items()]
        seen |= set(new)
        frontier = list(new)
    return [v for _, _, v in sorted(chosen)[:max_nodes]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_plain_python_reference(seed):
    g = _random_graph(seed, n=60, m=400)
    rng = np.random.default_rng(seed)
    prio = np.round(rng.random((2, g.n_nodes)), 1)  # many ties: broken by node id
    roots, owner = rng.integers(0, 60, 25), rng.integers(0, 2, 25)
    sub = extract_subgraphs(g, roots, owner, prio, (4, 3), 14)
    for s in range(25):
        got = sub.node[sub.ptr[s]:sub.ptr[s + 1]].tolist()
        assert got == _reference(g, int(roots[s]), prio[owner[s]], (4, 3), 14)
