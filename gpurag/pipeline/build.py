"""The index build: chunk + embed, then the knowledge graph, then commit atomically."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpurag.backends.part import BuildRecord, implementation_name
from gpurag.config import IndexConfig, build_plan
from gpurag.device import package_version
from gpurag.errors import ConfigError, IndexFormatError, InputError
from gpurag.ingest.readers import file_digest, fingerprint_of_files, source_files
from gpurag.llm.config import LLMConfig
from gpurag.pipeline import checkpoints
from gpurag.pipeline.chunk_embed import run_chunk_embed
from gpurag.pipeline.extract_ahead import extraction_alongside
from gpurag.pipeline.progress import stage
from gpurag.pipeline.workdir import WorkDir
from gpurag.store import IndexWriter, WriteLock, layout
from gpurag.store.diskio import naming
from gpurag.store.writer import check_replaceable
from gpurag.vectors import build_index, save_index
from gpurag.vectors.codec import codec_for
from gpurag.vectors.faiss_index import faiss_implementation

if TYPE_CHECKING:  # the runtime is built at the edge and passed down
    from gpurag.runtime import Runtime

log = logging.getLogger(__name__)


# The settings each checkpointed stage's output depends on (gpurag.pipeline.workdir): a
# resume keeps every stage before the first whose settings changed.
CHUNK_EMBED_SETTINGS = ("embedder", "chunk_tokens", "chunk_overlap", "max_part_chars",
                        "vector_precision", "text_column", "follow_outside_links")
EXTRACT_SETTINGS = ("extractor", "triples", "llm_model", "llm_url")


def build_stage_inputs(source: str | Path, cfg: IndexConfig, llm: LLMConfig | None = None,
                       files: list[list[str]] | None = None) -> dict[str, dict[str, Any]]:
    """Per checkpointed stage, in pipeline order, what its checkpoints were made from
    (``llm``: the runtime's LLM settings, whose sampling changes an LLM extraction;
    ``files``: :func:`~gpurag.ingest.readers.source_files` of ``source``, if known)."""
    settings = dataclasses.asdict(cfg)
    if files is None:
        files = source_files(source, cfg.follow_outside_links)
    chunk_embed = {"source": fingerprint_of_files(files),
                   **{k: settings[k] for k in CHUNK_EMBED_SETTINGS}}
    extract = {k: settings[k] for k in EXTRACT_SETTINGS}
    if cfg.triples and Path(cfg.triples).is_file():
        extract["triples_file"] = file_digest(Path(cfg.triples))
    elif llm is not None and cfg.extractor.strip().lower() == "llm":
        extract["llm_sampling"] = llm.fingerprint()
    return {"chunk_embed": chunk_embed, "extract": extract,
            "rest": {k: v for k, v in settings.items()
                     if k not in CHUNK_EMBED_SETTINGS and k not in EXTRACT_SETTINGS}}


def check_target(out: Path) -> None:
    """Refuse, before any work, to write over something that is not a gpurag index, or over
    an index holding files gpurag did not write."""
    if out.exists() and not out.is_dir():
        raise IndexFormatError(f"cannot write the index to {out}: it is a file")
    if out.is_dir() and any(out.iterdir()) and not (out / layout.MANIFEST).exists():
        raise IndexFormatError(
            f"refusing to write the index into {out}: it exists and is not a gpurag index")
    check_replaceable(out)


def pin_llm(cfg: IndexConfig, runtime: Runtime) -> IndexConfig:
    """With LLM extraction, the config names the model and endpoint (from the runtime's LLM
    settings when it does not), so the build key and the manifest cover them."""
    if cfg.extractor.strip().lower() != "llm" or cfg.triples:
        return cfg
    llm = runtime.llm
    return dataclasses.replace(cfg, llm_model=cfg.llm_model or llm.model,
                               llm_url=cfg.llm_url or llm.url)


def build(source: str | Path, out: str | Path, cfg: IndexConfig | None = None,
          show_progress: bool = True, *, runtime: Runtime,
          source_label: str | None = None, cluster: Any = None) -> Path:
    """Build an index of ``source`` at ``out``; a killed build resumes where it stopped.

    The whole build holds the write lock of ``out``: a second build of the same path fails at
    once with :class:`~gpurag.errors.IndexBusyError` instead of sharing its work folder.
    ``runtime`` (made at the edge) gives the device, the parts and the LLM settings; what
    this build ran is recorded in its manifest, and nothing else.
    ``cluster`` (``local:N``, a Dask scheduler address or a ``distributed.Client``) runs
    chunk + embed and extraction as tasks on that cluster (:mod:`gpurag.pipeline.distributed`):
    the same index, byte for byte.
    """
    cfg = build_plan(pin_llm(cfg or IndexConfig(), runtime), source="build")
    out = Path(out).resolve()
    if out.exists() and not out.is_dir():
        raise IndexFormatError(f"cannot write the index to {out}: it is a file")
    with naming(out), WriteLock(out) as lock:
        return _build_locked(source, out, cfg, show_progress, lock, runtime,
                             source_label or str(source), cluster)


def write_dense_part(writer: IndexWriter, chunks, vectors, cfg: IndexConfig,
                     record: BuildRecord, timings: dict[str, float]) -> None:
    """The chunks table and the passage FAISS index (the one copy of the passage vectors,
    already in the stored precision) of a new version."""
    writer.write_table(layout.CHUNKS, chunks)
    t0 = time.perf_counter()
    codec = codec_for(cfg.vector_precision, vectors.shape[1])
    save_index(build_index(vectors, cfg.ivf_threshold, cfg.seed, codec=codec),
               writer.path(layout.PASSAGES_FAISS))
    record.record("vectors", faiss_implementation())
    timings["passage_index_s"] = time.perf_counter() - t0
    if cfg.graph:  # graph retrieval's lexical seeds and head: saved, not rebuilt per opening
        from gpurag.query.lexical import BM25Index

        t0 = time.perf_counter()
        BM25Index(chunks).save(writer.path(layout.LEXICAL_DIR))
        record.record("lexical", f"bm25s {package_version('bm25s') or ''}".strip())
        timings["lexical_index_s"] = time.perf_counter() - t0


def _build_locked(source: str | Path, out: Path, cfg: IndexConfig, show_progress: bool,
                  lock: WriteLock, runtime: Runtime, source_label: str,
                  cluster: Any = None) -> Path:
    record = BuildRecord()
    record.record("device", runtime.device)
    show = runtime.show_progress(show_progress)
    check_target(out)
    embedder = runtime.embedder_for(cfg.embedder,
                                cache_dir=layout.sibling(out, layout.EMBED_CACHE_SUFFIX))
    if cfg.chunk_tokens + 16 > embedder.max_tokens:  # checked before any folder is made
        raise ConfigError(f"chunk_tokens={cfg.chunk_tokens} does not fit the embedder's "
                          f"{embedder.max_tokens} tokens (with the title line)")
    files = source_files(source, cfg.follow_outside_links)
    work = WorkDir(out, build_stage_inputs(source, cfg, runtime.llm, files),
                   partial={"chunk_embed": checkpoints.keep_unchanged_files(files)})
    checkpoints.repair(work)
    if work.resumed:
        log.info("resuming the build in %s", work.root)
    record.record("embed", implementation_name(embedder))
    try:
        if cluster is not None:
            from gpurag.pipeline.distributed import Cluster

            with Cluster(cluster) as on:
                return _build_stages(source, out, cfg, show, lock, runtime, record, embedder,
                                     work, source_label, on)
        return _build_stages(source, out, cfg, show, lock, runtime, record, embedder, work,
                             source_label, files=files)
    except BaseException:
        if not work.has_progress():  # nothing a rerun would reuse: leave no hidden folder
            work.remove()
        else:
            log.info("the work done so far is kept in %s: the same command resumes it",
                     work.root)
        raise


def _build_stages(source: str | Path, out: Path, cfg: IndexConfig, show: bool | None,
                  lock: WriteLock, runtime: Runtime, record: BuildRecord, embedder,
                  work: WorkDir, source_label: str, cluster: Any = None,
                  files: list[list[str]] | None = None) -> Path:
    """The stages after the checks, in this process or (``cluster``) on a cluster."""
    timings: dict[str, float] = {}

    stage("index", f"{source} -> {out}", show)
    t0 = time.perf_counter()
    if cluster is None:
        with extraction_alongside(cfg, work, show, timings) as on_part:  # overlaps stage 1
            chunks, vectors, report = run_chunk_embed(source, embedder, cfg, work, show,
                                                      on_part=on_part, source_files=files)
            timings["chunk_embed_s"] = time.perf_counter() - t0
    else:
        chunks, vectors, report = cluster.run_chunk_embed(source, embedder, cfg, work, show)
        if cluster.embed_implementations - {implementation_name(embedder)}:
            record.record("embed", "+".join(sorted(cluster.embed_implementations)))
        timings["chunk_embed_s"] = time.perf_counter() - t0
    stage("read", report.summary(), show)
    if len(chunks) == 0:
        raise InputError(f"no usable text under {source}: {report.summary()}")

    writer = IndexWriter(out, lock=lock)
    try:
        stage("passage index", f"{len(chunks):,} chunks", show)
        write_dense_part(writer, chunks, vectors, cfg, record, timings)
        del vectors  # stored: not held through the graph stage
        counts = {"documents": report.documents, "chunks": len(chunks)}
        if cfg.graph:
            from gpurag.pipeline.graph_stage import run_graph_stage

            counts.update(run_graph_stage(chunks, embedder, cfg, work, writer, timings,
                                          runtime, record, show, cluster=cluster))
        stage("commit", str(out), show)
        writer.commit(
            config=dataclasses.asdict(cfg),
            counts=counts,
            components=record.as_dict(),
            extra={"ingest": report.as_dict(), "timings_s": timings, "source": source_label},
        )
    except BaseException:
        writer.abort()
        raise
    work.remove()
    log.info("indexed %s", report.summary())
    stage("index", f"done: {out}", show)
    return out
