"""Node and edge features of candidate subgraphs, packed for many questions into one PyG Batch.

Node features are scale-free numbers that mean the same on any corpus: the question-node
cosine (absolute and relative to the best candidate), the node's PPR mass relative to the
heaviest node of its kind and its PPR rank among the candidates, the dense retriever's
(min-max scaled) score and rank, hop distance, node kind, degree and entity specificity, and
the candidate's place in the retriever's own order (the candidates arrive best first). They
use only what the reranker is handed (question vectors, candidates, PPR scores, dense
results), not the retriever's blended score itself, whose scale depends on its settings.
The embeddings themselves travel as a table of the batch's unique nodes (``emb``, indexed by
``emb_index``), so a node shared by many subgraphs is projected once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpurag.arrays import sorted_lookup
from gpurag.graph.csr import CSRGraph
from gpurag.graph.ppr_local import NodeScores, as_node_scores
from gpurag.rerank.subgraph import Subgraphs, extract_subgraphs

NODE_FEATURES = ("is_entity", "is_passage", "is_root", "hop1", "hop2", "cos", "cos_rel",
                 "ppr", "ppr_rank", "dense", "dense_rank", "is_candidate", "log_degree",
                 "specificity", "base_rank")
EDGE_FEATURES = ("mention", "relation", "log_weight")
_PPR_FLOOR = 1e-6


@dataclass(frozen=True)
class GraphArrays:
    """The static arrays of an index that scoring needs (entity rows first, then passages)."""

    graph: CSRGraph
    n_ent: int
    n_psg: int
    entity_emb: np.ndarray  # (E, d) float32
    passage_emb: np.ndarray  # (P, d) float32
    specificity: np.ndarray  # (E,) float

    @classmethod
    def from_retriever(cls, retriever) -> GraphArrays:
        """From a :class:`gpurag.query.graph.GraphRetriever`."""
        ent = retriever.entity_vectors()
        psg = retriever.passage_vectors()
        return cls(retriever.graph, int(retriever.n_ent), int(retriever.n_psg), ent, psg,
                   np.asarray(retriever.specificity, dtype=np.float32))

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return int(self.passage_emb.shape[1])

    @property
    def log_degree(self) -> np.ndarray:
        """(n,) log degree, scaled to about [0, 1]."""
        cached = self.__dict__.get("_log_degree")
        if cached is None:
            cached = (np.log1p(self.graph.degree()) / np.log(1000.0)).astype(np.float32)
            object.__setattr__(self, "_log_degree", cached)
        return cached


@dataclass(frozen=True)
class CandidateInputs:
    """What a reranker receives for ``q`` questions (see ``Reranker.score``).

    ``ppr``: the PPR scores as :class:`~gpurag.graph.ppr_local.NodeScores` (the query path
    hands over only those recorded around the candidates); a ``(q, E + P)`` array is wrapped.
    """

    qvecs: np.ndarray  # (q, d) question embeddings
    cand: np.ndarray  # (q, c) candidate passage rows
    ppr: NodeScores  # per question node scores (PPR)
    dense_scores: np.ndarray  # (q, m)
    dense_rows: np.ndarray  # (q, m), -1 where missing

    def __post_init__(self) -> None:
        object.__setattr__(self, "ppr", as_node_scores(self.ppr))

    def take(self, idx: np.ndarray | Sequence[int]) -> CandidateInputs:
        """The inputs of questions ``idx``."""
        idx = np.asarray(idx, dtype=np.int64)
        return CandidateInputs(self.qvecs[idx], self.cand[idx], self.ppr.take(idx),
                               self.dense_scores[idx], self.dense_rows[idx])

    def __len__(self) -> int:
        return len(self.cand)


def _minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)
    return (x - lo) / np.maximum(hi - lo, 1e-9)


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray,
            default: float = 0.0) -> np.ndarray:
    """``values`` at ``keys == query`` (keys unique), ``default`` where absent."""
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    out = np.full(query.shape, default, dtype=np.float32)
    pos, hit = sorted_lookup(keys, query)
    out[hit] = values[pos[hit]]
    return out


def node_features(arrays: GraphArrays, inp: CandidateInputs, sub: Subgraphs
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per node features ``(N, F)``, embedding table rows ``(N,)`` into ``(U,)`` unique ids,
    the unique ids, and per edge features ``(M, 3)``."""
    q, c = inp.cand.shape
    n_ent, n_psg = arrays.n_ent, arrays.n_psg
    question = np.repeat(np.arange(q, dtype=np.int64), c)[sub.graph_of_node]
    node = sub.node
    is_ent = node < n_ent
    uniq, emb_index = np.unique(node, return_inverse=True)
    emb = _embedding_rows(arrays, uniq)
    cos = (emb @ inp.qvecs.T.astype(np.float32))[emb_index, question]
    cand_cos = np.einsum("qcd,qd->qc", arrays.passage_emb[inp.cand], inp.qvecs)
    cos_rel = cos - cand_cos.max(axis=1)[question]
    ppr = inp.ppr.at(question, node)
    kind_max = inp.ppr.kind_max(n_ent)
    ppr_rel = ppr / np.maximum(kind_max[question, is_ent.astype(np.int64)], 1e-30)
    ppr_feat = 1.0 + np.log(np.clip(ppr_rel, _PPR_FLOOR, 1.0)) / -np.log(_PPR_FLOOR)
    cand_node = np.where(inp.cand >= 0, inp.cand, n_psg - 1) + n_ent  # -1: as NumPy reads it
    cand_ppr = inp.ppr.at(np.repeat(np.arange(q), c), cand_node.ravel()).reshape(q, c)
    rank = np.argsort(np.argsort(-cand_ppr, axis=1, kind="stable"), axis=1, kind="stable")
    cand_keys = (np.arange(q)[:, None] * n_psg + inp.cand).ravel()
    node_keys = question * n_psg + (node - n_ent)
    ok = inp.dense_rows >= 0
    m = inp.dense_rows.shape[1]
    dkeys = (np.arange(q)[:, None] * n_psg + inp.dense_rows)[ok]
    dense_f = np.where(is_ent, 0.0, _lookup(dkeys, _minmax(inp.dense_scores)[ok], node_keys))
    drank = np.broadcast_to(1.0 / (1.0 + np.arange(m)), inp.dense_rows.shape)[ok]
    drank_f = np.where(is_ent, 0.0, _lookup(dkeys, drank, node_keys))
    rank_f = np.where(is_ent, 0.0, _lookup(cand_keys, 1.0 / (1.0 + rank.ravel()), node_keys))
    is_cand = np.where(is_ent, 0.0, _lookup(cand_keys, np.ones(cand_keys.size), node_keys))
    # the candidates come in the retriever's order, best first (head, fusion, PPR included)
    base_rank = np.broadcast_to(1.0 / (1.0 + np.arange(c)), (q, c)).ravel()
    base_f = np.where(is_ent, 0.0, _lookup(cand_keys, base_rank, node_keys))
    spec = np.zeros(node.size, np.float32)
    spec[is_ent] = arrays.specificity[node[is_ent]]
    is_root = np.zeros(node.size, np.float32)
    is_root[sub.ptr[:-1]] = 1.0
    x = np.stack([is_ent, ~is_ent, is_root, sub.hop == 1, sub.hop >= 2, cos, cos_rel,
                  ppr_feat, rank_f, dense_f, drank_f, is_cand, arrays.log_degree[node], spec,
                  base_f],
                 axis=1).astype(np.float32)
    src, dst = node[sub.edge_index[0]], node[sub.edge_index[1]]
    mention = (src < n_ent) != (dst < n_ent)
    edge_attr = np.stack([mention, (src < n_ent) & (dst < n_ent),
                          np.log1p(sub.edge_weight) / 3.0], axis=1).astype(np.float32)
    return x, emb_index.astype(np.int64), uniq, edge_attr


def _embedding_rows(arrays: GraphArrays, nodes: np.ndarray) -> np.ndarray:
    out = np.empty((nodes.size, arrays.dim), dtype=np.float32)
    ent = nodes < arrays.n_ent
    out[ent] = arrays.entity_emb[nodes[ent]]
    out[~ent] = arrays.passage_emb[nodes[~ent] - arrays.n_ent]
    return out


def build_batch(arrays: GraphArrays, inp: CandidateInputs, fanout: Sequence[int] = (5, 2),
                max_nodes: int = 16):
    """One PyG ``Batch`` holding a subgraph per (question, candidate), question-major.

    Besides ``x``, ``edge_index``, ``edge_attr``, ``batch`` and ``ptr`` it carries ``emb``
    (unique node embeddings), ``emb_index`` (node -> row of ``emb``), ``node_id`` (global
    graph ids), ``qvec`` (q, d) and ``question`` (subgraph -> question).
    """
    q, c = inp.cand.shape
    roots = (inp.cand + arrays.n_ent).ravel()
    owner = np.repeat(np.arange(q, dtype=np.int64), c)
    return pack_batch(arrays, inp, extract_subgraphs(arrays.graph, roots, owner, inp.ppr,
                                                     fanout, max_nodes))


def pack_batch(arrays: GraphArrays, inp: CandidateInputs, sub: Subgraphs):
    """The PyG ``Batch`` of already extracted candidate subgraphs (see :func:`build_batch`)."""
    import torch
    from torch_geometric.data import Batch

    q, c = inp.cand.shape
    x, emb_index, uniq, edge_attr = node_features(arrays, inp, sub)
    emb = _embedding_rows(arrays, uniq)
    return Batch(
        x=torch.from_numpy(x),
        edge_index=torch.from_numpy(np.ascontiguousarray(sub.edge_index)),
        edge_attr=torch.from_numpy(edge_attr),
        batch=torch.from_numpy(sub.graph_of_node),
        ptr=torch.from_numpy(sub.ptr),
        emb=torch.from_numpy(emb),
        emb_index=torch.from_numpy(emb_index),
        node_id=torch.from_numpy(sub.node),
        qvec=torch.from_numpy(np.ascontiguousarray(inp.qvecs, dtype=np.float32)),
        question=torch.from_numpy(np.repeat(np.arange(q, dtype=np.int64), c)),
    )


def concat_batches(batches: list):
    """One batch from several :func:`build_batch` batches (their questions in order)."""
    import torch
    from torch_geometric.data import Batch

    if len(batches) == 1:
        return batches[0]
    n_nodes = torch.tensor([0] + [b.x.shape[0] for b in batches]).cumsum(0)
    n_sub = torch.tensor([0] + [b.ptr.numel() - 1 for b in batches]).cumsum(0)
    n_emb = torch.tensor([0] + [b.emb.shape[0] for b in batches]).cumsum(0)
    n_q = torch.tensor([0] + [b.qvec.shape[0] for b in batches]).cumsum(0)
    return Batch(
        x=torch.cat([b.x for b in batches]),
        edge_index=torch.cat([b.edge_index + n_nodes[i] for i, b in enumerate(batches)], 1),
        edge_attr=torch.cat([b.edge_attr for b in batches]),
        batch=torch.cat([b.batch + n_sub[i] for i, b in enumerate(batches)]),
        ptr=torch.cat([batches[0].ptr[:1]] + [b.ptr[1:] + n_nodes[i]
                                               for i, b in enumerate(batches)]),
        emb=torch.cat([b.emb for b in batches]),
        emb_index=torch.cat([b.emb_index + n_emb[i] for i, b in enumerate(batches)]),
        node_id=torch.cat([b.node_id for b in batches]),
        qvec=torch.cat([b.qvec for b in batches]),
        question=torch.cat([b.question + n_q[i] for i, b in enumerate(batches)]),
    )
