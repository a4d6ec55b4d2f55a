"""Graph (multi-hop) retrieval: FAISS seeds -> personalized PageRank -> passage ranking.

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
from gpurag.query.results import EntityPath, SeedEntity
from gpurag.store.writer import IndexDir
from gpurag.vectors import load_index, search


def _minmax(x: np.ndarray, axis: int = 1) -> np.ndarray:
    lo = x.min(axis=axis, keepdims=True)
    hi = x.max(axis=axis, keepdims=True)
    return (x - lo) / np.maximum(hi - lo, 1e-9)


def rrf_order(*rankings: np.ndarray, n: int, c: float = 60.0) -> np.ndarray:
    """Rows fused by reciprocal rank (each ``(q, d)`` of row ids, -1 padded), best first."""
    q = rankings[0].shape[0]
    score = np.zeros((q, n))
    rows = np.arange(q)[:, None]
    for ranking in rankings:
        r = 1.0 / (c + 1.0 + np.arange(ranking.shape[1]))
        ok = ranking >= 0
        np.add.at(score, (np.broadcast_to(rows, ranking.shape)[ok], ranking[ok]),
                  np.broadcast_to(r, ranking.shape)[ok])
    depth = max(r.shape[1] for r in rankings)
    top = np.argsort(-score, axis=1, kind="stable")[:, :depth]
    return np.where(np.take_along_axis(score, top, axis=1) > 0, top, -1)


class GraphRetriever:
    """Holds the graph arrays and entity/fact indexes of an opened index."""

    def __init__(self, index_dir: IndexDir, chunks: pd.DataFrame) -> None:
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
        from gpurag.graph.backend import select_ppr_backend

        self.ppr_name, self.ppr = select_ppr_backend()
        self._mentions: sp.csr_array | None = None
        self._ent_adj: sp.csr_array | None = None
        self._chunks = chunks
        self._linker = None
        self._lexical = None

    @property
    def linker(self):
        """Question entity linker over the alias table (built on first use)."""
        if self._linker is None:
            from gpurag.query.linking import EntityLinker

            self._linker = EntityLinker(self.dir.table("tables/aliases.parquet"))
        return self._linker

    @property
    def lexical(self):
        """BM25 over the passages (built on first use)."""
        if self._lexical is None:
            from gpurag.query.lexical import BM25Index

            self._lexical = BM25Index(self._chunks)
        return self._lexical

    # -- seeds --------------------------------------------------------------------------
    def reset_matrix(self, qvecs: np.ndarray, cfg: QueryConfig,
                     dense: tuple[np.ndarray, np.ndarray],
                     questions: list[str] | None = None,
                     lexical: tuple[np.ndarray, np.ndarray] | None = None,
                     ) -> tuple[sp.csr_array, list]:
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
        if lexical is not None and cfg.lexical_weight > 0:
            ls, li = lexical
            ok = li >= 0
            w = np.where(ok, _minmax(np.where(ok, ls, 0.0)), 0.0) * cfg.lexical_weight
            r, c = np.nonzero(w > 0)
            rows.append(r)
            cols.append(li[r, c] + self.n_ent)
            vals.append(w[r, c])
        reset = sp.csr_array(
            (np.concatenate(vals) if vals else np.zeros(0),
             (np.concatenate(rows) if rows else np.zeros(0, np.int64),
              np.concatenate(cols) if cols else np.zeros(0, np.int64))),
            shape=(q, n))
        reset.sum_duplicates()
        if questions is not None and cfg.link_weight > 0 and self.n_ent:
            reset = self._add_linked(reset, questions, cfg, seeds)
        empty = np.flatnonzero(np.diff(reset.indptr) == 0)
        if len(empty):  # no seed at all: fall back to the dense top passage
            fill = sp.csr_array((np.ones(len(empty)), (empty, di[empty, 0] + self.n_ent)),
                                shape=(q, n))
            reset = reset + fill
        return reset, seeds

    def _add_linked(self, reset: sp.csr_array, questions: list[str], cfg: QueryConfig,
                    seeds: list[list[SeedEntity]]) -> sp.csr_array:
        """Rows scaled to sum 1, plus ``link_weight`` shared equally by the entities each
        question names (each share scaled by the entity's specificity)."""
        linked = self.linker.link(questions)
        sums = np.asarray(reset.sum(axis=1)).ravel()
        scale = sp.diags_array(np.where(sums > 0, 1.0 / np.maximum(sums, 1e-30), 0.0))
        q_idx = np.repeat(np.arange(len(linked)), [len(row) for row in linked])
        ents = np.fromiter((e.entity_id for row in linked for e in row), np.int64,
                           count=len(q_idx))
        if not len(ents):
            return reset
        # Each named entity's equal share, scaled by its specificity: a name found in many
        # passages ("English", "Show") says less about where the answer is.
        count = np.bincount(q_idx, minlength=len(linked))[q_idx]
        share = cfg.link_weight * self.specificity[ents] / count
        extra = sp.csr_array((share, (q_idx, ents)), shape=reset.shape)
        for qi, row in enumerate(linked):
            known = {s.entity_id for s in seeds[qi]}
            seeds[qi].extend(SeedEntity(e.entity_id, str(self.entity_names[e.entity_id]), 1.0,
                                        "name") for e in row if e.entity_id not in known)
        out = sp.csr_array(scale @ reset + extra)
        out.sum_duplicates()
        return out

    # -- retrieval ----------------------------------------------------------------------
    def retrieve(self, questions: list[str], qvecs: np.ndarray, cfg: QueryConfig,
                 passage_index) -> tuple[np.ndarray, np.ndarray, list[dict]]:
        """Top-``cfg.k`` passage (scores, rows) per question, plus seeds and entity paths."""
        depth = max(cfg.k, cfg.seed_passages, 1)
        dense = search(passage_index, qvecs, depth)
        want_lexical = (cfg.lexical_weight > 0 and cfg.lexical_seeds > 0) or (
            "bm25" in cfg.head_fusion.split("+") and cfg.dense_head > 0)
        lexical = (self.lexical.search(questions, max(cfg.lexical_seeds, depth))
                   if want_lexical else None)
        lex_seeds = None
        if lexical is not None and cfg.lexical_seeds > 0:
            lex_seeds = (lexical[0][:, :cfg.lexical_seeds], lexical[1][:, :cfg.lexical_seeds])
        reset, seeds = self.reset_matrix(qvecs, cfg, dense, questions, lex_seeds)
        options = {"method": cfg.ppr_method} if self.ppr_name.startswith("scipy") else {}
        scores = self.ppr(self.graph, reset, damping=cfg.damping, tol=cfg.ppr_tol,
                          output="dense", **options)
        psg = np.asarray(scores[:, self.n_ent:], dtype=np.float64)
        psg = psg / np.maximum(psg.max(axis=1, keepdims=True), 1e-30)
        blend = cfg.dense_blend
        if blend:
            ds, di = dense
            dense_full = np.zeros_like(psg)
            rows = np.repeat(np.arange(len(qvecs)), di.shape[1])
            ok = di.ravel() >= 0
            dense_full[rows[ok], di.ravel()[ok]] = _minmax(ds).ravel()[ok]
            psg = psg + blend * dense_full
        head = cfg.dense_head
        if head:  # the first ``head`` ranks come from the head sources; PPR ranks the rest
            top_dense = self._head_order(cfg, dense, lexical, psg, questions)[:, :head]
            lift = psg.max(axis=1, keepdims=True) + 1.0 + (head - np.arange(top_dense.shape[1]))
            rows_q = np.repeat(np.arange(len(qvecs))[:, None], top_dense.shape[1], axis=1)
            ok = top_dense >= 0
            psg[rows_q[ok], top_dense[ok]] = np.broadcast_to(lift, top_dense.shape)[ok]
        if cfg.rerank not in ("", "none"):
            psg = self._rerank(cfg, qvecs, psg, scores, dense)
        k = min(cfg.k, self.n_psg)
        top = np.argpartition(-psg, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(psg, top, axis=1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
        top_scores = np.take_along_axis(psg, top, axis=1).astype(np.float32)
        extras = [{"seeds": sorted(s, key=lambda e: -e.score)[:10],
                   "paths": self.paths(s, top[i])} for i, s in enumerate(seeds)]
        return top_scores, top, extras

    def _head_order(self, cfg: QueryConfig, dense, lexical, psg: np.ndarray,
                    questions: list[str]) -> np.ndarray:
        """Passage rows for the head of the list: the dense order, or the reciprocal-rank
        fusion of the sources named in ``cfg.head_fusion`` (dense, bm25, ppr, title)."""
        sources = cfg.head_fusion.split("+")
        depth = dense[1].shape[1]
        rankings = []
        for source in sources:
            if source == "dense":
                rankings.append(dense[1])
            elif source == "bm25" and lexical is not None:
                rankings.append(lexical[1][:, :depth])
            elif source == "ppr":
                top = np.argsort(-psg, axis=1, kind="stable")[:, :depth]
                rankings.append(top)
            elif source == "title":
                rankings.append(self._title_rows(questions, dense[1]))
        if len(rankings) == 1:
            return rankings[0]
        return rrf_order(*rankings, n=self.n_psg)

    def _title_rows(self, questions: list[str], dense_rows: np.ndarray) -> np.ndarray:
        """Per question, the passages titled by an entity the question names (in dense order,
        then the rest), -1 padded."""
        linked = self.linker.link(questions)
        title_entity = self.title_entity
        out = np.full(dense_rows.shape, -1, np.int64)
        for qi, row in enumerate(linked):
            ents = np.array([e.entity_id for e in row], np.int64)
            if not len(ents):
                continue
            hits = np.flatnonzero(np.isin(title_entity, ents))
            order = np.argsort(np.argmax(dense_rows[qi][:, None] == hits[None, :], axis=0)
                               + (~np.isin(hits, dense_rows[qi])) * len(dense_rows[qi]),
                               kind="stable")
            hits = hits[order][: out.shape[1]]
            out[qi, : len(hits)] = hits
        return out

    @property
    def title_entity(self) -> np.ndarray:
        """Per passage row, the entity its title names (-1 when none)."""
        if getattr(self, "_title_entity", None) is None:
            m = self.dir.table("tables/mentions.parquet", columns=["entity", "chunk", "label"])
            m = m[m["label"] == "TITLE"]
            out = np.full(self.n_psg, -1, np.int64)
            out[m["chunk"].to_numpy(np.int64)] = m["entity"].to_numpy(np.int64)
            self._title_entity = out
        return self._title_entity

    def _rerank(self, cfg: QueryConfig, qvecs: np.ndarray, psg: np.ndarray, ppr_scores,
                dense: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Rescore the top candidates with a reranker (``cfg.rerank``, e.g. ``"gat"``).

        Candidates outside the top ``rerank_candidates`` keep their scores, shifted below the
        reranked ones so the reranker decides the head of the list.
        """
        from gpurag.score import get_reranker

        reranker = get_reranker(cfg.rerank, self, checkpoint=cfg.extra.get("gat_checkpoint"))
        n_cand = min(cfg.rerank_candidates, self.n_psg)
        cand = np.argpartition(-psg, n_cand - 1, axis=1)[:, :n_cand]
        new = reranker.score(qvecs, cand, np.asarray(ppr_scores), dense)  # (q, n_cand)
        out = psg - psg.max() - 1.0 - np.abs(new).max()
        np.put_along_axis(out, cand, new, axis=1)
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
