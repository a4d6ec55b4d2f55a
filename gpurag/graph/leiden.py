"""Hierarchical Leiden with a community-size cap, and modularity, over a CSR graph.

:func:`hierarchical_leiden` follows graspologic's ``hierarchical_leiden`` (as GraphRAG uses it):
Leiden on the whole graph gives level 0; every community larger than ``max_cluster_size`` is
clustered again as its own subnetwork, giving the next level, until none is too large. Unlike
graspologic it clusters all oversize communities of a level in ONE native call: the subnetworks
are laid side by side as a block-diagonal graph, each block's weights scaled by ``M / m_b``
(``m_b`` its total weight, ``M`` their mean) and the resolution multiplied by the number of
blocks ``B``. Then the modularity gain of any move inside block ``b`` is ``M / m_b`` times its
gain in the subnetwork alone, so the optimisation equals the per-subnetwork runs (Leiden never
joins disconnected blocks). A community that Leiden leaves whole is retried at doubled
resolution (``resolution_boosts`` times), so the cap holds wherever a split exists.

Backend: graspologic-native's ``leiden_csr`` (zero-copy CSR) when importable, otherwise
igraph's ``community_leiden``; the result's ``attrs["implementation"]`` names the one used.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Literal

import numpy as np
import pandas as pd
import scipy.sparse as sp

from gpurag.graph.csr import CSRGraph

try:  # pragma: no cover - exercised by whichever is installed
    import graspologic_native as _gn
except ImportError:  # pragma: no cover
    _gn = None

Implementation = Literal["auto", "graspologic-native", "igraph"]
# (indptr int64, indices int32, data float64, n, resolution, randomness, seed) -> labels (n,)
LabelsFn = Callable[[np.ndarray, np.ndarray, np.ndarray, int, float, float, int], np.ndarray]

COLUMNS = ("node", "level", "community", "parent", "is_final")


def _leiden_graspologic(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    n: int,
    resolution: float,
    randomness: float,
    seed: int,
) -> np.ndarray:
    if indices.size == 0:  # leiden_csr panics on a graph without edges
        return np.arange(n, dtype=np.int64)
    kwargs = {"resolution": resolution, "randomness": randomness, "seed": seed}
    labels = np.full(n, -1, dtype=np.int64)
    if hasattr(_gn, "leiden_csr"):  # graspologic-native >= 1.3: zero-copy CSR
        _, mapping = _gn.leiden_csr(indptr, indices, data, n, **kwargs)
        keys = np.fromiter(mapping.keys(), np.int64, len(mapping))
    else:  # older releases take an edge list of strings and skip isolated nodes
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        upper = rows < indices
        edges = list(
            zip(
                rows[upper].astype(str).tolist(),
                indices[upper].astype(str).tolist(),
                data[upper].tolist(),
                strict=True,
            )
        )
        _, mapping = _gn.leiden(edges, **kwargs)
        keys = np.array(list(mapping.keys()), dtype=np.int64)
    labels[keys] = np.fromiter(mapping.values(), np.int64, len(mapping))
    missing = labels < 0
    labels[missing] = labels.max(initial=-1) + 1 + np.arange(int(missing.sum()))
    return labels


def _leiden_igraph(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    n: int,
    resolution: float,
    randomness: float,
    seed: int,
) -> np.ndarray:
    import igraph as ig

    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    upper = rows < indices
    graph = ig.Graph(n=n, edges=np.column_stack([rows[upper], indices[upper]]), directed=False)
    ig.set_random_number_generator(random.Random(seed))
    try:
        part = graph.community_leiden(
            objective_function="modularity",
            weights=data[upper],
            resolution=resolution,
            beta=randomness,
            n_iterations=2,  # -1 ("until stable") can cycle forever in igraph 1.0
        )
    finally:
        ig.set_random_number_generator(random)
    return np.asarray(part.membership, dtype=np.int64)


def _backend(implementation: Implementation) -> tuple[str, LabelsFn]:
    if implementation == "auto":
        implementation = "graspologic-native" if _gn is not None else "igraph"
    if implementation == "graspologic-native":
        if _gn is None:
            raise ImportError("graspologic-native is not installed")
        return implementation, _leiden_graspologic
    if implementation == "igraph":
        return implementation, _leiden_igraph
    raise ValueError(f"unknown Leiden implementation {implementation!r}")


def _undirected(g: CSRGraph) -> sp.csr_array:
    """Adjacency as float64 CSR without self loops; asymmetric input becomes ``A + A^T``."""
    a = sp.csr_array(
        (g.weights.astype(np.float64), np.asarray(g.indices), np.asarray(g.indptr)),
        shape=(g.n_nodes, g.n_nodes),
    )
    if a.diagonal().any():  # only a hand-made CSRGraph can have them; leiden_csr rejects them
        a = sp.csr_array(a - sp.diags_array(a.diagonal()))
        a.eliminate_zeros()
    if (a != a.T).nnz:
        a = sp.csr_array(a + a.T)
    a.sum_duplicates()
    return a


def _canonical(a: sp.csr_array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a.sum_duplicates()
    return a.indptr.astype(np.int64), a.indices.astype(np.int32), a.data.astype(np.float64)


def _split_blocks(
    a: sp.csr_array,
    rows: np.ndarray,
    nodes: np.ndarray,
    block: np.ndarray,
    n_blocks: int,
    resolution: float,
    randomness: float,
    seed: int,
    leiden: LabelsFn,
) -> np.ndarray:
    """Cluster each block (``nodes`` labelled ``block`` in ``0..n_blocks-1``) on its own.

    Returns a local community label per entry of ``nodes``: unique across blocks, dense.
    """
    n = a.shape[0]
    local = np.full(n, -1, dtype=np.int64)
    local[nodes] = np.arange(nodes.size)
    owner = np.full(n, -1, dtype=np.int64)
    owner[nodes] = block
    cols = a.indices
    keep = (owner[rows] >= 0) & (owner[rows] == owner[cols])
    e_block = owner[rows[keep]]
    m_b = np.bincount(e_block, weights=a.data[keep], minlength=n_blocks)
    used = m_b > 0
    scale = np.zeros(n_blocks)
    scale[used] = m_b[used].mean() / m_b[used]
    sub = sp.csr_array(
        (a.data[keep] * scale[e_block], (local[rows[keep]], local[cols[keep]])),
        shape=(nodes.size, nodes.size),
    )
    labels = leiden(
        *_canonical(sub), nodes.size, resolution * max(int(used.sum()), 1), randomness, seed
    )
    # Blocks without internal edges: every node becomes its own community.
    no_edges = ~used[block]
    labels[no_edges] = labels.max(initial=-1) + 1 + np.arange(int(no_edges.sum()))
    _, dense = np.unique(block * (labels.max() + 1) + labels, return_inverse=True)
    return dense.astype(np.int64)


def hierarchical_leiden(
    g: CSRGraph,
    max_cluster_size: int = 10,
    resolution: float = 1.0,
    seed: int = 42,
    randomness: float = 0.001,
    resolution_boosts: int = 4,
    max_levels: int = 64,
    implementation: Implementation = "auto",
    labels_fn: LabelsFn | None = None,
) -> pd.DataFrame:
    """Hierarchical Leiden clustering of an undirected graph, all levels kept.

    Returns a DataFrame with columns ``node`` (int32), ``level`` (int16), ``community``
    (int32, unique across levels), ``parent`` (int32: the node's community at ``level - 1``,
    -1 at level 0) and ``is_final`` (bool: the node's deepest level). Level 0 covers every
    node (isolated nodes are singleton communities); level ``L + 1`` covers the nodes of the
    level-``L`` communities larger than ``max_cluster_size`` (default 10, GraphRAG's default).
    ``resolution_boosts=0`` stops at
    communities Leiden will not split, as graspologic does. ``attrs["implementation"]`` names
    the backend. Deterministic for a given ``seed`` and backend. ``labels_fn`` substitutes
    another flat Leiden (e.g. cuGraph's) with the signature ``(indptr int64, indices int32,
    data float64, n, resolution, randomness, seed) -> labels (n,)``; it must optimise
    modularity on the undirected graph given, and ``implementation`` then only names it.
    """
    if max_cluster_size < 1:
        raise ValueError("max_cluster_size must be at least 1")
    if resolution <= 0:
        raise ValueError("resolution must be positive")
    if labels_fn is None:
        name, leiden = _backend(implementation)
    else:
        name, leiden = str(implementation), labels_fn
    n = g.n_nodes
    a = _undirected(g)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(a.indptr))
    frames: list[tuple[np.ndarray, int, np.ndarray, np.ndarray]] = []
    if n:
        labels = leiden(*_canonical(a), n, resolution, randomness, seed)
        _, comm = np.unique(labels, return_inverse=True)
        comm = comm.astype(np.int64)
        next_id = int(comm.max()) + 1
        nodes = np.arange(n, dtype=np.int64)
        frames.append((nodes, 0, comm, np.full(n, -1, dtype=np.int64)))
        for level in range(1, max_levels):
            sizes = np.bincount(comm, minlength=next_id)
            big = sizes[comm] > max_cluster_size
            if not big.any():
                break
            nodes, parent = nodes[big], comm[big]
            new = np.full(nodes.size, -1, dtype=np.int64)
            pending = np.ones(nodes.size, dtype=bool)
            for attempt in range(resolution_boosts + 1):
                _, block = np.unique(parent[pending], return_inverse=True)
                local = _split_blocks(
                    a,
                    rows,
                    nodes[pending],
                    block,
                    int(block.max()) + 1,
                    resolution * 2.0**attempt,
                    randomness,
                    seed + 7919 * level + attempt,
                    leiden,
                )
                label_block = np.zeros(int(local.max()) + 1, dtype=np.int64)
                label_block[local] = block
                parts_per_block = np.bincount(label_block, minlength=int(block.max()) + 1)
                split = parts_per_block[block] > 1
                idx = np.flatnonzero(pending)[split]
                if idx.size:
                    _, dense = np.unique(local[split], return_inverse=True)
                    new[idx] = next_id + dense
                    next_id += int(dense.max()) + 1
                pending[idx] = False
                if not pending.any() or attempt == resolution_boosts:
                    break
            done = new >= 0
            if not done.any():
                break
            nodes, parent, comm_next = nodes[done], parent[done], new[done]
            frames.append((nodes, level, comm_next, parent))
            comm = comm_next
    return _to_frame(frames, n, name)


def _to_frame(
    frames: list[tuple[np.ndarray, int, np.ndarray, np.ndarray]], n: int, name: str
) -> pd.DataFrame:
    if frames:
        node = np.concatenate([f[0] for f in frames])
        level = np.concatenate([np.full(f[0].size, f[1]) for f in frames])
        community = np.concatenate([f[2] for f in frames])
        parent = np.concatenate([f[3] for f in frames])
    else:
        node = level = community = parent = np.zeros(0, dtype=np.int64)
    deepest = np.full(n, -1, dtype=np.int64)
    np.maximum.at(deepest, node, level)
    df = pd.DataFrame(
        {
            "node": node.astype(np.int32),
            "level": level.astype(np.int16),
            "community": community.astype(np.int32),
            "parent": parent.astype(np.int32),
            "is_final": level == deepest[node],
        }
    )
    df.attrs["implementation"] = name
    return df


def modularity(g: CSRGraph, membership: np.ndarray, resolution: float = 1.0) -> float:
    """Newman modularity of ``membership`` (one label per node) on the undirected graph.

    ``Q = 1/(2m) * sum_ij (A_ij - resolution * k_i k_j / (2m)) * [c_i == c_j]``, with
    weighted degrees ``k`` and ``2m`` the total of the symmetric weights (as igraph). Self
    loops are ignored (as in :func:`hierarchical_leiden`); asymmetric input becomes ``A + A^T``.
    """
    membership = np.asarray(membership)
    if membership.shape != (g.n_nodes,):
        raise ValueError(f"membership must have one label per node ({g.n_nodes})")
    a = _undirected(g)
    two_m = float(a.data.sum())
    if two_m == 0.0:
        return float("nan")
    _, labels = np.unique(membership, return_inverse=True)
    rows = np.repeat(np.arange(g.n_nodes), np.diff(a.indptr))
    inside = float(a.data[labels[rows] == labels[a.indices]].sum())
    k = np.asarray(a.sum(axis=1)).ravel()
    k_c = np.bincount(labels, weights=k)
    return inside / two_m - resolution * float(np.square(k_c / two_m).sum())
