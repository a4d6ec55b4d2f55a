"""``groups.components``: SciPy's undirected connected-component labels, without loading
``scipy.sparse.csgraph`` (every alias resolution, a local insert's included, calls it)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from gpurag.resolve.groups import components


def _scipy(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    graph = sp.coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n)).tocsr()
    return connected_components(graph, directed=False)[1]


def test_components_give_scipys_labels_on_random_graphs_paths_stars_and_no_edges():
    rng = np.random.default_rng(7)
    cases = [(0, np.zeros(0, np.int64), np.zeros(0, np.int64)),
             (5, np.zeros(0, np.int64), np.zeros(0, np.int64)),
             (4, np.array([2, 2]), np.array([2, 2]))]  # self loops only
    for _ in range(300):
        n = int(rng.integers(1, 80))
        m = int(rng.integers(0, 2 * n))
        cases.append((n, rng.integers(0, n, m), rng.integers(0, n, m)))
        perm = rng.permutation(n)  # a path through the nodes in random order
        cases.append((n, perm[:-1], perm[1:]))
        cases.append((n, np.full(n - 1, n - 1), np.arange(n - 1)))  # a star centred on the last
    for n, a, b in cases:
        got, want = components(n, a, b), _scipy(n, a, b)
        assert got.dtype == want.dtype and np.array_equal(got, want), (n, a, b)


def test_components_of_a_long_path_given_in_random_order():
    rng = np.random.default_rng(3)
    n = 20_000
    perm = rng.permutation(n)
    a, b = np.concatenate([perm[:-1], rng.integers(0, n, 50)]), np.concatenate(
        [perm[1:], rng.integers(0, n, 50)])
    assert np.array_equal(components(n, a, b), _scipy(n, a, b))
