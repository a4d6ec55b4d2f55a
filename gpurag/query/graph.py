"""Graph (multi-hop) retrieval: a thin retriever composing the query's stages.

Each stage is one module and one function over the batch's ``(q, ·)`` arrays:

1. seeds (:mod:`gpurag.query.seeds`): FAISS hits of entity names, facts and passages, BM25
   passages (:mod:`gpurag.query.lexical`) and the entities the questions name
   (:mod:`gpurag.query.linking`, once per batch) -> the ``(q, n)`` reset matrix;
2. walk (:mod:`gpurag.query.walk`): personalized PageRank on the runtime's backend (the
   device when there is one); only each question's top candidates come back to the host;
3. fusion/head (:mod:`gpurag.query.fusion`): PPR mass blended with the dense score, the head
   sources fused by reciprocal rank and lifted to the top;
4. rerank (:mod:`gpurag.query.rescore`), when a reranker is asked for;
5. second hop (:mod:`gpurag.query.second_hop`): bridge pages and expanded questions;
6. passages/paths (:mod:`gpurag.query.paths`): entity paths for the returned rows only.

Seeds weigh entities by similarity and specificity (entities found in fewer passages weigh
more, as in HippoRAG); dense passage scores enter the reset vector with a smaller weight.
Personalized PageRank spreads that mass along relations, mentions and synonym edges, so a
passage that shares no words with the question but mentions an entity linked to the seeds is
reached. The final score blends PPR mass with the dense score, which keeps dense precision at
the top ranks while PPR fills in the rest of the chain.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pandas as pd
import scipy.sparse as sp

from gpurag.backends.part import implementation_name
from gpurag.config import QueryConfig
from gpurag.graph.ppr_local import DEFAULT_FANOUT
from gpurag.once import built_once, once_property
from gpurag.query import second_hop
from gpurag.query.chain_rounds import chain_rounds
from gpurag.query.fusion import (  # noqa: F401  (re-exported: the stages' functions)
    best_candidates,
    head_rows,
    lift_head,
    minmax,
    rrf_order,
    shown_scores,
    union_head,
)
from gpurag.query.linking import LinkedBatch
from gpurag.query.overlap import ahead
from gpurag.query.paths import path_lists
from gpurag.query.rescore import rerank as rerank_stage
from gpurag.query.results import EntityPath, SeedEntity
from gpurag.query.seeds import SeedArrays, SeedHits, SeedTable, title_pages, title_rows
from gpurag.query.seeds import reset_matrix as seed_reset
from gpurag.query.timing import Stages, timed
from gpurag.query.walk import candidate_scores, walk
from gpurag.store import checks, layout
from gpurag.store.writer import IndexDir
from gpurag.vectors import search
from gpurag.vectors.codec import decode_all
from gpurag.vectors.faiss_index import overlaps_scan
from gpurag.vectors.grouped import GroupedIndex

log = logging.getLogger(__name__)

_minmax = minmax  # the name older code imported


class GraphRetriever:
    """Holds the graph arrays and entity/fact indexes of an opened index.

    ``parts``: the runtime (:class:`gpurag.runtime.Runtime`) whose ``ppr``, ``searcher`` and
    ``reranker_for`` the retrieval runs on."""

    def __init__(self, index_dir: IndexDir, chunks: pd.DataFrame, parts,
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
        name_index = index_dir.searchable(layout.NAMES_FAISS)  # a delete's unused rows out
        checks.check_vectors(index_dir, layout.NAMES_FAISS, name_index, len(names),
                             f"one per row of {layout.NAMES}")
        # An entity scores as its best surface name.
        self.entity_index = GroupedIndex(name_index, self.name_entity, self.n_ent)
        self.fact_index = index_dir.searchable(layout.FACTS_FAISS)
        self.fact_indptr = np.asarray(index_dir.array(layout.FACT_ENTITY_INDPTR))
        self.fact_entities = np.asarray(index_dir.array(layout.FACT_ENTITY_INDICES))
        checks.check_vectors(index_dir, layout.FACTS_FAISS, self.fact_index,
                             len(self.fact_indptr) - 1, "one per fact")
        n_passages = self.entities["n_passages"].to_numpy(np.float64)
        self.specificity = 1.0 / np.log2(2.0 + np.maximum(n_passages, 0.0))
        self.entity_names = self.entities["name"].astype(str).to_numpy(dtype=object)
        self.ppr = parts.ppr
        self.ppr_name = implementation_name(parts.ppr)
        self.searcher = parts.searcher
        self.reranker_for = parts.reranker_for  # name, retriever, checkpoint -> reranker
        # the walk segment on the device (backends.query_device); None: the NumPy stages
        self.query_walk = getattr(parts, "query_walk", None) or None  # False: off
        # (mentions, entity adjacency), published together: a reader never sees half
        self._mats: tuple[sp.csr_array, sp.csr_array] | None = None
        self.chunks = chunks  # the index's chunk table (read by the stages)
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
        return built_once(self, "_passage_index",
                          lambda: self.dir.searchable(layout.PASSAGES_FAISS))

    def passage_vectors(self) -> np.ndarray:
        """``(n_psg, d)`` float32 passage vectors, decoded from the passage index."""
        return decode_all(self.passage_index)

    @property
    def linker(self):
        """Question entity linker over the alias table (built on first use)."""
        from gpurag.query import linking

        return built_once(self, "_linker", lambda: linking.EntityLinker(self.aliases))

    @property
    def aliases(self) -> pd.DataFrame:
        """The alias table (``name``, ``entity_id``, ``key``: the normalized lookup key,
        stored since index builds of stop 13, computed here for older ones); read once."""
        from gpurag.resolve import normalize

        def read() -> pd.DataFrame:
            table = self.dir.table(layout.ALIASES)
            return table.assign(key=normalize.alias_keys(table))

        return built_once(self, "_aliases", read)

    @property
    def lexical(self):
        """BM25 over the passages (built on first use)."""
        return built_once(self, "_lexical", self._open_lexical)

    def _open_lexical(self):
        """The BM25 model the build saved, or (an index without one, or a copy this bm25s
        cannot read) one built from the chunks."""
        from gpurag.errors import IndexFormatError
        from gpurag.query.lexical import BM25Index
        from gpurag.query.lexical_delta import META as DELTA_META
        from gpurag.query.lexical_delta import DeltaFormatError

        if all(self.dir.has(rel) for rel in layout.LEXICAL_FILES):
            try:
                return BM25Index.load(self.dir.file(layout.LEXICAL_DIR), self.n_psg,
                                      self.dir.deleted_chunks())
            except DeltaFormatError as exc:  # not another bm25s: a corrupt index (as a bad
                raise IndexFormatError(  # graph delta is), named by the user's path
                    f"index {self.dir.root}: its BM25 delta ({layout.LEXICAL_DIR}/"
                    f"{DELTA_META}) does not fit the stored model: {exc}") from exc
            except Exception as exc:  # a copy this bm25s cannot read is rebuilt, not fatal
                log.warning(
                    "index %s: its BM25 copy cannot be read (%s); rebuilding it in memory",
                    self.dir.root, exc)
        return BM25Index.over_live(self.chunks, self.dir.deleted_chunks())

    # -- parts the stages read ------------------------------------------------------------
    @once_property
    def _searchers(self) -> dict[str, tuple[object, object]]:
        return {}

    def search(self, which: str, qvecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, ids) from the ``"entity"`` or ``"fact"`` index: host FAISS on the
        CPU; on cuda a device searcher made once from the loaded index (the runtime's
        ``searcher``)."""
        index = getattr(self, f"{which}_index")
        held = built_once(self, which, lambda: (index, self.searcher(index)),
                          fresh=lambda held: held[0] is index, store=self._searchers)
        return search(held[1], qvecs, k)

    @once_property
    def seed_arrays(self) -> SeedArrays:
        """What the seeds stage reads: node counts, specificity, fact -> entities."""
        return SeedArrays(self.n_ent, self.n_psg, self.specificity, self.fact_indptr,
                          self.fact_entities)

    @once_property
    def title_pages(self) -> tuple[np.ndarray, np.ndarray]:
        """Entity -> the passages it titles (CSR, :func:`gpurag.query.seeds.title_pages`)."""
        return title_pages(self.title_entity, self.n_ent)

    @property
    def mentions(self) -> sp.csr_array:
        """``(n_psg, n_ent)`` passage -> entity mention weights (CSR), from the graph."""
        return self._matrices()[0]

    @property
    def entity_adjacency(self) -> sp.csr_array:
        """``(n_ent, n_ent)`` entity -> entity relation weights (CSR), from the graph."""
        return self._matrices()[1]

    def _matrices(self) -> tuple[sp.csr_array, sp.csr_array]:
        """Both graph blocks, built once and published as one pair: a concurrent cold caller
        waits for that pair, never builds a second one nor reads a half-built one."""
        def build() -> tuple[sp.csr_array, sp.csr_array]:
            g = self.graph
            full = sp.csr_array((np.asarray(g.weights), np.asarray(g.indices),
                                 np.asarray(g.indptr)), shape=(g.n_nodes, g.n_nodes))
            return (full[self.n_ent:, : self.n_ent].tocsr(),
                    full[: self.n_ent, : self.n_ent].tocsr())

        return built_once(self, "_mats", build)

    # -- seeds --------------------------------------------------------------------------
    def seed_hits(self, qvecs: np.ndarray, cfg: QueryConfig,
                  dense: tuple[np.ndarray, np.ndarray],
                  lexical: tuple[np.ndarray, np.ndarray] | None = None,
                  named: LinkedBatch | None = None) -> SeedHits:
        """The batch's seed sources: the entity and fact FAISS searches, plus the given
        dense and BM25 hits and named entities."""
        ents = (self.search("entity", qvecs, cfg.seed_entities)
                if self.n_ent and cfg.seed_entities else None)
        facts = (self.search("fact", qvecs, cfg.seed_facts)
                 if self.fact_index.ntotal and cfg.seed_facts else None)
        return SeedHits(ents, facts, dense, lexical, named)

    def reset_matrix(self, qvecs: np.ndarray, cfg: QueryConfig,
                     dense: tuple[np.ndarray, np.ndarray],
                     questions: list[str] | None = None,
                     lexical: tuple[np.ndarray, np.ndarray] | None = None,
                     linked=None) -> tuple[sp.csr_array, SeedTable]:
        """The ``(q, n)`` personalization matrix and the batch's seed entities
        (:func:`gpurag.query.seeds.reset_matrix`). ``linked``: the entities each question
        names (a :class:`~gpurag.query.linking.LinkedBatch` or per-question lists; linked
        here from ``questions`` when not given)."""
        named = None
        if cfg.link_weight > 0 and self.n_ent and (questions is not None or linked is not None):
            named = self._named(questions, linked)
        return seed_reset(self.seed_arrays, self.seed_hits(qvecs, cfg, dense, lexical, named),
                          cfg)

    def _named(self, questions, linked) -> LinkedBatch:
        if linked is None:
            return self.linker.link_batch(questions)
        return linked if isinstance(linked, LinkedBatch) else LinkedBatch.from_lists(linked)

    # -- retrieval ----------------------------------------------------------------------
    def retrieve(self, questions: list[str], qvecs: np.ndarray, cfg: QueryConfig,
                 passage_index, stages: Stages | None = None
                 ) -> tuple[np.ndarray, np.ndarray, list[dict]]:
        """Top-``cfg.k`` passage (scores, rows) per question, plus seeds and entity paths.

        The stages in order, each over the whole batch: dense and BM25 hits, linking (once),
        seeds, walk, fusion/head, rerank, second hop, paths; a long dense scan runs on a helper
        thread beside BM25 and linking (:mod:`gpurag.query.overlap`). ``stages`` gets each
        stage's time (:class:`~gpurag.query.timing.Stages`; ``dense``: the wait for the scan
        after linking, ``dense_scan``: the scan's own time wherever it ran, beside the laps).
        """
        stages = stages or Stages()
        cfg = self.for_corpus(cfg)
        depth = max(cfg.k, cfg.seed_passages, 1)
        # The dense passage scan (FAISS, without the GIL) on the helper thread while this one
        # runs the text stages (BM25, linking): the same hits, on the second core.
        dense_job = ahead(timed, search, passage_index, qvecs, depth,
                          worth=overlaps_scan(passage_index, len(questions)))
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
        named = (self.linker.link_batch(questions)
                 if self.n_ent and (cfg.link_weight > 0 or "title" in sources or expansions)
                 else None)
        stages.lap("linking")
        dense, scan_ms = dense_job.result()
        stages.lap("dense")  # what is left of the scan once the text stages are done
        stages.add("dense_scan", scan_ms)  # the scan itself (as "dense" was before overlap)
        # seeds: the reset matrix, and the head sources' passages, gathered by the walk
        lex_seeds = None
        if lexical is not None and cfg.lexical_seeds > 0:
            lex_seeds = (lexical[0][:, :cfg.lexical_seeds], lexical[1][:, :cfg.lexical_seeds])
        hits = self.seed_hits(qvecs, cfg, dense, lex_seeds,
                              named if cfg.link_weight > 0 else None)
        reranker = self._reranker(cfg)
        on_device = self.query_walk if reranker is None else None
        reset, seeds = seed_reset(self.seed_arrays, hits, cfg)
        rankings = {"dense": dense[1]}
        if "bm25" in sources and lexical is not None:
            rankings["bm25"] = lexical[1][:, :depth]
        if "title" in sources:
            rankings["title"] = title_rows(named or self.linker.link_batch(questions),
                                           self.title_pages, dense[1])
        gather = np.concatenate(list(rankings.values()), axis=1)
        stages.lap("seeds")
        k = min(cfg.k, self.n_psg)
        want = max(k, cfg.rerank_candidates if reranker else 0, depth) + gather.shape[1]
        hop = (cfg.second_hop_weight > 0 or cfg.second_hop_expansions > 0
               or cfg.shared_entity_weight > 0)
        best_depth = max(k, second_hop.FIRST_DEPTH) if hop else k
        fused = None
        if on_device is not None:  # reset, walk, fusion and top-k on the device
            fused = on_device(self, reset, dense, rankings, cfg, want=want, depth=depth,
                              sources=sources, best=best_depth)
            cand, score, relevance, head = fused.cand, fused.score, fused.relevance, fused.head
            stages.lap("walk")
        else:
            # A reranker gets the PPR scores recorded around the candidates (top-k and
            # gathered rows) for its subgraph fanout, never the (q, n) rows.
            top = walk(self.ppr, self.graph, reset, n_ent=self.n_ent, n_psg=self.n_psg,
                       k=want, gather=gather, damping=cfg.damping, tol=cfg.ppr_tol,
                       method=cfg.ppr_method, eps=cfg.push_eps,
                       push_min_edges=cfg.push_min_edges, push_max_seeds=cfg.push_max_seeds,
                       local_fanout=self._fanout(reranker) if reranker is not None else None)
            stages.lap("walk")
            cand, score = candidate_scores(top, gather, dense, cfg.dense_blend)
            relevance = score.copy()  # before the head is lifted and the ranking fused
            head = None
            if cfg.dense_head:
                head = head_rows(rankings, best_candidates(cand, score, depth)[0],
                                 sources=sources, mode=cfg.head_mode, head=cfg.dense_head,
                                 n=self.n_psg)
                lift_head(cand, score, head, head.shape[1])
        stages.lap("fusion")
        if reranker is not None:
            score = rerank_stage(reranker, qvecs, cand, score, top.local, dense,
                                 min(cfg.rerank_candidates, self.n_psg))
            stages.lap("rerank")
        first, first_scores = (fused.best if fused is not None
                               else best_candidates(cand, score, best_depth))
        if hop:
            top_rows, top_scores = self.bridge_pages.rerank(
                first, first_scores, qvecs, questions, cfg, k,
                head=first[:, :cfg.dense_head] if reranker is not None else head,
                tokens=tokens, linked=named, stages=stages, further=chain_rounds)
        else:
            top_rows, top_scores = first, first_scores
        top_scores = shown_scores(top_rows, cand, relevance)
        stages.lap("second_hop")
        paths = self.batch_paths(seeds, top_rows)
        shown = seeds.lists(len(questions), self.entity_names)
        extras = [{"seeds": s, "paths": p} for s, p in zip(shown, paths, strict=True)]
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
        # a frozen plan (Index.query_batch passes the same one again) is resolved once
        held = getattr(self, "_for_corpus", None)
        if held is not None and held[0] is cfg and held[1] is self.__dict__.get("_bridge_pages"):
            return held[2]
        if self.bridged(cfg):
            out = dataclasses.replace(cfg, head_mode="fused")
        else:
            out = dataclasses.replace(cfg, head_mode="union",
                                      lexical_weight=cfg.lexical_weight_unbridged)
        if type(cfg).__dataclass_params__.frozen:
            self._for_corpus = (cfg, self.__dict__.get("_bridge_pages"), out)
        return out

    @property
    def title_entity(self) -> np.ndarray:
        """Per passage row, the entity its title names (-1 when none)."""
        def read() -> np.ndarray:
            m = self.dir.table(layout.MENTIONS, columns=["entity", "chunk", "label"])
            m = m[m["label"] == "TITLE"]
            out = np.full(self.n_psg, -1, np.int64)
            out[m["chunk"].to_numpy(np.int64)] = m["entity"].to_numpy(np.int64)
            return out

        return built_once(self, "_title_entity", read)

    @property
    def bridge_pages(self) -> second_hop.BridgePages:
        """The second hop's bridge pages (built on first use)."""
        return built_once(self, "_bridge_pages", lambda: second_hop.BridgePages(self))

    def _reranker(self, cfg: QueryConfig):
        """The reranker ``cfg.rerank`` names (e.g. ``"gat"``), or None."""
        if cfg.rerank in ("", "none"):
            return None
        return self.reranker_for(cfg.rerank, self, cfg.gat_checkpoint)

    @staticmethod
    def _fanout(reranker) -> tuple[int, ...]:
        return tuple(getattr(reranker, "fanout", DEFAULT_FANOUT))

    # -- provenance ---------------------------------------------------------------------
    def paths(self, seeds: list[SeedEntity], top_rows: np.ndarray) -> list[EntityPath]:
        """For each top passage, a chain seed entity [-> linked entity] that reaches it."""
        table = SeedTable.empty().extend(np.zeros(len(seeds), np.int64),
                                         [s.entity_id for s in seeds],
                                         np.zeros(len(seeds)), "entity")
        return self.batch_paths(table, np.asarray(top_rows, np.int64)[None, :])[0]

    def batch_paths(self, seeds: SeedTable, top_rows: np.ndarray) -> list[list[EntityPath]]:
        """Per question, for each of its returned passages (``top_rows``, ``(q, k)``, -1
        padded), a chain seed entity [-> linked entity] that reaches it
        (:func:`gpurag.query.paths.path_lists`)."""
        return path_lists(seeds.q, seeds.entity, top_rows, self.mentions,
                          self.entity_adjacency, self.entity_names, self.chunk_ids)
