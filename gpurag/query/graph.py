"""Graph (multi-hop) retrieval: FAISS seeds -> personalized PageRank -> passage ranking.

The PPR runs on the runtime's backend (the device when there is one) and only each
question's top candidates come back to the host (:class:`~gpurag.graph.backend.PPRTop`), never
a dense ``(q, n)`` array; the ranking below works on those candidates (the PPR top-k, the dense
hits and the other head sources' passages) and equals the ranking over all passages.

Seeds come from three FAISS searches per question: entities by name, facts (triples embedded
as text) and passages. Entity and fact seeds are weighted by similarity and by specificity
(entities found in fewer passages weigh more, as in HippoRAG); dense passage scores enter the
reset vector with a smaller weight. Personalized PageRank spreads that mass along relations,
mentions and synonym edges, so a passage that shares no words with the question but mentions
an entity linked to the seeds is reached. The final score blends PPR mass with the dense score,
which keeps dense precision at the top ranks while PPR fills in the rest of the chain.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

import numpy as np
import pandas as pd
import scipy.sparse as sp

from gpurag.config import QueryConfig
from gpurag.graph.backend import Backends, PPRTop
from gpurag.query import second_hop
from gpurag.query.linking import LinkedEntity
from gpurag.query.results import EntityPath, SeedEntity
from gpurag.query.seeds import SeedTable
from gpurag.query.timing import Stages
from gpurag.store import checks, layout
from gpurag.store.writer import IndexDir
from gpurag.vectors import query_index, search
from gpurag.vectors.codec import decode_all
from gpurag.vectors.grouped import GroupedIndex

log = logging.getLogger(__name__)



def _minmax(x: np.ndarray, axis: int = 1) -> np.ndarray:
    lo = x.min(axis=axis, keepdims=True)
    hi = x.max(axis=axis, keepdims=True)
    return (x - lo) / np.maximum(hi - lo, 1e-9)


def rrf_order(*rankings: np.ndarray, n: int, c: float = 60.0) -> np.ndarray:
    """Rows fused by reciprocal rank (each ``(q, d)`` of row ids in ``[0, n)``, -1 padded),
    best first (ties: lower row first), -1 padded to the widest ranking. Works on the rows the
    rankings name, never a ``(q, n)`` array."""
    q = rankings[0].shape[0]
    depth = max(r.shape[1] for r in rankings)
    qs = np.concatenate([np.broadcast_to(np.arange(q)[:, None], r.shape)[r >= 0]
                         for r in rankings])
    ids = np.concatenate([r[r >= 0] for r in rankings])
    gain = np.concatenate([np.broadcast_to(1.0 / (c + 1.0 + np.arange(r.shape[1])),
                                           r.shape)[r >= 0] for r in rankings])
    key = qs * (n + 1) + ids
    uniq, inv = np.unique(key, return_inverse=True)
    score = np.zeros(len(uniq))
    np.add.at(score, inv, gain)  # in ranking order, as a dense accumulation would
    uq, urow = uniq // (n + 1), uniq % (n + 1)
    order = np.lexsort((urow, -score, uq))
    uq, urow = uq[order], urow[order]
    first = np.searchsorted(uq, np.arange(q))
    pos = np.arange(len(uq)) - first[uq]
    out = np.full((q, depth), -1, np.int64)
    keep = pos < depth
    out[uq[keep], pos[keep]] = urow[keep]
    return out


class GraphRetriever:
    """Holds the graph arrays and entity/fact indexes of an opened index."""

    def __init__(self, index_dir: IndexDir, chunks: pd.DataFrame,
                 backends: Backends | None = None, gat_checkpoint: str | None = None,
                 passage_index=None) -> None:
        from gpurag.graph import csr as csr_mod

        self.dir = index_dir
        # the opened index's passage FAISS index, shared (the second hop decodes rows of it);
        # read from the folder on first use when not given
        self._passage_index = passage_index
        self.entities = index_dir.table("tables/entities.parquet")
        self.n_ent = len(self.entities)
        self.n_psg = len(chunks)
        self.chunk_ids = chunks["chunk_id"].to_numpy(dtype=object)
        self.graph = csr_mod.load(index_dir.path / "graph", mmap=True,
                                  shown=index_dir.root / "graph")
        names = index_dir.table(layout.NAMES, columns=["entity", "count"])
        checks.check_ids(index_dir, layout.NAMES, names["entity"].to_numpy(), self.n_ent,
                         "entity ids")
        self.name_entity = names["entity"].to_numpy(np.int64)
        self.name_count = names["count"].to_numpy(np.float32)
        name_index = index_dir.faiss(layout.NAMES_FAISS)
        checks.check_vectors(index_dir, layout.NAMES_FAISS, name_index, len(names),
                             f"one per row of {layout.NAMES}")
        # An entity scores as its best surface name.
        self.entity_index = GroupedIndex(name_index, self.name_entity, self.n_ent)
        self.fact_index = index_dir.faiss(layout.FACTS_FAISS)
        self.fact_indptr = np.asarray(index_dir.array(layout.FACT_ENTITY_INDPTR))
        self.fact_entities = np.asarray(index_dir.array(layout.FACT_ENTITY_INDICES))
        checks.check_vectors(index_dir, layout.FACTS_FAISS, self.fact_index,
                             len(self.fact_indptr) - 1, "one per fact")
        n_passages = self.entities["n_passages"].to_numpy(np.float64)
        self.specificity = 1.0 / np.log2(2.0 + np.maximum(n_passages, 0.0))
        self.entity_names = self.entities["name"].astype(str).to_numpy(dtype=object)
        self.backends = backends or Backends.for_device("cpu")
        self.ppr_name = self.backends.names["ppr"]
        self.gat_checkpoint = gat_checkpoint  # the runtime's default GAT weights
        self._mentions: sp.csr_array | None = None
        self._ent_adj: sp.csr_array | None = None
        self._chunks = chunks
        self._linker = None
        self._lexical = None

    def entity_vectors(self) -> np.ndarray:
        """``(n_ent, d)`` float32: each entity's count-weighted mean of its names' stored
        vectors, unit length (decoded from the names index)."""
        names = decode_all(self.entity_index.index)
        out = np.zeros((self.n_ent, names.shape[1]), np.float32)
        np.add.at(out, self.name_entity, names * self.name_count[:, None])
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    @property
    def passage_index(self):
        """The passage FAISS index: the opened index's, or read once from the folder."""
        if self._passage_index is None:
            self._passage_index = self.dir.faiss(layout.PASSAGES_FAISS)
        return self._passage_index

    def passage_vectors(self) -> np.ndarray:
        """``(n_psg, d)`` float32 passage vectors, decoded from the passage index."""
        return decode_all(self.passage_index)

    @property
    def linker(self):
        """Question entity linker over the alias table (built on first use)."""
        if self._linker is None:
            from gpurag.query.linking import EntityLinker

            self._linker = EntityLinker(self.aliases)
        return self._linker

    @property
    def aliases(self) -> pd.DataFrame:
        """The alias table (``name``, ``entity_id``, ``key``: the normalized lookup key,
        stored since index builds of stop 13, computed here for older ones); read once."""
        if getattr(self, "_aliases", None) is None:
            from gpurag.resolve.normalize import alias_keys

            table = self.dir.table(layout.ALIASES)
            self._aliases = table.assign(key=alias_keys(table))
        return self._aliases

    @property
    def lexical(self):
        """BM25 over the passages (built on first use)."""
        if self._lexical is None:
            self._lexical = self._open_lexical()
        return self._lexical

    def _open_lexical(self):
        """The BM25 model the build saved, or (an index without one, or a copy this bm25s
        cannot read) one built from the chunks."""
        from gpurag.query.lexical import BM25Index

        if all(self.dir.has(rel) for rel in layout.LEXICAL_FILES):
            try:
                return BM25Index.load(self.dir.file(layout.LEXICAL_DIR), self.n_psg)
            except Exception as exc:  # a copy this bm25s cannot read is rebuilt, not fatal
                log.warning(
                    "index %s: its BM25 copy cannot be read (%s); rebuilding it in memory",
                    self.dir.root, exc)
        return BM25Index(self._chunks)

    # -- seeds --------------------------------------------------------------------------
    @functools.cached_property
    def _searchers(self) -> dict[str, tuple[object, object]]:
        return {}

    def _search(self, which: str, qvecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, ids) from the ``"entity"`` or ``"fact"`` index: host FAISS on the
        CPU; on cuda a device searcher made once from the loaded index
        (:func:`gpurag.vectors.query_index`)."""
        index = getattr(self, f"{which}_index")
        held = self._searchers.get(which)
        if held is None or held[0] is not index:
            held = (index, query_index(index, self.backends.device))
            self._searchers[which] = held
        return search(held[1], qvecs, k)

    def reset_matrix(self, qvecs: np.ndarray, cfg: QueryConfig,
                     dense: tuple[np.ndarray, np.ndarray],
                     questions: list[str] | None = None,
                     lexical: tuple[np.ndarray, np.ndarray] | None = None,
                     linked: list[list[LinkedEntity]] | None = None,
                     ) -> tuple[sp.csr_array, SeedTable]:
        """The ``(q, n)`` personalization matrix and the batch's seed entities. ``linked``:
        the entities each question names (linked here from ``questions`` when not given)."""
        q = len(qvecs)
        n = self.n_ent + self.n_psg
        rows, cols, vals = [], [], []
        seeds = SeedTable.empty()
        if self.n_ent and cfg.seed_entities:
            es, ei = self._search("entity", qvecs, cfg.seed_entities)
            keep = (ei >= 0) & (es >= es[:, :1] - cfg.entity_margin)
            w = np.where(keep, np.clip(es, 0, None) ** cfg.sim_power, 0.0)
            w = w * self.specificity[np.maximum(ei, 0)]
            r, c = np.nonzero(w > 0)
            rows.append(r)
            cols.append(ei[r, c])
            vals.append(w[r, c] * cfg.entity_weight)
            seeds = seeds.extend(r, ei[r, c], es[r, c], "entity")
        if self.fact_index.ntotal and cfg.seed_facts:
            fs, fi = self._search("fact", qvecs, cfg.seed_facts)
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
        if (questions is not None or linked is not None) and cfg.link_weight > 0 and self.n_ent:
            if linked is None:
                linked = self.linker.link(questions)
            reset, seeds = self._add_linked(reset, linked, cfg, seeds)
        empty = np.flatnonzero(np.diff(reset.indptr) == 0)
        if len(empty):  # no seed at all: fall back to the dense top passage
            fill = sp.csr_array((np.ones(len(empty)), (empty, di[empty, 0] + self.n_ent)),
                                shape=(q, n))
            reset = reset + fill
        return reset, seeds

    def _add_linked(self, reset: sp.csr_array, linked: list[list[LinkedEntity]],
                    cfg: QueryConfig, seeds: SeedTable) -> tuple[sp.csr_array, SeedTable]:
        """Rows scaled to sum 1, plus ``link_weight`` shared equally by the entities each
        question names (each share scaled by the entity's specificity); the named entities
        that are not seeds yet join the seeds."""
        sums = np.asarray(reset.sum(axis=1)).ravel()
        scale = sp.diags_array(np.where(sums > 0, 1.0 / np.maximum(sums, 1e-30), 0.0))
        q_idx = np.repeat(np.arange(len(linked)), [len(row) for row in linked])
        ents = np.fromiter((e.entity_id for row in linked for e in row), np.int64,
                           count=len(q_idx))
        if not len(ents):
            return reset, seeds
        # Each named entity's equal share, scaled by its specificity: a name found in many
        # passages ("English", "Show") says less about where the answer is.
        count = np.bincount(q_idx, minlength=len(linked))[q_idx]
        share = cfg.link_weight * self.specificity[ents] / count
        extra = sp.csr_array((share, (q_idx, ents)), shape=reset.shape)
        # the named entities that are not similarity seeds (a name named twice, twice)
        new = ~np.isin(q_idx * self.n_ent + ents, seeds.q * self.n_ent + seeds.entity)
        seeds = seeds.extend(q_idx[new], ents[new], np.ones(int(new.sum())), "name")
        out = sp.csr_array(scale @ reset + extra)
        out.sum_duplicates()
        return out, seeds

    # -- retrieval ----------------------------------------------------------------------
    def retrieve(self, questions: list[str], qvecs: np.ndarray, cfg: QueryConfig,
                 passage_index, stages: Stages | None = None
                 ) -> tuple[np.ndarray, np.ndarray, list[dict]]:
        """Top-``cfg.k`` passage (scores, rows) per question, plus seeds and entity paths.

        Every stage takes the whole batch: the questions are tokenized for BM25 and linked
        to the entities they name once, and both are reused by the seeds, the head and the
        second hop. ``stages`` gets each stage's time (:class:`~gpurag.query.timing.Stages`).
        """
        stages = stages or Stages()
        cfg = self.for_corpus(cfg)
        depth = max(cfg.k, cfg.seed_passages, 1)
        dense = search(passage_index, qvecs, depth)
        stages.lap("dense")
        sources = cfg.head_fusion.split("+") if cfg.dense_head else []
        want_lexical = (cfg.lexical_weight > 0 and cfg.lexical_seeds > 0) or (
            "bm25" in cfg.head_fusion.split("+") and cfg.dense_head > 0)
        expansions = cfg.second_hop_expansions > 0 and cfg.second_hop_expansion_weight > 0
        tokens = (self.lexical.tokens(questions)
                  if (want_lexical or expansions) and self.lexical.exact else None)
        lexical = None
        if want_lexical:
            k_lex = max(cfg.lexical_seeds, depth)
            lexical = (self.lexical.search_tokens(tokens, k_lex) if tokens is not None
                       else self.lexical.search(questions, k_lex))
        stages.lap("bm25")
        linked = (self.linker.link(questions)
                  if self.n_ent and (cfg.link_weight > 0 or "title" in sources or expansions)
                  else None)
        stages.lap("linking")
        lex_seeds = None
        if lexical is not None and cfg.lexical_seeds > 0:
            lex_seeds = (lexical[0][:, :cfg.lexical_seeds], lexical[1][:, :cfg.lexical_seeds])
        reset, seeds = self.reset_matrix(qvecs, cfg, dense, questions, lex_seeds, linked)
        # Passages the head sources name before PPR: their PPR scores come back with the
        # top-k, so the ranking over candidates is the ranking over all passages.
        known = [dense[1]]
        if "bm25" in sources and lexical is not None:
            known.append(lexical[1][:, :depth])
        title = self._title_rows(questions, dense[1], linked) if "title" in sources else None
        if title is not None:
            known.append(title)
        gather = np.concatenate(known, axis=1)
        stages.lap("seeds")
        reranker = self._reranker(cfg)
        k = min(cfg.k, self.n_psg)
        want = max(k, cfg.rerank_candidates if reranker else 0, depth) + gather.shape[1]
        # A reranker gets the PPR scores recorded around the candidates (top-k and gathered
        # rows) for its subgraph fanout, never the (q, n) rows.
        top = self.backends.ppr(
            self.graph, reset, k=min(want, self.n_psg), lo=self.n_ent,
            hi=self.n_ent + self.n_psg, gather=gather, damping=cfg.damping, tol=cfg.ppr_tol,
            method=cfg.ppr_method,
            local_fanout=self._fanout(reranker) if reranker is not None else None)
        stages.lap("walk")
        cand, score = candidate_scores(top, gather, dense, cfg)
        relevance = score.copy()  # before the head is lifted and the ranking fused
        head_rows = None
        if cfg.dense_head:
            head_rows = self._head_rows(cfg, dense, lexical, cand, score, title)
            lift_head(cand, score, head_rows, head_rows.shape[1])
        stages.lap("fusion")
        if reranker is not None:
            score = self._rerank(reranker, cfg, qvecs, cand, score, top.local, dense)
            stages.lap("rerank")
        if cfg.second_hop_weight > 0 or cfg.second_hop_expansions > 0:
            first, first_scores = best_candidates(cand, score, max(k, second_hop.FIRST_DEPTH))
            top_rows, top_scores = self.bridge_pages.rerank(
                first, first_scores, qvecs, questions, cfg, k,
                head=first[:, :cfg.dense_head] if reranker is not None else head_rows,
                tokens=tokens, linked=linked, stages=stages)
        else:
            top_rows, top_scores = best_candidates(cand, score, k)
        top_scores = shown_scores(top_rows, cand, relevance)
        stages.lap("second_hop")
        paths = self.batch_paths(seeds, top_rows)
        shown = seeds.lists(len(questions), self.entity_names)
        extras = [{"seeds": s, "paths": p} for s, p in zip(shown, paths, strict=True)]
        if linked is not None:  # handed on (confidence), so the batch is linked once
            for extra, row in zip(extras, linked, strict=True):
                extra["linked"] = row
        stages.lap("paths")
        return top_scores.astype(np.float32), top_rows, extras

    def bridged(self, cfg: QueryConfig) -> bool:
        """Whether the corpus has bridge pages: at least ``cfg.bridged_share`` of its passages are
        the page of an entity another passage mentions (encyclopedic corpora, not chat logs
        or notes)."""
        return self.bridge_pages.reached_share(cfg.second_hop_max_pages) >= cfg.bridged_share

    def for_corpus(self, cfg: QueryConfig) -> QueryConfig:
        """``cfg`` with ``head_mode="auto"`` resolved: on a corpus without bridge pages the
        graph has no second hop to put second, so the head takes each source's first passage
        ("union") and BM25 seeds weigh ``lexical_weight_unbridged``; otherwise "fused"."""
        if cfg.head_mode != "auto":
            return cfg
        if self.bridged(cfg):
            return dataclasses.replace(cfg, head_mode="fused")
        return dataclasses.replace(cfg, head_mode="union",
                                   lexical_weight=cfg.lexical_weight_unbridged)

    def _head_rows(self, cfg: QueryConfig, dense, lexical, cand: np.ndarray,
                   score: np.ndarray, title: np.ndarray | None) -> np.ndarray:
        """Passage rows for the head of the list, ``(q, h)`` -1 padded, best first.

        ``head_mode`` "fused": the first ``dense_head`` rows of the dense order, or of the
        reciprocal-rank fusion of the sources named in ``cfg.head_fusion`` (dense, bm25, ppr,
        title). "union": the first ``dense_head`` rows of each source, in the order of that
        fusion with the PPR ranking added, so a passage that one source ranks first keeps a
        place when the sources disagree (1 to ``dense_head`` x sources rows)."""
        sources = cfg.head_fusion.split("+")
        depth = dense[1].shape[1]
        rankings = []
        for source in sources:
            if source == "dense":
                rankings.append(dense[1])
            elif source == "bm25" and lexical is not None:
                rankings.append(lexical[1][:, :depth])
            elif source == "ppr":
                rankings.append(best_candidates(cand, score, depth)[0])
            elif source == "title" and title is not None:
                rankings.append(title)
        if cfg.head_mode == "union" and len(rankings) > 1:
            return union_head(rankings, best_candidates(cand, score, depth)[0],
                              cfg.dense_head, self.n_psg)
        fused = rankings[0] if len(rankings) == 1 else rrf_order(*rankings, n=self.n_psg)
        return fused[:, :cfg.dense_head]

    def _title_rows(self, questions: list[str], dense_rows: np.ndarray,
                    linked: list[list[LinkedEntity]] | None = None) -> np.ndarray:
        """Per question, the passages titled by an entity the question names (in dense order,
        then the rest), -1 padded."""
        if linked is None:
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
            m = self.dir.table(layout.MENTIONS, columns=["entity", "chunk", "label"])
            m = m[m["label"] == "TITLE"]
            out = np.full(self.n_psg, -1, np.int64)
            out[m["chunk"].to_numpy(np.int64)] = m["entity"].to_numpy(np.int64)
            self._title_entity = out
        return self._title_entity

    @property
    def bridge_pages(self) -> second_hop.BridgePages:
        """The second hop's bridge pages (built on first use)."""
        if getattr(self, "_bridge_pages", None) is None:
            self._bridge_pages = second_hop.BridgePages(self)
        return self._bridge_pages

    def _reranker(self, cfg: QueryConfig):
        """The reranker ``cfg.rerank`` names (e.g. ``"gat"``), or None."""
        if cfg.rerank in ("", "none"):
            return None
        from gpurag.rerank import get_reranker

        return get_reranker(cfg.rerank, self, checkpoint=cfg.gat_checkpoint)

    @staticmethod
    def _fanout(reranker) -> tuple[int, ...]:
        from gpurag.rerank import DEFAULT_FANOUT

        return tuple(getattr(reranker, "fanout", DEFAULT_FANOUT))

    def _rerank(self, reranker, cfg: QueryConfig, qvecs: np.ndarray, cand: np.ndarray,
                score: np.ndarray, ppr_scores, dense: tuple[np.ndarray, np.ndarray]
                ) -> np.ndarray:
        """Rescore the top candidates with ``reranker``.

        Candidates outside the top ``rerank_candidates`` keep their scores, shifted below the
        reranked ones so the reranker decides the head of the list. ``ppr_scores``: the PPR
        component's ``local`` scores (recorded around the candidates, not the ``(q, n)`` rows).
        """
        n_cand = min(cfg.rerank_candidates, self.n_psg)
        head_rows, _ = best_candidates(cand, score, n_cand)
        new = reranker.score(qvecs, head_rows, ppr_scores, dense)  # (q, n_cand)
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
        table = SeedTable.empty().extend(np.zeros(len(seeds), np.int64),
                                         [s.entity_id for s in seeds],
                                         np.zeros(len(seeds)), "entity")
        return self.batch_paths(table, np.asarray(top_rows, np.int64)[None, :])[0]

    def batch_paths(self, seeds: SeedTable, top_rows: np.ndarray) -> list[list[EntityPath]]:
        """Per question, for each of its returned passages (``top_rows``, ``(q, k)``, -1
        padded), a chain seed entity [-> linked entity] that reaches it
        (:func:`gpurag.query.paths.trace`)."""
        from gpurag.query.paths import trace

        mentions, adj = self._matrices()
        pq, pj, first, second = trace(seeds.q, seeds.entity, top_rows, mentions, adj)
        out: list[list[EntityPath]] = [[] for _ in range(top_rows.shape[0])]
        names, ids = self.entity_names, self.chunk_ids
        for qi, row, a, b in zip(pq.tolist(), top_rows[pq, pj].tolist(), first.tolist(),
                                 second.tolist(), strict=True):
            if b < 0:
                out[qi].append(EntityPath(str(ids[row]), [str(names[a])], []))
            else:
                out[qi].append(EntityPath(str(ids[row]), [str(names[a]), str(names[b])],
                                          ["related"]))
        return out


def candidate_scores(top: PPRTop, gather: np.ndarray, dense: tuple[np.ndarray, np.ndarray],
                     cfg: QueryConfig) -> tuple[np.ndarray, np.ndarray]:
    """Candidate passage rows ``(q, c)`` (-1 where padded or repeated) and their scores
    (float64, ``-inf`` there) from the PPR top-k and the gathered rows (the dense hits first).

    A passage's score is its PPR mass over the question's largest passage mass, plus
    ``dense_blend`` times its min-max dense score. Every passage outside the candidates scores
    at most the lowest top-k value, so the best ones are among them.
    """
    ds, di = dense
    k = top.ids.shape[1]
    denom = np.maximum(top.values[:, :1].astype(np.float64), 1e-30)
    cand = np.concatenate([top.ids, gather], axis=1)
    score = np.concatenate([top.values, top.gathered], axis=1).astype(np.float64) / denom
    if cfg.dense_blend:
        blend = np.where(di >= 0, _minmax(ds), 0.0).astype(np.float64)
        score[:, k:k + di.shape[1]] += cfg.dense_blend * blend
    # One copy per row: the dense one first (it carries the blend), then the other gathered
    # ones, then the top-k one.
    q, c = cand.shape
    priority = np.r_[np.full(k, 2), np.zeros(di.shape[1]), np.ones(c - k - di.shape[1])]
    order = np.lexsort((np.broadcast_to(priority, (q, c)), cand), axis=-1)
    sorted_cand = np.take_along_axis(cand, order, axis=1)
    repeat = np.zeros((q, c), dtype=bool)
    repeat[:, 1:] = sorted_cand[:, 1:] == sorted_cand[:, :-1]
    valid = np.ones((q, c), dtype=bool)
    np.put_along_axis(valid, order, ~repeat, axis=1)
    valid &= cand >= 0
    score[~valid] = -np.inf
    return np.where(valid, cand, -1), score


def shown_scores(rows: np.ndarray, cand: np.ndarray, relevance: np.ndarray) -> np.ndarray:
    """The score each ranked row (``(q, k)``, -1 padded) shows: the best relevance from the
    walk at its rank or below (``relevance`` of the candidates ``cand``: PPR mass over the
    question's best passage's, plus the dense blend; 0 for a row the walk did not rank), so
    scores never rise down the list and a cut at a score keeps every row the walk rated that
    high. The order itself comes from the head, the fusions and any reranker; the internal
    fusion scores (1e6 for a head row) are not shown."""
    match = (rows[:, :, None] == cand[:, None, :]) & (rows[:, :, None] >= 0)
    found = np.take_along_axis(np.where(np.isfinite(relevance), relevance, 0.0),
                               match.argmax(axis=2), axis=1)
    value = np.where(match.any(axis=2), np.maximum(found, 0.0), 0.0)
    best_below = np.maximum.accumulate(value[:, ::-1], axis=1)[:, ::-1]
    return np.where(rows >= 0, best_below, 0.0)


def union_head(rankings: list[np.ndarray], ppr: np.ndarray, per_source: int, n: int
               ) -> np.ndarray:
    """The first ``per_source`` rows of each ranking (``(q, d)``, -1 padded), each once, in
    the order of the reciprocal-rank fusion of the rankings and ``ppr``: ``(q, h)``, -1
    padded."""
    fused = rrf_order(*rankings, ppr, n=n)
    tops = np.concatenate([r[:, :per_source] for r in rankings], axis=1)
    chosen = (fused[:, :, None] == tops[:, None, :]).any(axis=2) & (fused >= 0)
    order = np.argsort(~chosen, axis=1, kind="stable")[:, :tops.shape[1]]
    rows = np.take_along_axis(fused, order, axis=1)
    return np.where(np.take_along_axis(chosen, order, axis=1), rows, -1)


def lift_head(cand: np.ndarray, score: np.ndarray, head_rows: np.ndarray, head: int) -> None:
    """Lift ``head_rows`` (q, <= head) above every other candidate, in their order (in place);
    the rows are among the candidates."""
    lift = score.max(axis=1, keepdims=True) + 1.0 + (head - np.arange(head_rows.shape[1]))
    match = (cand[:, :, None] == head_rows[:, None, :]) & (head_rows[:, None, :] >= 0)
    hit = match.any(axis=2)
    score[hit] = np.take_along_axis(np.broadcast_to(lift, head_rows.shape),
                                    match.argmax(axis=2), axis=1)[hit]


def best_candidates(cand: np.ndarray, score: np.ndarray, k: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best candidates per row by score (ties: lower passage row first)."""
    order = np.lexsort((np.where(cand >= 0, cand, np.iinfo(np.int64).max), -score), axis=-1)
    order = order[:, :k]
    rows = np.take_along_axis(cand, order, axis=1)
    scores = np.take_along_axis(score, order, axis=1)
    return np.where(np.isfinite(scores), rows, -1), scores
