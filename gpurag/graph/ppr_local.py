"""PPR scores around each question's candidates: what a subgraph reranker reads, without rows.

A candidate-subgraph reranker (:mod:`gpurag.rerank`) reads, per question, the personalized
PageRank score of its candidate passages, the ``k`` highest-scoring neighbours of each node
it grows a subgraph from (hop by hop, ``fanout`` neighbours per hop), and the largest
passage and entity scores. :func:`local_scores` records exactly those, around given root nodes,
while the full ``(q, n)`` scores are still at hand (on the host or on the device), so only
``O(q * roots * fanout)`` values reach the reranker instead of the ``(q, n)`` rows.

Two score holders share one interface (:class:`NodeScores`): :class:`DenseScores` over a
``(q, n)`` array (training, tests, small graphs) and :class:`LocalScores` from
:func:`local_scores`. Over the same scores they answer every query the reranker makes with
the same numbers, so the reranker's result does not depend on which one it got. The device
PPR component records :class:`LocalScores` on the device (the neighbour lists are chosen
there, only they cross); the host one hands a :class:`DenseScores` view of the rows it has
computed in host memory anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from gpurag.arrays import sorted_lookup, union_sorted, unique_sorted
from gpurag.graph.csr import CSRGraph, ranges

TopFn = Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, ...]]

# Neighbours per hop a candidate subgraph is grown with when a reranker names no ``fanout``.
DEFAULT_FANOUT = (5, 2)


class NodeScores(Protocol):
    """Per-question node scores as a reranker reads them."""

    @property
    def n_rows(self) -> int:
        """Number of questions."""
        ...

    def at(self, q: np.ndarray, node: np.ndarray) -> np.ndarray:
        """float64 scores of question ``q[i]`` at node ``node[i]``."""
        ...

    def top_neighbours(self, graph: CSRGraph, q: np.ndarray, node: np.ndarray, k: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per (question, node) pair, its ``k`` highest-scoring neighbours (ties by id) as
        ``(ptr, neighbour, float64 score)``, pair ``i`` owning ``ptr[i]:ptr[i+1]``."""
        ...

    def kind_max(self, n_ent: int) -> np.ndarray:
        """``(q, 2)``: the largest score over nodes ``[n_ent, n)`` and over ``[0, n_ent)``."""
        ...

    def take(self, idx: np.ndarray) -> NodeScores:
        """The questions ``idx``, in that order."""
        ...


def top_neighbours_dense(graph: CSRGraph, q: np.ndarray, node: np.ndarray,
                         priority: np.ndarray, k: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:meth:`NodeScores.top_neighbours` over a dense ``(q, n)`` ``priority`` array."""
    indptr = graph.indptr
    deg = indptr[node + 1] - indptr[node]
    edges = ranges(indptr[node], deg)
    pair = np.repeat(np.arange(node.size, dtype=np.int64), deg)
    nbr = graph.indices[edges].astype(np.int64)
    prio = np.asarray(priority[q[pair], nbr], dtype=np.float64)
    # == lexsort((nbr, -prio, pair)) as two stable sorts (CSR rows list neighbours by id)
    order = np.argsort(-prio, kind="stable")
    order = order[np.argsort(pair[order], kind="stable")]
    pair, nbr, prio = pair[order], nbr[order], prio[order]
    keep = rank_within(pair) < k
    pair, nbr, prio = pair[keep], nbr[keep], prio[keep]
    ptr = np.zeros(node.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(pair, minlength=node.size), out=ptr[1:])
    return ptr, nbr, prio


def rank_within(groups: np.ndarray) -> np.ndarray:
    """Position of each element within its run of equal values in a sorted ``groups``."""
    if groups.size == 0:
        return np.zeros(0, dtype=np.int64)
    start = np.r_[True, groups[1:] != groups[:-1]]
    first = np.maximum.accumulate(np.where(start, np.arange(groups.size), 0))
    return np.arange(groups.size) - first


@dataclass(frozen=True)
class DenseScores:
    """:class:`NodeScores` over a dense ``(q, n)`` array."""

    scores: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.scores.shape[0])

    def at(self, q: np.ndarray, node: np.ndarray) -> np.ndarray:
        return np.asarray(self.scores[q, node], dtype=np.float64)

    def top_neighbours(self, graph: CSRGraph, q: np.ndarray, node: np.ndarray, k: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return top_neighbours_dense(graph, q, node, self.scores, k)

    def kind_max(self, n_ent: int) -> np.ndarray:
        s = self.scores
        ent = s[:, :n_ent].max(axis=1) if n_ent else np.zeros(s.shape[0], s.dtype)
        return np.stack([s[:, n_ent:].max(axis=1), ent], axis=1)

    def take(self, idx: np.ndarray) -> DenseScores:
        return DenseScores(self.scores[np.asarray(idx, dtype=np.int64)])


def as_node_scores(scores: Any) -> NodeScores:
    """``scores`` itself when it is a score holder, else a :class:`DenseScores` over it."""
    if hasattr(scores, "top_neighbours") and hasattr(scores, "kind_max"):
        return scores
    return DenseScores(np.asarray(scores))


def _lookup(keys: np.ndarray, query: np.ndarray, what: str) -> np.ndarray:
    """Positions of ``query`` in the sorted unique ``keys``; an error naming a missing one."""
    pos, ok = sorted_lookup(keys, query)
    if not ok.all():
        raise KeyError(f"{what} not recorded for (question * n + node) key "
                       f"{int(query[~ok][0])}: the scores were kept for another fanout or "
                       "other candidates")
    return pos


@dataclass(frozen=True)
class LocalScores:
    """:class:`NodeScores` recorded around each question's roots by :func:`local_scores`.

    Keys are ``question * n + node``. ``value_keys``/``values``: every recorded score (the
    roots and every listed neighbour); ``list_keys``/``list_ptr``/``list_nbr``/``list_prio``:
    per expanded (question, node) pair its ``depth`` best neighbours, best first (ties by id),
    and ``list_deg`` its degree; ``maxima`` ``(q, 2)``: the largest score over ``[split, n)``
    and over ``[0, split)``.
    """

    n: int
    split: int
    depth: int
    value_keys: np.ndarray
    values: np.ndarray
    list_keys: np.ndarray
    list_ptr: np.ndarray
    list_nbr: np.ndarray
    list_prio: np.ndarray
    list_deg: np.ndarray
    maxima: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.maxima.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held (compare ``4 * q * n`` for the dense rows)."""
        return sum(a.nbytes for a in (self.value_keys, self.values, self.list_keys,
                                      self.list_ptr, self.list_nbr, self.list_prio,
                                      self.list_deg, self.maxima))

    def at(self, q: np.ndarray, node: np.ndarray) -> np.ndarray:
        key = np.asarray(q, np.int64) * self.n + np.asarray(node, np.int64)
        return self.values[_lookup(self.value_keys, key, "score")].astype(np.float64)

    def top_neighbours(self, graph: CSRGraph, q: np.ndarray, node: np.ndarray, k: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        key = np.asarray(q, np.int64) * self.n + np.asarray(node, np.int64)
        pos = _lookup(self.list_keys, key, "neighbour list")
        if k > self.depth and (self.list_deg[pos] > self.depth).any():
            raise KeyError(f"{k} neighbours asked, {self.depth} recorded")
        have = self.list_ptr[pos + 1] - self.list_ptr[pos]
        counts = np.minimum(have, k)
        take = ranges(self.list_ptr[pos], counts)
        ptr = np.zeros(key.size + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        return ptr, self.list_nbr[take], self.list_prio[take].astype(np.float64)

    def kind_max(self, n_ent: int) -> np.ndarray:
        if n_ent != self.split:
            raise ValueError(f"maxima were kept split at node {self.split}, not {n_ent}")
        return self.maxima

    def take(self, idx: np.ndarray) -> LocalScores:
        idx = np.asarray(idx, dtype=np.int64)
        n = self.n
        bounds = np.arange(self.n_rows + 1, dtype=np.int64) * n
        v_lo = np.searchsorted(self.value_keys, bounds)
        l_lo = np.searchsorted(self.list_keys, bounds)
        v_cnt = v_lo[idx + 1] - v_lo[idx]
        v_take = ranges(v_lo[idx], v_cnt)
        shift_v = np.repeat((np.arange(idx.size) - idx) * n, v_cnt)
        p_cnt = l_lo[idx + 1] - l_lo[idx]
        p_take = ranges(l_lo[idx], p_cnt)
        shift_p = np.repeat((np.arange(idx.size) - idx) * n, p_cnt)
        e_cnt = self.list_ptr[p_take + 1] - self.list_ptr[p_take]
        e_take = ranges(self.list_ptr[p_take], e_cnt)
        ptr = np.zeros(p_take.size + 1, dtype=np.int64)
        np.cumsum(e_cnt, out=ptr[1:])
        return LocalScores(n, self.split, self.depth, self.value_keys[v_take] + shift_v,
                           self.values[v_take], self.list_keys[p_take] + shift_p, ptr,
                           self.list_nbr[e_take], self.list_prio[e_take],
                           self.list_deg[p_take], self.maxima[idx])

    @classmethod
    def concat(cls, parts: Sequence[LocalScores]) -> LocalScores:
        """The questions of ``parts``, in order (all over the same graph and fanout)."""
        if not parts:
            raise ValueError("nothing to concatenate")
        first = parts[0]
        rows = np.cumsum([0] + [p.n_rows for p in parts])
        edges = np.cumsum([0] + [p.list_nbr.size for p in parts])
        for p in parts:
            if (p.n, p.split, p.depth) != (first.n, first.split, first.depth):
                raise ValueError("local scores of different graphs or fanouts")
        return cls(
            first.n, first.split, first.depth,
            np.concatenate([p.value_keys + r * p.n for p, r in zip(parts, rows, strict=False)]),
            np.concatenate([p.values for p in parts]),
            np.concatenate([p.list_keys + r * p.n for p, r in zip(parts, rows, strict=False)]),
            np.concatenate([np.zeros(1, np.int64)] + [p.list_ptr[1:] + e for p, e in
                                                      zip(parts, edges, strict=False)]),
            np.concatenate([p.list_nbr for p in parts]),
            np.concatenate([p.list_prio for p in parts]),
            np.concatenate([p.list_deg for p in parts]),
            np.concatenate([p.maxima for p in parts]),
        )


def list_depths(fanout: Sequence[int]) -> list[int]:
    """Per hop, how many best neighbours of a frontier node subgraph extraction may read:
    ``fanout[h]`` plus the most nodes a subgraph can hold before hop ``h`` (see
    :func:`gpurag.rerank.subgraph.extract_subgraphs`)."""
    out, so_far, new = [], 1, 1
    for cap in fanout:
        if cap <= 0:
            break
        out.append(int(cap) + so_far)
        new *= int(cap)
        so_far += new
    return out


def local_scores(top_fn: TopFn, value_fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
                 roots: np.ndarray, n: int, fanout: Sequence[int], maxima: np.ndarray,
                 split: int) -> LocalScores:
    """Record the scores subgraph extraction with ``fanout`` reads around ``roots``.

    ``roots`` ``(q, r)`` global node ids (-1 padded); ``top_fn(q, node, k) -> (ptr, nbr,
    prio, deg)`` gives each pair's ``k`` best neighbours (and its degree) and ``value_fn(q,
    node)`` the scores at nodes, both from the full scores (host or device); ``maxima`` ``(q,
    2)`` as in :class:`LocalScores`. A subgraph grown from a root reads, at hop ``h``, a prefix
    of the best-neighbour list of each node it reached at hop ``h - 1``, never longer than
    :func:`list_depths` ``[h]``; so the nodes reached are among those prefixes, and every
    list it reads is recorded here, as deep as the deepest read.
    """
    depths = list_depths(fanout)
    depth = max(depths, default=0)
    q = roots.shape[0]
    qi = np.broadcast_to(np.arange(q, dtype=np.int64)[:, None], roots.shape)
    ok = roots >= 0
    root_keys = unique_sorted(qi[ok] * n + roots[ok].astype(np.int64))
    lists: list[tuple[np.ndarray, ...]] = []  # (keys, counts, nbr, prio, deg) per hop
    listed = np.zeros(0, np.int64)
    frontier = root_keys
    for want in depths:
        new = np.setdiff1d(frontier, listed, assume_unique=True)
        if new.size:
            ptr, nbr, prio, deg = top_fn(new // n, new % n, depth)
            lists.append((new, np.diff(ptr), nbr, prio, deg))
            listed = union_sorted(listed, new)
        # the next frontier: every frontier pair's first ``want`` neighbours
        keys, counts, nbr, prio, _ = _merge_lists(lists)
        pos = np.searchsorted(keys, frontier)
        ptr = np.zeros(keys.size + 1, np.int64)
        np.cumsum(counts, out=ptr[1:])
        got = np.minimum(counts[pos], want)
        take = ranges(ptr[pos], got)
        owner_q = np.repeat(frontier // n, got)
        frontier = unique_sorted(owner_q * n + nbr[take])
    keys, counts, nbr, prio, deg = _merge_lists(lists)
    ptr = np.zeros(keys.size + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    # every recorded score: the roots' and the listed neighbours'
    owner_q = np.repeat(keys // n, counts)
    all_keys = np.concatenate([root_keys, owner_q * n + nbr])
    value_keys, first = np.unique(all_keys, return_index=True)
    listed_vals = prio
    root_vals = value_fn(root_keys // n, root_keys % n) if root_keys.size else prio[:0]
    values = np.concatenate([np.asarray(root_vals, dtype=prio.dtype), listed_vals])[first]
    return LocalScores(n, split, depth, value_keys, values, keys, ptr, nbr, prio, deg,
                       np.asarray(maxima))


def _merge_lists(lists: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """The per-hop lists as one, sorted by key (each key listed once)."""
    if not lists:
        z = np.zeros(0, np.int64)
        return z, z, z, np.zeros(0, np.float32), z
    keys = np.concatenate([part[0] for part in lists])
    counts = np.concatenate([part[1] for part in lists])
    nbr = np.concatenate([part[2] for part in lists])
    prio = np.concatenate([part[3] for part in lists])
    deg = np.concatenate([part[4] for part in lists])
    order = np.argsort(keys, kind="stable")
    if (order == np.arange(order.size)).all():
        return keys, counts, nbr, prio, deg
    start = np.cumsum(counts) - counts
    take = ranges(start[order], counts[order])
    return keys[order], counts[order], nbr[take], prio[take], deg[order]


# -- from the full scores -------------------------------------------------------------------
def local_from_dense(scores: np.ndarray, graph: CSRGraph, roots: np.ndarray,
                     fanout: Sequence[int], split: int) -> LocalScores:
    """:func:`local_scores` from dense host ``(q, n)`` scores."""
    dense = DenseScores(scores)

    def top(q: np.ndarray, node: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
        ptr, nbr, prio = top_neighbours_dense(graph, q, node, scores, k)
        deg = graph.indptr[node + 1] - graph.indptr[node]
        return ptr, nbr, prio.astype(scores.dtype), deg

    return local_scores(top, lambda q, node: scores[q, node], roots, graph.n_nodes, fanout,
                        dense.kind_max(split), split)


def top_neighbours_torch(indptr: Any, indices: Any, x: Any, q: Any, node: Any, k: int
                         ) -> tuple[Any, Any, Any, Any]:
    """:func:`top_neighbours_dense` on a torch device: ``x`` ``(rows, n)`` scores, CSR
    ``indptr``/``indices`` and the pairs as tensors there; returns ``(ptr, nbr, prio, deg)``
    tensors (the same lists, ties by id)."""
    import torch

    dev = x.device
    start = indptr[node]
    deg = indptr[node + 1] - start
    total = int(deg.sum()) if deg.numel() else 0
    pair = torch.repeat_interleave(torch.arange(node.numel(), device=dev), deg,
                                   output_size=total)
    offs = torch.cumsum(deg, 0) - deg
    pos = torch.arange(total, device=dev)
    nbr = indices[start[pair] + pos - offs[pair]].long()
    prio = x[q[pair], nbr]
    order = torch.sort(-prio, stable=True).indices
    order = order[torch.sort(pair[order], stable=True).indices]
    nbr, prio = nbr[order], prio[order]  # pair[order] == pair: segments keep their place
    keep = (pos - offs[pair]) < k
    counts = torch.clamp(deg, max=k)
    ptr = torch.zeros(node.numel() + 1, dtype=torch.int64, device=dev)
    torch.cumsum(counts, 0, out=ptr[1:])
    return ptr, nbr[keep], prio[keep], deg


def local_from_device(x: Any, indptr: Any, indices: Any, roots: np.ndarray,
                      fanout: Sequence[int], split: int) -> LocalScores:
    """:func:`local_scores` from ``(q, n)`` scores ``x`` on a torch device (the graph's CSR
    arrays there too): the neighbour lists are chosen on the device, only they cross."""
    import torch

    dev = x.device

    def top(q: np.ndarray, node: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
        out = top_neighbours_torch(indptr, indices, x, torch.as_tensor(q, device=dev),
                                   torch.as_tensor(node, device=dev), k)
        ptr, nbr, prio, deg = (t.cpu().numpy() for t in out)
        return ptr, nbr.astype(np.int64), prio, deg.astype(np.int64)

    def values(q: np.ndarray, node: np.ndarray) -> np.ndarray:
        return x[torch.as_tensor(q, device=dev), torch.as_tensor(node, device=dev)].cpu().numpy()

    rows = x.shape[0]
    ent = (x[:, :split].max(dim=1).values if split else
           torch.zeros(rows, dtype=x.dtype, device=dev))
    maxima = torch.stack([x[:, split:].max(dim=1).values, ent], dim=1).cpu().numpy()
    return local_scores(top, values, roots, int(x.shape[1]), fanout, maxima, split)


__all__ = ["DenseScores", "LocalScores", "NodeScores", "as_node_scores", "list_depths",
           "local_from_dense", "local_from_device", "local_scores", "rank_within",
           "top_neighbours_dense",
           "top_neighbours_torch"]
