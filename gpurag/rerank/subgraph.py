"""Candidate subgraphs: capped k-hop neighbourhoods around root nodes, extracted from CSR arrays.

Each root (a candidate passage, or any graph node) gets its own subgraph: the root, its
``fanout[0]`` highest-priority neighbours, their ``fanout[1]`` highest-priority new neighbours,
and so on, at most ``max_nodes`` nodes in all; priority is a per-question node score (the
personalized PageRank mass), so a subgraph is the PPR-heaviest part of the root's
neighbourhood. Edges are all graph edges among the chosen nodes (the induced subgraph).
Thousands of subgraphs, for many questions, are extracted together with array operations: no
Python loop runs over roots, nodes or edges (only over the few hops).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpurag.arrays import sorted_lookup, union_sorted
from gpurag.graph.csr import CSRGraph, ranges
from gpurag.graph.ppr_local import NodeScores, as_node_scores, rank_within


@dataclass(frozen=True)
class Subgraphs:
    """Many rooted subgraphs as flat arrays; subgraph ``s`` owns nodes ``ptr[s]:ptr[s+1]``.

    Within a subgraph the root comes first, then nodes by hop, by priority (descending) and by
    id. ``edge_index`` holds positions into ``node`` (both directions of an undirected edge).
    """

    node: np.ndarray  # (N,) int64 global node id
    hop: np.ndarray  # (N,) int64 hop distance from the root
    ptr: np.ndarray  # (S + 1,) int64 node offsets
    edge_index: np.ndarray  # (2, M) int64 positions into ``node`` (source, target)
    edge_weight: np.ndarray  # (M,) float32 graph edge weight

    @property
    def n_subgraphs(self) -> int:
        """Number of subgraphs."""
        return self.ptr.size - 1

    @property
    def graph_of_node(self) -> np.ndarray:
        """(N,) subgraph index of every node."""
        return np.repeat(np.arange(self.n_subgraphs, dtype=np.int64), np.diff(self.ptr))


def extract_subgraphs(graph: CSRGraph, roots: np.ndarray, owner: np.ndarray,
                      priority: NodeScores | np.ndarray, fanout: Sequence[int] = (5, 2),
                      max_nodes: int = 16) -> Subgraphs:
    """Capped k-hop subgraphs around ``roots`` (S,), prioritised by ``priority[owner[s]]``.

    ``priority`` holds per-question node scores (e.g. PPR): a ``(q, n)`` array or any
    :class:`~gpurag.graph.ppr_local.NodeScores` (such as the PPR component's ``local`` scores,
    recorded around the candidates for this ``fanout``); ``owner`` (S,) picks each root's row.
    Hop ``h`` keeps, for every node reached at hop ``h - 1``, its ``fanout[h-1]``
    highest-priority neighbours not already in the subgraph (ties by node id); a subgraph
    keeps at most ``max_nodes`` nodes (nearer and higher-priority nodes first).
    """
    roots = np.asarray(roots, dtype=np.int64).ravel()
    owner = np.asarray(owner, dtype=np.int64).ravel()
    if roots.shape != owner.shape:
        raise ValueError("roots and owner must have the same length")
    n = graph.n_nodes
    priority = as_node_scores(priority)
    if roots.size and (roots.min() < 0 or roots.max() >= n):
        raise ValueError(f"root ids must lie in [0, {n})")
    if max_nodes < 1:
        raise ValueError("max_nodes must be at least 1")
    n_sub = roots.size
    subs = [np.arange(n_sub, dtype=np.int64)]
    nodes = [roots]
    hops = [np.zeros(n_sub, dtype=np.int64)]
    prios = [np.full(n_sub, np.inf)]
    seen = np.sort(subs[0] * n + roots)
    f_sub, f_node = subs[0], roots
    for hop, cap in enumerate(fanout, start=1):
        if f_node.size == 0 or cap <= 0:
            break
        # Each (question, node) pair's best neighbours are found once, however many of the
        # question's subgraphs reach the node; cap + (nodes so far) of them always suffice.
        so_far = int(np.bincount(np.concatenate(subs), minlength=n_sub).max())
        pair_key, inv = np.unique(owner[f_sub] * n + f_node, return_inverse=True)
        p_ptr, p_nbr, p_prio = priority.top_neighbours(graph, pair_key // n, pair_key % n,
                                                       cap + so_far)
        counts = p_ptr[inv + 1] - p_ptr[inv]
        take = ranges(p_ptr[inv], counts)
        parent = np.repeat(np.arange(f_node.size, dtype=np.int64), counts)
        nbr, prio = p_nbr[take], p_prio[take]
        sub = f_sub[parent]
        key = sub * n + nbr
        new = ~sorted_lookup(seen, key)[1]  # order stays (parent, -priority, node id)
        parent, nbr, sub, key, prio = (a[new] for a in (parent, nbr, sub, key, prio))
        keep = rank_within(parent) < cap
        nbr, sub, key, prio = nbr[keep], sub[keep], key[keep], prio[keep]
        key, first = np.unique(key, return_index=True)  # a node reached from two parents
        nbr, sub, prio = nbr[first], sub[first], prio[first]
        subs.append(sub)
        nodes.append(nbr)
        hops.append(np.full(nbr.size, hop, dtype=np.int64))
        prios.append(prio)
        seen = union_sorted(seen, key)
        f_sub, f_node = sub, nbr
    sub, node, hop_arr, prio = (np.concatenate(a) for a in (subs, nodes, hops, prios))
    order = np.lexsort((node, -prio, hop_arr, sub))
    sub, node, hop_arr = sub[order], node[order], hop_arr[order]
    keep = rank_within(sub) < max_nodes
    sub, node, hop_arr = sub[keep], node[keep], hop_arr[keep]
    ptr = np.zeros(n_sub + 1, dtype=np.int64)
    np.cumsum(np.bincount(sub, minlength=n_sub), out=ptr[1:])
    src, dst, w = _induced_edges(graph, ptr, node)
    return Subgraphs(node=node, hop=hop_arr, ptr=ptr, edge_index=np.stack([src, dst]),
                     edge_weight=w)


_EDGE_KEYS: weakref.WeakKeyDictionary[CSRGraph, np.ndarray] = weakref.WeakKeyDictionary()


def edge_keys(graph: CSRGraph) -> np.ndarray:
    """``row * n + col`` of every stored edge: sorted, since CSR rows and columns are (cached)."""
    keys = _EDGE_KEYS.get(graph)
    if keys is None:
        rows = np.repeat(np.arange(graph.n_nodes, dtype=np.int64), graph.degree())
        keys = rows * graph.n_nodes + graph.indices.astype(np.int64)
        _EDGE_KEYS[graph] = keys
    return keys


def _induced_edges(graph: CSRGraph, ptr: np.ndarray,
                   node: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every graph edge between two nodes of the same subgraph, as positions into ``node``.

    All ordered node pairs of each subgraph are looked up among the graph's sorted edge keys,
    so the cost is ``subgraphs * max_nodes^2 * log(edges)``, whatever the node degrees.
    """
    n = graph.n_nodes
    sizes = np.diff(ptr)
    width = int(sizes.max()) if sizes.size else 0
    if width < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    slot = np.arange(width)
    pos = ptr[:-1, None] + slot[None, :]  # (S, width) positions, valid where slot < size
    valid = slot[None, :] < sizes[:, None]
    pair = valid[:, :, None] & valid[:, None, :] & (slot[:, None] != slot[None, :])[None]
    s_idx, i, j = np.nonzero(pair)
    src, dst = pos[s_idx, i], pos[s_idx, j]
    keys = edge_keys(graph)
    query = node[src] * n + node[dst]
    at, found = sorted_lookup(keys, query)
    return src[found], dst[found], graph.weights[at[found]].astype(np.float32)
