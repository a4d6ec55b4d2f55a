"""Graph (multi-hop) retrieval: FAISS seeds -> personalized PageRank -> passage ranking.

The PPR runs on the runtime's backend (the device when there is one) and only each
question's top candidates come back to the host (:class:`~gpurag.graph.backend.PPRTop`), never
a dense ``(q, n)`` array; the ranking below works on those ``(q, k + depth)`` candidates.

Seeds come from three FAISS searches per question: entities by name, facts (triples embedded
as text) and passages. Entity and fact seeds are weighted by similarity and by specificity
(entities found in fewer passages weigh more, as in HippoRAG); dense passage scores enter the
reset vector with a smaller weight. Personalized PageRank spreads that mass along relations,
mentions and synonym edges, so a passage that shares no words with the question but mentions
an entity linked to the seeds is reached. The final score blends PPR mass with the dense score,
which keeps dense precision at the top ranks while PPR fills in the rest of the chain.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from gpurag.config import QueryConfig
from gpurag.graph.backend import Backends, PPRTop
from gpurag.query.results import EntityPath, SeedEntity
from gpurag.store.writer import IndexDir
from gpurag.vectors import load_index, search


def _minmax(x: np.ndarray, axis: int = 1) -> np.ndarray:
    lo = x.min(axis=axis, keepdims=True)
    hi = x.max(axis=axis, keepdims=True)
    return (x - lo) / np.maximum(hi - lo, 1e-9)


class GraphRetriever:
    """Holds the graph arrays and entity/fact indexes of an opened index."""

    def __init__(self, index_dir: IndexDir, chunks: pd.DataFrame,
                 backends: Backends | None = None, gat_checkpoint: str | None = None) -> None:
        from gpurag.graph import csr as csr_mod

        self.dir = index_dir
        self.entities = index_dir.table("tables/entities.parquet")
        self.n_ent = len(self.entities)
        self.n_psg = len(chunks)
        self.chunk_ids = chunks["chunk_id"].to_numpy(dtype=object)
        self.graph = csr_mod.load(index_dir.path / "graph", mmap=True)
        self.entity_index = load_index(index_dir.path / "vectors/entities.faiss")
        self.fact_index = load_index(index_dir.path / "vectors/facts.faiss")
        self.fact_indptr = np.asarray(index_dir.array("arrays/fact_entity_indptr.npy"))
        self.fact_entities = np.asarray(index_dir.array("arrays/fact_entity_indices.npy"))
        n_passages = self.entities["n_passages"].to_numpy(np.float64)
        self.specificity = 1.0 / np.log2(2.0 + np.maximum(n_passages, 0.0))
        self.entity_names = self.entities["name"].astype(str).to_numpy(dtype=object)
        self.backends = backends or Backends.for_device("cpu")
        self.gat_checkpoint = gat_checkpoint  # the runtime's default GAT weights
        self.ppr_name = self.backends.names["ppr"]
        self._mentions: sp.csr_array | None = None
        self._ent_adj: sp.csr_array | None = None

    # -- seeds --------------------------------------------------------------------------
    def reset_matrix(self, qvecs: np.ndarray, cfg: QueryConfig,
                     dense: tuple[np.ndarray, np.ndarray]) -> tuple[sp.csr_array, list]:
        """The ``(q, n)`` personalization matrix and, per question, its seed entities."""
        q = len(qvecs)
        n = self.n_ent + self.n_psg
        rows, cols, vals = [], [], []
        seeds: list[list[SeedEntity]] = [[] for _ in range(q)]
        if self.n_ent and cfg.seed_entities:
            es, ei = search(self.entity_index, qvecs, cfg.seed_entities)
            keep = (ei >= 0) & (es >= es[:, :1] - cfg.entity_margin)
            w = np.where(keep, np.clip(es, 0, None) ** cfg.sim_power, 0.0)
            w = w * self.specificity[np.maximum(ei, 0)]
            r, c = np.nonzero(w > 0)
            rows.append(r)
            cols.append(ei[r, c])
            vals.append(w[r, c] * cfg.entity_weight)
            for qi, col in zip(r.tolist(), c.tolist(), strict=False):
                e = int(ei[qi, col])
                seeds[qi].append(SeedEntity(e, str(self.entity_names[e]), float(es[qi, col]),
                                            "entity"))
        if self.fact_index.ntotal and cfg.seed_facts:
            fs, fi = search(self.fact_index, qvecs, cfg.seed_facts)
            keep = (fi >= 0) & (fs >= fs[:, :1] - cfg.fact_margin)
            w = np.where(keep, np.clip(fs, 0, None) ** cfg.sim_power, 0.0)
            r, c = np.nonzero(w > 0)
            f = fi[r, c]
            # Every entity of each seed fact (CSR fact -> entities), vectorized.
            lo, size = self.fact_indptr[f], np.diff(self.fact_indptr)[f]
            owner = np.repeat(np.arange(len(f)), size)
            ends = self.fact_entities[np.repeat(lo, size) + (np.arange(size.sum()) - np.repeat(
                np.cumsum(size) - size, size))]
            rows.append(r[owner])
            cols.append(ends)
            vals.append(w[r, c][owner] * self.specificity[ends] * cfg.fact_weight)
        ds, di = dense
        if cfg.seed_passages:
            take = min(cfg.seed_passages, di.shape[1])
            ps, pi = ds[:, :take], di[:, :take]
            w = np.where(pi >= 0, _minmax(ps), 0.0) * cfg.passage_weight
            r, c = np.nonzero(w > 0)
            rows.append(r)
            cols.append(pi[r, c] + self.n_ent)
            vals.append(w[r, c])
        reset = sp.csr_array(
            (np.concatenate(vals) if vals else np.zeros(0),
             (np.concatenate(rows) if rows else np.zeros(0, np.int64),
              np.concatenate(cols) if cols else np.zeros(0, np.int64))),
            shape=(q, n))
        reset.sum_duplicates()
        empty = np.flatnonzero(np.diff(reset.indptr) == 0)
        if len(empty):  # no seed at all: fall back to the dense top passage
            fill = sp.csr_array((np.ones(len(empty)), (empty, di[empty, 0] + self.n_ent)),
                                shape=(q, n))
            reset = reset + fill
        return reset, seeds

    # -- retrieval ----------------------------------------------------------------------
    def retrieve(self, qvecs: np.ndarray, cfg: QueryConfig,
                 passage_index) -> tuple[np.ndarray, np.ndarray, list[dict]]:
        """Top-``cfg.k`` passage (scores, rows) per question, plus seeds and entity paths."""
        depth = max(cfg.k, cfg.seed_passages, 1)
        dense = search(passage_index, qvecs, depth)
        reset, seeds = self.reset_matrix(qvecs, cfg, dense)
        reranking = cfg.rerank not in ("", "none")
        k = min(cfg.k, self.n_psg)
        # Enough candidates that the top-k after blending and reranking is among them.
        want = max(k, cfg.rerank_candidates if reranking else 0) + dense[1].shape[1]
        top = self.backends.ppr(
            self.graph, reset, k=min(want, self.n_psg), lo=self.n_ent,
            hi=self.n_ent + self.n_psg, gather=dense[1], damping=cfg.damping,
            tol=cfg.ppr_tol, method=cfg.ppr_method, full=reranking)
        cand, score = rank_candidates(top, dense, cfg)
        if reranking:
            score = self._rerank(cfg, qvecs, cand, score, top.full, dense)
        top_rows, top_scores = _best(cand, score, k)
        extras = [{"seeds": sorted(s, key=lambda e: -e.score)[:10],
                   "paths": self.paths(s, top_rows[i])} for i, s in enumerate(seeds)]
        return top_scores.astype(np.float32), top_rows, extras

    def _rerank(self, cfg: QueryConfig, qvecs: np.ndarray, cand: np.ndarray, score: np.ndarray,
                ppr_scores: np.ndarray | None, dense: tuple[np.ndarray, np.ndarray]
                ) -> np.ndarray:
        """Rescore the top candidates with a reranker (``cfg.rerank``, e.g. ``"gat"``).

        Candidates outside the top ``rerank_candidates`` keep their scores, shifted below the
        reranked ones so the reranker decides the head of the list. The reranker reads the
        whole PPR scores (``full``), which the PPR component returns only for it.
        """
        from gpurag.rerank import get_reranker

        reranker = get_reranker(cfg.rerank, self, checkpoint=cfg.extra.get("gat_checkpoint"))
        n_cand = min(cfg.rerank_candidates, self.n_psg)
        head_rows, _ = _best(cand, score, n_cand)
        new = reranker.score(qvecs, head_rows, np.asarray(ppr_scores), dense)  # (q, n_cand)
        valid = cand >= 0
        out = score - score[valid].max() - 1.0 - np.abs(new).max()
        out[~valid] = -np.inf
        # Put the new scores where each reranked row sits among the candidates.
        match = cand[:, :, None] == head_rows[:, None, :]
        hit = match.any(axis=2)
        out[hit] = np.take_along_axis(new, match.argmax(axis=2), axis=1)[hit]
        return out

    # -- provenance ---------------------------------------------------------------------
    def _matrices(self) -> tuple[sp.csr_array, sp.csr_array]:
        if self._mentions is None:
            g = self.graph
            full = sp.csr_array((np.asarray(g.weights), np.asarray(g.indices),
                                 np.asarray(g.indptr)), shape=(g.n_nodes, g.n_nodes))
            self._mentions = full[self.n_ent:, : self.n_ent].tocsr()
            self._ent_adj = full[: self.n_ent, : self.n_ent].tocsr()
        return self._mentions, self._ent_adj

    def paths(self, seeds: list[SeedEntity], top_rows: np.ndarray) -> list[EntityPath]:
        """For each top passage, a chain seed entity [-> linked entity] that reaches it."""
        if not seeds:
            return []
        mentions, adj = self._matrices()
        seed_ids = np.unique([s.entity_id for s in seeds])
        out = []
        for row in top_rows.tolist():
            ents = mentions.indices[mentions.indptr[row]: mentions.indptr[row + 1]]
            direct = np.intersect1d(ents, seed_ids)
            if len(direct):
                out.append(EntityPath(str(self.chunk_ids[row]),
                                      [str(self.entity_names[direct[0]])], []))
                continue
            sub = adj[seed_ids][:, ents]
            r, c = sub.nonzero()
            if len(r):
                best = int(np.argmax(sub.data)) if hasattr(sub, "data") else 0
                s, e = seed_ids[r[best]], ents[c[best]]
                out.append(EntityPath(str(self.chunk_ids[row]), [str(self.entity_names[s]),
                                                 str(self.entity_names[e])], ["related"]))
        return out


def rank_candidates(top: PPRTop, dense: tuple[np.ndarray, np.ndarray], cfg: QueryConfig
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Candidate passage rows (q, c) and their final scores (float64; ``-inf`` for padding
    and for repeats) from the PPR top-k and the dense results.

    The score of a passage is its PPR mass over the question's largest passage mass, plus
    ``dense_blend`` times its min-max dense score; the first ``dense_head`` dense passages are
    lifted above every other passage in dense order. Every passage outside the candidates
    scores at most the lowest PPR top-k value, so the best ``k`` are among them.
    """
    ds, di = dense
    k = top.ids.shape[1]
    denom = np.maximum(top.values[:, :1].astype(np.float64), 1e-30)
    cand = np.concatenate([top.ids, di], axis=1)
    score = np.concatenate([top.values, top.gathered], axis=1).astype(np.float64) / denom
    valid = cand >= 0
    repeat = (top.ids[:, :, None] == di[:, None, :]).any(axis=2)  # also in the dense part
    valid[:, :k] &= ~repeat
    if cfg.dense_blend:
        score[:, k:] += cfg.dense_blend * np.where(di >= 0, _minmax(ds), 0.0).astype(np.float64)
    score[~valid] = -np.inf
    head = cfg.dense_head
    if head:  # the first ``head`` ranks keep the dense order; PPR ranks the rest
        n_head = min(head, di.shape[1])
        lift = score.max(axis=1, keepdims=True) + 1.0 + (head - np.arange(n_head))
        part = score[:, k:k + n_head]
        ok = di[:, :n_head] >= 0
        part[ok] = np.broadcast_to(lift, part.shape)[ok]
    cand = np.where(valid, cand, -1)
    return cand, score


def _best(cand: np.ndarray, score: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best candidates per row by score (ties: lower passage row first)."""
    order = np.lexsort((np.where(cand >= 0, cand, np.iinfo(np.int64).max), -score), axis=-1)
    order = order[:, :k]
    return np.take_along_axis(cand, order, axis=1), np.take_along_axis(score, order, axis=1)
