"""The public face: ``Index.build``, ``Index.open``, ``index.query``, ``index.query_batch``."""

from __future__ import annotations

import dataclasses
import functools
import os
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpurag.config import (
    IndexConfig,
    build_plan,
    load_config,
    query_plan,
    stored_plan,
)
from gpurag.embed import DEFAULT_EMBEDDER
from gpurag.errors import ConfigError, InputError
from gpurag.once import built_once, once_property
from gpurag.profile import get_profile
from gpurag.query.results import Passage, QueryResult
from gpurag.query.timing import Stages
from gpurag.runtime import Runtime
from gpurag.store import checks, layout, open_index_dir
from gpurag.vectors.codec import decode_all
from gpurag.vectors.masked import drop_rows

MODES = ("dense", "bm25", "graph", "global")
PLAN_MEMO = 64  # query plans an Index keeps (by config fields and options), then starts over


@functools.cache
def _fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def trusted_embedder(recorded: str | None, given: str | None, path: Path) -> str | None:
    """The embedder spec a query may load: ``given`` by the caller, or the bundled model.

    An index directory is untrusted input, so a model path recorded in its manifest is never
    loaded on the manifest's word alone.
    """
    if given is not None:
        return given
    if recorded in (None, DEFAULT_EMBEDDER):
        return recorded
    raise ConfigError(
        f"index {path} was built with the embedder {recorded!r}; gpurag does not load a model "
        f"named only by an index's manifest. If you trust it, pass it yourself: "
        f"Index.open(path, embedder={recorded!r}) or gpurag query --embedder {recorded!r}")


class Index:
    """An opened gpurag index. Build one with :meth:`build`, open one with :meth:`open`.

    An opened index is pinned to the version it opened: a rebuild of the same path while it is
    held changes nothing it returns (see :mod:`gpurag.store.reader`).
    """

    def __init__(self, path: Path, verify: bool = False, embedder: str | None = None,
                 runtime: Runtime | None = None) -> None:
        self.dir = open_index_dir(path, verify=verify)
        self.path = self.dir.root
        self.manifest = self.dir.manifest
        self.config = stored_plan(self.manifest.config)  # IndexConfig + its build profile
        self.runtime = runtime or Runtime.create()
        self.device = self.runtime.device
        self.query_config = load_config()[1]  # defaults < $GPURAG_CONFIG file < GPURAG_QUERY_*
        self.chunks: pd.DataFrame = self.dir.table(layout.CHUNKS)
        checks.check_chunks(self.dir, self.chunks)
        # chunks a local delete removed stay rows (blank in ``chunks``); searches skip them
        self.deleted = self.dir.deleted_chunks()
        self.passage_index = self.dir.searchable(layout.PASSAGES_FAISS)
        checks.check_dense(self.dir, len(self.chunks), self.passage_index)
        self._embedder_given = embedder
        self._embedder = None
        self._retriever = None
        self.last_update = None  # the UpdateResult of the insert/delete that returned this

    # -- construction -------------------------------------------------------------------
    @classmethod
    def build(cls, source: str | os.PathLike | Iterable[str | dict[str, Any]],
              out: str | os.PathLike, config: IndexConfig | None = None,
              show_progress: bool = True, runtime: Runtime | None = None,
              cluster: Any = None, **overrides: Any) -> Index:
        """Index ``source`` into the directory ``out`` and open it. ``source``: a folder or
        file of documents, or the documents themselves: strings, or records
        ``{"id": ..., "text": ..., "title": ...}`` (``id`` and ``title`` optional; a text
        without an id gets ``doc-`` and a digest of its text). ``runtime``: device, backends,
        LLM settings (default from the environment). ``cluster``: ``"local:N"``, a Dask
        scheduler address or a ``distributed.Client`` to run chunk + embed and extraction
        on, for the same index byte for byte."""
        from gpurag.ingest.texts import is_texts, split_sources, texts_source
        from gpurag.pipeline.build import build

        runtime = runtime or Runtime.create()
        cfg = build_plan(config or IndexConfig(), overrides, "Index.build")
        if is_texts(source):
            paths, texts = split_sources(source)
            if paths:
                raise InputError("Index.build takes one folder or file, or a list of texts; "
                                 f"got a list of {len(paths)} paths (index one folder, or "
                                 "insert the others after)")
            with texts_source(texts, Path(out)) as path:
                built = build(path, out, cfg, show_progress=show_progress, runtime=runtime,
                              source_label="<texts given to Index.build>",
                              cluster=cluster)
        else:
            built = build(source, out, cfg, show_progress=show_progress, runtime=runtime,
                          cluster=cluster)
        index = cls(built, embedder=cfg.embedder, runtime=runtime)
        if cfg.rerank_decision:  # rerank="auto": whether the GAT pays here, recorded
            from gpurag.rerank import auto

            index.manifest.extra = auto.record(built, auto.decide(index)).extra
        return index

    @classmethod
    def open(cls, path: str | os.PathLike, verify: bool = False,
             embedder: str | None = None, runtime: Runtime | None = None) -> Index:
        """Open an index directory.

        Opening checks the sha256 of the small files and block CRCs of the large ones;
        ``verify`` checks the sha256 of every file. ``embedder`` names the query embedder
        (needed when the index was built with a model other than the bundled one).
        ``runtime``: device and backends (default from the environment).
        """
        return cls(Path(path), verify=verify, embedder=embedder, runtime=runtime)

    # -- incremental updates ------------------------------------------------------------
    def insert(self, sources: str | os.PathLike | list[str | os.PathLike]
               | Iterable[str | dict[str, Any]], show_progress: bool = True,
               exact: bool = False) -> Index:
        """Add the documents under ``sources`` (files or folders, or, as for :meth:`build`,
        the documents themselves: strings or ``{"id", "text", "title"}`` records) as a new
        version of this index and return it opened; this object stays pinned to its own
        version.

        Like :meth:`delete`, it updates the path's current version (under its write lock),
        whichever version this object reads. Only the new documents are chunked, embedded and
        extracted. By default the graph is updated locally (cost follows the new documents;
        answers within a stated tolerance of a full build, ``manifest.extra["incremental"]``
        says so, :meth:`compact` restores the full build); ``exact=True`` re-derives it over
        all chunks, so the result equals a full build of the union byte for byte. Documents
        whose id is already indexed are skipped and reported (``last_update.skipped``).
        """
        from gpurag.ingest.texts import split_sources, texts_source
        from gpurag.pipeline.updates import insert_documents

        if isinstance(sources, (str, os.PathLike)):
            sources = [sources]
        paths, texts = split_sources(sources)
        spec = trusted_embedder(self.config.embedder, self._embedder_given, self.path)
        if texts:
            with texts_source(texts, self.path) as path:
                result = insert_documents(self.path, [path], runtime=self.runtime,
                                          embedder=spec, show_progress=show_progress,
                                          exact=exact)
        else:
            result = insert_documents(self.path, paths, runtime=self.runtime,
                                      embedder=spec, show_progress=show_progress, exact=exact)
        return self._reopened(result)

    def compact(self, show_progress: bool = True) -> Index:
        """Rebuild the graph of a locally updated index from what it holds, giving the full
        build's files byte for byte; returns it opened (``last_update.version`` None when
        the index already was a full build's)."""
        from gpurag.pipeline.incremental_local import compact_index

        spec = trusted_embedder(self.config.embedder, self._embedder_given, self.path)
        return self._reopened(compact_index(self.path, runtime=self.runtime, embedder=spec,
                                            show_progress=show_progress))

    def delete(self, doc_ids: list[str], show_progress: bool = True,
               exact: bool = False) -> Index:
        """Remove the documents ``doc_ids`` and everything only they supported (chunks,
        vectors, mentions, relations, facts, entities) as a new version; returns it opened.
        By default a local update (as :meth:`insert`): the removed chunks are tombstoned (ids
        kept: their rows of :attr:`chunks` are blank, no query returns them) and the chunk
        table, vector files and stored extraction are kept, not rewritten, so **their text
        stays on disk until** :meth:`compact` (to delete for privacy, compact after), and so
        do the words only they used in the BM25 vocabulary (``lexical/vocab.index.json``,
        lower-case tokens; no passage holds them, so they match nothing);
        ``exact=True``: a full build's bytes. Either way the embedding cache beside the index
        (``.NAME.embcache``, or ``GPURAG_EMBED_CACHE``) keeps the deleted text's vectors, even
        after compact (remove that folder to clear it), and the manifest of the delete's
        version names the deleted document ids (``extra["change"]``), not their text."""
        from gpurag.pipeline.updates import delete_documents

        if isinstance(doc_ids, str):
            doc_ids = [doc_ids]
        spec = trusted_embedder(self.config.embedder, self._embedder_given, self.path)
        result = delete_documents(self.path, list(doc_ids), runtime=self.runtime,
                                  embedder=spec, show_progress=show_progress, exact=exact)
        return self._reopened(result)

    def _reopened(self, result: Any) -> Index:
        new = Index(self.path, embedder=self._embedder_given, runtime=self.runtime)
        new.last_update = result
        return new

    def __repr__(self) -> str:
        counts = self.manifest.counts or {}
        graph = (f"graph of {counts.get('entities', 0):,} entities"
                 if self.dir.has(layout.ENTITIES) else "dense only")
        return (f"<gpurag.Index {str(self.path)!r}: {counts.get('documents', 0):,} documents, "
                f"{counts.get('chunks', len(self.chunks)):,} chunks, {graph}, "
                f"embedder {self.config.embedder!r}, built {self.manifest.created}>")

    def close(self) -> None:
        """Release the files of the opened version now (also done when collected). Results
        made before still give their deferred chains: the evidence tables unread ones need
        are loaded first."""
        if self._retriever is not None:
            from gpurag.query.evidence import keep_owed_chains

            keep_owed_chains(self._retriever)
        self.dir.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- parts --------------------------------------------------------------------------
    @property
    def embedder(self):
        """The query embedder (loaded on first use, once however many threads ask)."""
        return built_once(self, "_embedder", self._load_embedder)

    def _load_embedder(self):
        spec = trusted_embedder(self.config.embedder, self._embedder_given, self.path)
        embedder = self.runtime.embedder_for(spec, cache=False)
        if embedder.dim != self.passage_index.d:
            raise ConfigError(f"embedder {spec or DEFAULT_EMBEDDER!r} gives {embedder.dim}-"
                              f"dimensional vectors, index {self.path} holds "
                              f"{self.passage_index.d}-dimensional ones")
        return embedder

    def passage_vectors(self) -> np.ndarray:
        """``(chunks, d)`` float32 passage vectors as stored (decoded from the FAISS file)."""
        return decode_all(self.passage_index)

    @once_property
    def passage_search(self) -> Any:
        """What dense passage search runs on: the FAISS index on the CPU, a device searcher
        made once from it on cuda (the runtime's ``searcher``)."""
        return self.runtime.searcher(self.passage_index)

    @property
    def retriever(self):
        """The knowledge-graph retriever (loaded on first use), or None for dense-only indexes."""
        if self._retriever is None and not self.dir.has(layout.ENTITIES):
            return None
        return built_once(self, "_retriever", self._open_retriever)

    def _open_retriever(self):
        checks.check_graph(self.dir, len(self.chunks))
        from gpurag.query.graph import GraphRetriever

        return GraphRetriever(self.dir, self.chunks, self.runtime,
                              passage_index=self.passage_index)

    @property
    def lexical(self):
        """BM25 over the passages (mode ``bm25``): the copy a graph build saved, else one
        built from the chunks on first use."""
        if self.retriever is not None:
            return self.retriever.lexical
        from gpurag.query.lexical import BM25Index

        return built_once(self, "_lexical",
                          lambda: BM25Index.over_live(self.chunks, self.deleted))

    @property
    def graph(self):
        """Deprecated alias of :attr:`retriever` (it never held the graph itself)."""
        warnings.warn("Index.graph is deprecated: use Index.retriever", DeprecationWarning,
                      stacklevel=2)
        return self.retriever

    def info(self) -> dict[str, Any]:
        """Manifest facts (see :func:`gpurag.info.manifest_info`), with config and extra."""
        from gpurag.embed.cache import cache_stats
        from gpurag.info import manifest_info

        return {**manifest_info(self.manifest, self.path), "config": self.manifest.config,
                "extra": self.manifest.extra,
                "embed_cache": cache_stats(layout.sibling(self.path,
                                                          layout.EMBED_CACHE_SUFFIX))}

    # -- queries ------------------------------------------------------------------------
    def query(self, question: str, k: int | None = None, mode: str | None = None,
              **options: Any) -> QueryResult:
        """Answer one question: a batch of one."""
        return self.query_batch([question], k=k, mode=mode, **options)[0]

    def query_batch(self, questions: list[str], k: int | None = None, mode: str | None = None,
                    **options: Any) -> list[QueryResult]:
        """Retrieve the top-``k`` passages for each question, batched end to end (``k``
        default: the query config's, i.e. ``GPURAG_QUERY_K`` or ``[query] k``, else 5).

        ``mode="global"``: corpus-wide questions answered from the communities of ``level``
        (option, default 0) without an LLM: the top ``communities`` (option, default 5) by
        relevance, with key entities, central passages and an extractive summary
        (``QueryResult.communities``); with ``llm=`` an ``LLMClient``, an ``LLMConfig`` or
        ``True`` (the server ``GPURAG_LLM_URL`` names) a lazy map-reduce over just those
        communities' reports fills ``answer``.

        ``evidence=False`` skips the evidence chains of graph results (``QueryResult.chains``,
        :mod:`gpurag.query.evidence`), which never change the ranking. Every result of an index
        with a graph has an absolute ``confidence`` (:mod:`gpurag.query.confidence`);
        ``min_confidence=c`` returns no passages for a question whose confidence is below c."""
        if k is None:
            k = self.query_config.k
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ConfigError(f"k must be a whole number of at least 1, not {k!r}")
        k = int(k)
        if mode == "global" or (mode is None and self.query_config.mode == "global"):
            return self._global(questions, k, dict(options))
        evidence = bool(options.pop("evidence", True))
        min_confidence = options.pop("min_confidence", None)
        if min_confidence is not None and not 0.0 <= float(min_confidence) <= 1.0:
            raise ConfigError(f"min_confidence must be within [0, 1], not {min_confidence!r}")
        cfg_mode, plan = self._query_plan({"k": k, **options})
        mode = mode or (cfg_mode if self.retriever is not None else "dense")
        if plan.rerank == "auto":  # what it stands for on this index (gpurag.rerank.auto)
            from gpurag.rerank.auto import settle

            plan = settle(self, plan, mode)
        if mode not in MODES:
            raise ConfigError(f"unknown query mode {mode!r}: use one of {', '.join(MODES)}")
        if mode == "graph" and self.retriever is None:
            raise ConfigError(f"index {self.path} has no knowledge graph: use --mode dense "
                              "or rebuild it with the graph stage on")
        questions = [str(q) for q in questions]
        if not questions:
            return []
        t0 = time.perf_counter()
        qvecs = (self.embedder.encode(questions, batch_size=64) if mode != "bm25"
                 else None)  # bm25: lexical only, no question vectors
        embed_ms = (time.perf_counter() - t0) * 1000 / len(questions)
        t0 = time.perf_counter()
        stages = Stages()
        if mode == "bm25":
            scores, rows = self.lexical.search(questions, k)
            extras = [{} for _ in questions]
            stages.lap("bm25")
        elif mode == "dense":
            from gpurag.query.dense import dense_scores

            scores, rows = dense_scores(self.passage_search, qvecs, k)
            extras = [{} for _ in questions]
            stages.lap("dense")
        else:
            scores, rows, extras = self.retriever.retrieve(questions, qvecs, plan,
                                                           self.passage_search, stages)
        if self.deleted.size:  # what a local delete removed is never returned, in any mode
            scores, rows = drop_rows(np.asarray(scores), np.asarray(rows), self.deleted)
        search_ms = (time.perf_counter() - t0) * 1000 / len(questions)
        timings = {"embed": embed_ms, "retrieve": search_ms,
                   **stages.per_question(len(questions))}
        results = [QueryResult(question=question, mode=mode, passages=passages,
                               seeds=extra.get("seeds", []), paths=extra.get("paths", []),
                               timings_ms=dict(timings))
                   for question, passages, extra in zip(
                       questions, self._passages_batch(rows, scores), extras, strict=True)]
        if self.retriever is not None and qvecs is not None:  # bm25 mode has no vectors
            from gpurag.query.confidence import defer_confidence

            defer_confidence(self, results, qvecs)
        if mode == "graph" and evidence:
            from gpurag.query.evidence import defer_chains

            defer_chains(self.retriever, results, rows)
        if min_confidence is not None:
            from gpurag.query.confidence import withhold

            withhold(results, float(min_confidence))
        return results

    def _query_plan(self, values: dict[str, Any]) -> tuple[str, Any]:
        """The query config's mode and :data:`~gpurag.config.QueryPlan` with ``values`` set
        (:func:`~gpurag.config.query_plan`), the same plan object again while the query
        config's fields, ``values`` and the profile its name picks are the same: a batch of
        one paid ~0.1 ms to copy and check them (issue 26)."""
        cfg = self.query_config
        try:
            # types too: 1, 1.0 and True are equal keys, yet a rule may take one and not another
            key = (type(cfg), get_profile(cfg.profile),
                   tuple((v.__class__, v) for v in map(cfg.__getattribute__, _fields(type(cfg)))),
                   tuple((k, v.__class__, v) for k, v in values.items()))
            plans = self.__dict__.setdefault("_plans", {})
            held = plans.get(key)
        except (TypeError, ConfigError):  # an unhashable value; a bad profile: as before
            key = held = None
        if held is None:
            qcfg, plan = query_plan(cfg, values, "query")
            held = (qcfg.mode, plan)
            if key is not None:
                if len(plans) >= PLAN_MEMO:
                    plans.clear()
                plans[key] = held
        return held

    def _global(self, questions: list[str], k: int, options: dict[str, Any]
                ) -> list[QueryResult]:
        from gpurag.query.generate import global_answers, global_results

        level = int(options.pop("level", 0))
        top = int(options.pop("communities", 5))
        llm = options.pop("llm", None)
        if options:
            raise ConfigError(f"query: {', '.join(sorted(options))} not valid with "
                              "mode='global' (it takes level, communities, llm)")
        questions = [str(q) for q in questions]
        if llm is None or llm is False:
            return global_results(self, questions, k=k, level=level, top=top)
        from gpurag.llm.client import LLMClient
        from gpurag.llm.config import LLMConfig, require_server

        if llm is True:  # the server GPURAG_LLM_URL names; never a localhost default
            llm = LLMClient(require_server(None))
        elif isinstance(llm, LLMConfig):
            llm = LLMClient(llm)
        return global_answers(self, questions, llm, level=level, communities=top, k=k)

    def _passages(self, rows: np.ndarray, scores: np.ndarray) -> list[Passage]:
        return self._passages_batch(np.asarray(rows)[None, :], np.asarray(scores)[None, :])[0]

    def _chunk_columns(self):
        """The shown columns of :attr:`chunks` (:class:`~gpurag.query.chunk_rows.ChunkColumns`),
        held while the table is the same object."""
        from gpurag.query.chunk_rows import ChunkColumns

        chunks = self.chunks
        return built_once(self, "_chunk_cols", lambda: ChunkColumns(chunks),
                          fresh=lambda held: held.chunks is chunks)

    def _passages_batch(self, rows: np.ndarray, scores: np.ndarray) -> list[list[Passage]]:
        """Per row of ``rows``/``scores`` (``(q, k)``, -1 padded), its passages: the chunks
        of the whole batch read in one take."""
        keep = rows >= 0
        flat = [
            Passage(rank=0, chunk_id=c, doc_id=d, title=t, text=x, char_start=int(s),
                    char_end=int(e), score=float(sc))
            for c, d, t, x, s, e, sc in zip(
                *self._chunk_columns().take(rows[keep]), scores[keep], strict=True)]
        out, start = [], 0
        for n in keep.sum(axis=1).tolist():
            row = flat[start:start + n]
            for r, p in enumerate(row):
                p.rank = r + 1
            out.append(row)
            start += n
        return out
