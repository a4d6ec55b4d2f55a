"""Incremental updates: insert or delete documents, each committed as a new index version that
holds what a full build of the resulting corpus would.

The costly work is done only for what is new: an insert reads, chunks and embeds only the new
documents (their chunks appended after the existing ones, in the order a full build of
``old + new`` would give them) and extracts only the new chunks. The graph stage (alias
resolution, facts, CSR, Leiden, entity/fact vectors) is then re-run over the union from the
stored per-chunk extraction, with the stored surface-name and fact vectors (so only names and
facts not seen before are embedded). Communities are a full re-cluster (Leiden over the whole
entity graph: seconds for tens of thousands of passages); the manifest says so.

Extractors whose output for a chunk depends on its batch (the fast extractor drops a
sentence-initial word seen lower-case anywhere in its batch, and so do the LLM and the triples
import, whose output goes on top of it) are re-run from the first batch a change touches, on
the batch boundaries a full build uses, so the result equals a rebuild; an LLM's answers for
stored chunks then come from its response cache. Per-chunk extractors (an LLM or triples
alone) are never re-run on stored chunks.

Everything happens under the index's write lock and is committed atomically; a killed insert
leaves the previous version as it was and a rerun resumes its chunk+embed checkpoints.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gpurag.backends.part import BuildRecord, implementation_name
from gpurag.config import IndexConfig, stored_plan
from gpurag.embed.base import Embedder
from gpurag.errors import IndexFormatError, InputError
from gpurag.extract.base import Extraction, Extractor
from gpurag.ingest import IngestReport, iter_documents
from gpurag.ingest.formats import ReadOptions, read_options
from gpurag.ingest.readers import Document, source_fingerprint
from gpurag.pipeline import checkpoints
from gpurag.pipeline.build import write_dense_part
from gpurag.pipeline.chunk_embed import run_chunk_embed
from gpurag.pipeline.graph_stage import (
    EXTRACT_BATCH,
    batch_stats_frame,
    batch_stats_sums,
    make_stage_extractor,
    run_graph_stage,
)
from gpurag.pipeline.workdir import WorkDir
from gpurag.store import IndexWriter, WriteLock, layout, open_index_dir
from gpurag.store.reader import IndexDir
from gpurag.vectors.codec import decode_all

if TYPE_CHECKING:  # the runtime is built at the edge and passed down
    from gpurag.runtime import Runtime

log = logging.getLogger(__name__)

COMMUNITIES = "full re-cluster"
MAX_IDS_RECORDED = 1000
MAX_HISTORY = 50


@dataclass
class UpdateResult:
    """What one insert or delete did (``version``: the committed version, None if unchanged)."""

    op: str
    path: Path
    version: int | None
    documents: list[str] = field(default_factory=list)
    chunks: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    not_found: list[str] = field(default_factory=list)
    reextracted_chunks: int = 0
    embedded_texts: int = 0
    reused_vectors: int = 0
    timings_s: dict[str, float] = field(default_factory=dict)
    # the committed manifest's extra (what the CLI reports: no re-read of the manifest after
    # the write lock is released, when another writer's version may have replaced it)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """What the update did (the manifest's extra left out: the index holds it)."""
        out = dataclasses.asdict(dataclasses.replace(self, extra={}))
        out.pop("extra")
        out["path"] = str(self.path)
        return out


class KnownVectors:
    """An embedder that answers texts it already has vectors for (the stored surface names and
    facts) from memory and passes the rest to ``inner``; counts both."""

    def __init__(self, inner: Embedder, texts: Sequence[str], vectors: np.ndarray) -> None:
        self.inner = inner
        self.name, self.dim, self.max_tokens = inner.name, inner.dim, inner.max_tokens
        keys = pd.Index(np.asarray(texts, dtype=object))
        first = ~keys.duplicated()
        self._keys = keys[first]
        self._vectors = np.asarray(vectors, dtype=np.float32)[first]
        self.hits = 0
        self.misses = 0

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        rows = self._keys.get_indexer(pd.Index(np.asarray(texts, dtype=object)))
        known = rows >= 0
        out[known] = self._vectors[rows[known]]
        missing = np.flatnonzero(~known)
        if missing.size:
            out[missing] = self.inner.encode([texts[i] for i in missing], batch_size=batch_size)
        self.hits += int(known.sum())
        self.misses += int(missing.size)
        return out


@dataclass
class Stored:
    """The parts of the current version an update reuses."""

    config: IndexConfig
    manifest: Any
    chunks: pd.DataFrame
    vectors: np.ndarray
    extraction: Extraction | None  # None: not stored (older index), re-extract everything
    batch_stats: pd.DataFrame
    known_texts: list[str]
    known_vectors: np.ndarray


def load_stored(d: IndexDir) -> Stored:
    """Read the current version (tables into memory, arrays copied out of the pinned files)."""
    cfg = stored_plan(d.manifest.config)  # with the build profile the index was built with
    chunks = d.table(layout.CHUNKS)
    vectors = decode_all(d.faiss(layout.PASSAGES_FAISS))
    ex = None
    stats = batch_stats_frame([])
    texts: list[str] = []
    vecs: list[np.ndarray] = []
    if cfg.graph and d.has(layout.EXTRACT_MENTIONS) and d.has(layout.EXTRACT_RELATIONS):
        ex = Extraction(mentions=d.table(layout.EXTRACT_MENTIONS),
                        relations=d.table(layout.EXTRACT_RELATIONS))
        ex.descriptions = (d.table(layout.EXTRACT_DESCRIPTIONS)
                           if d.has(layout.EXTRACT_DESCRIPTIONS) else None)
        if d.has(layout.EXTRACT_STATS):
            stats = d.table(layout.EXTRACT_STATS)
        for rel, frame in ((layout.EXTRACT_MENTIONS, ex.mentions),
                           (layout.EXTRACT_RELATIONS, ex.relations),
                           (layout.EXTRACT_DESCRIPTIONS, ex.descriptions)):
            pos = frame["chunk"].to_numpy(np.int64) if frame is not None else np.zeros(0)
            if pos.size and (pos.min() < 0 or pos.max() >= len(chunks)):
                raise IndexFormatError(f"index {d.root} is inconsistent: {rel} names chunks "
                                       f"outside [0, {len(chunks)})")
    if d.deleted_chunks().size:  # tombstones: what stays, renumbered as a build numbers it
        chunks, vectors, ex = without_deleted(d.live_chunks(len(chunks)), chunks, vectors, ex)
    if cfg.graph:  # the stored names and facts with their vectors, decoded
        texts += d.table(layout.NAMES, columns=["name"])["name"].astype(str).tolist()
        vecs.append(decode_all(d.faiss(layout.NAMES_FAISS)))
        texts += d.table(layout.FACTS, columns=["text"])["text"].astype(str).tolist()
        vecs.append(decode_all(d.faiss(layout.FACTS_FAISS)))
    dim = vectors.shape[1] if vectors.ndim == 2 else 0
    known = np.concatenate(vecs) if vecs else np.zeros((0, dim), np.float32)
    if len(texts) != len(known):  # inconsistent files: reuse nothing rather than misalign
        texts, known = [], np.zeros((0, dim), np.float32)
    elif "" in texts:  # rows a delete blanked (their vectors kept, or zero): not reused
        used = np.asarray([t != "" for t in texts], bool)
        texts, known = [t for t in texts if t != ""], known[used]
    return Stored(cfg, d.manifest, chunks, vectors, ex, stats, texts, known)


def without_deleted(live: np.ndarray, chunks: pd.DataFrame, vectors: np.ndarray,
                    ex: Extraction | None) -> tuple[pd.DataFrame, np.ndarray, Extraction | None]:
    """The chunks ``live`` (bool by chunk id), their vectors and their stored extraction with
    chunk positions renumbered to ``0..live.sum()`` (the ids a full build of them gives); the
    rest of the extraction (its batch counters) as stored: every batch a compact reuses starts
    below the first deleted chunk (``exact_below``), where ids and positions agree."""
    new_pos = np.where(live, np.cumsum(live) - 1, -1)
    chunks = chunks[live].reset_index(drop=True)
    vectors = vectors[live]
    if ex is None:
        return chunks, vectors, None

    def renumbered(frame: pd.DataFrame | None) -> pd.DataFrame | None:
        if frame is None:
            return None
        pos = new_pos[frame["chunk"].to_numpy(np.int64)]
        ok = pos >= 0
        return frame[ok].assign(chunk=pos[ok].astype(frame["chunk"].dtype)).reset_index(
            drop=True)

    out = Extraction(mentions=renumbered(ex.mentions), relations=renumbered(ex.relations))
    out.descriptions = renumbered(getattr(ex, "descriptions", None))
    return chunks, vectors, out


# -- extraction -----------------------------------------------------------------------------
def _batch_size(extractor: Extractor) -> int:
    return int(getattr(extractor, "batch_size", EXTRACT_BATCH))


def _per_chunk(extractor: Extractor) -> bool:
    """Whether a chunk's extraction is its own, not its batch's (the extractor's ``per_chunk``:
    an LLM alone, triples alone; not on top of the rule-based extraction)."""
    return bool(getattr(extractor, "per_chunk", False))


def reuse_extraction(stored: Stored, new_pos: np.ndarray, keep_below: int,
                     keep_all_stats: bool = False) -> tuple[Extraction, pd.DataFrame]:
    """The stored extraction of chunks that stay, renumbered to their new positions
    (``new_pos[old]``, -1 for removed chunks), limited to new positions below ``keep_below``
    (the rest is re-extracted); and the per-batch counters of the batches kept."""
    ex = stored.extraction
    assert ex is not None

    def keep(frame: pd.DataFrame) -> pd.DataFrame:
        pos = new_pos[frame["chunk"].to_numpy(np.int64)]
        ok = (pos >= 0) & (pos < keep_below)
        return frame[ok].assign(chunk=pos[ok]).reset_index(drop=True)

    out = Extraction(mentions=keep(ex.mentions), relations=keep(ex.relations))
    desc = getattr(ex, "descriptions", None)
    out.descriptions = keep(desc) if desc is not None else None
    stats = stored.batch_stats
    if not keep_all_stats:
        stats = stats[stats["start"].to_numpy() < keep_below]
    return out, stats.reset_index(drop=True)


def extract_from(chunks: pd.DataFrame, extractor: Extractor, start: int, offset: int = 0
                 ) -> tuple[Extraction, pd.DataFrame]:
    """Extract ``chunks[start:]`` in batches on the boundaries a full build uses (multiples of
    the extractor's batch size from ``start``, itself such a multiple or the end of the kept
    chunks); ``offset``: the position of ``chunks``' first row in the index (a local insert
    passes only the new chunks)."""
    size = _batch_size(extractor)
    parts: list[Extraction] = []
    descs: list[pd.DataFrame] = []
    batches: list[dict[str, Any]] = []
    for a in range(start, len(chunks), size):
        part = extractor.extract(chunks.iloc[a : a + size].reset_index(drop=True),
                                 offset=a + offset)
        parts.append(part)
        desc = getattr(part, "descriptions", None)
        if desc is not None and len(desc):
            descs.append(desc)
        batches.append({"start": a + offset,
                        "stats": {k: int(v) for k, v in part.stats.items()}})
    ex = Extraction.concat(parts)
    ex.descriptions = pd.concat(descs, ignore_index=True) if descs else None
    return ex, batch_stats_frame(batches)


def join_extractions(kept: Extraction, kept_stats: pd.DataFrame, new: Extraction,
                     new_stats: pd.DataFrame) -> Extraction:
    """Kept then new extraction, with counters summed as a full build sums its batches'."""
    ex = Extraction.concat([kept, new])
    descs = [d for d in (getattr(kept, "descriptions", None), getattr(new, "descriptions", None))
             if d is not None and len(d)]
    ex.descriptions = pd.concat(descs, ignore_index=True) if descs else None
    stats = pd.concat([kept_stats, new_stats], ignore_index=True)
    ex.batch_stats = stats
    ex.stats = Counter(batch_stats_sums(stats))
    return ex


def update_extraction(stored: Stored, chunks: pd.DataFrame, new_pos: np.ndarray,
                      first_changed: int, extractor: Extractor, op: str
                      ) -> tuple[Extraction, int]:
    """The extraction of ``chunks`` (the new version's), reusing the stored one where a full
    build would give the same; returns it and how many chunks were (re-)extracted.

    ``first_changed``: the first new position whose chunk or batch differs from the stored
    version's (an insert: the old chunk count; a delete: the first removed chunk's position).
    """
    per_chunk = _per_chunk(extractor)
    if stored.extraction is None:
        start = 0
    elif per_chunk:
        start = len(chunks) if op == "delete" else first_changed
    else:  # chunks a local insert extracted in batches of their own are extracted again
        first_changed = min(first_changed, local_extraction_start(stored.manifest))
        start = (first_changed // _batch_size(extractor)) * _batch_size(extractor)
    start = min(start, len(chunks))
    if stored.extraction is None:
        kept, kept_stats = Extraction(), batch_stats_frame([])
        kept.descriptions = None
    else:
        kept, kept_stats = reuse_extraction(stored, new_pos, start,
                                            keep_all_stats=per_chunk and op == "delete")
    new, new_stats = extract_from(chunks, extractor, start)
    return join_extractions(kept, kept_stats, new, new_stats), len(chunks) - start


def local_extraction_start(manifest: Any) -> int | float:
    """The first chunk position a local insert extracted outside a full build's batches
    (``extra["incremental"]["exact_below"]``; infinity when there is none). Positions only
    move down on a delete, so the stored position is a safe bound in the new positions."""
    info = manifest.extra.get("incremental") or {}
    return int(info["exact_below"]) if "exact_below" in info else float("inf")


# -- commit ---------------------------------------------------------------------------------
def _version(manifest: Any) -> int:
    return int(manifest.extra.get("version", 1))


def _ids(ids: Sequence[str]) -> dict[str, Any]:
    ids = list(ids)
    out: dict[str, Any] = {"count": len(ids), "ids": ids[:MAX_IDS_RECORDED]}
    if len(ids) > MAX_IDS_RECORDED:
        out["ids_truncated"] = True
    return out


def commit_version(out: Path, lock: WriteLock, stored: Stored, chunks: pd.DataFrame,
                   vectors: np.ndarray, ex: Extraction | None, embedder: KnownVectors,
                   runtime: Runtime, record: BuildRecord, change: dict[str, Any],
                   timings: dict[str, float], show: bool | None,
                   work: WorkDir | None = None) -> dict[str, Any]:
    """Write the new version (dense part, then the graph stage over all chunks from ``ex``)
    and commit it atomically; returns the committed manifest's extra (``version``: its
    version number)."""
    cfg = stored.config
    manifest = stored.manifest
    version = _version(manifest) + 1
    writer = IndexWriter(out, lock=lock)
    try:
        write_dense_part(writer, chunks, vectors, cfg, record, timings)
        # documents read, as a build counts them (one whose chunks were all duplicates too)
        documents = int(manifest.counts.get("documents", stored.chunks["doc_id"].nunique()))
        documents += (change["documents_read"] if change["op"] == "insert"
                      else -change["documents"]["count"])
        counts = {"documents": documents, "chunks": len(chunks)}
        if cfg.graph:
            assert ex is not None
            counts.update(run_graph_stage(chunks, embedder, cfg, work, writer, timings,
                                          runtime, record, show, ex=ex))
        history = list(manifest.extra.get("history", []))[-(MAX_HISTORY - 1):]
        history.append({"version": version, "op": change["op"],
                        "documents": change["documents"]["count"],
                        "chunks": change.get("chunks", 0)})
        extra = {
            **{k: v for k, v in manifest.extra.items()
               if k not in ("timings_s", "change", "history", "parent", "incremental")},
            "timings_s": timings,
            "version": version,
            "parent": {"version": _version(manifest), "created": manifest.created,
                       "checksum": manifest.checksum},
            "change": change,
            "history": history,
            "communities": COMMUNITIES if cfg.graph else None,
        }
        components = {**manifest.components, **record.as_dict()}
        writer.commit(config=dict(manifest.config), counts=counts, components=components,
                      extra=extra)
    except BaseException:
        writer.abort()
        raise
    return extra


def _timed_extraction(stored: Stored, chunks: pd.DataFrame, new_pos: np.ndarray,
                      keep_below: int, op: str, runtime: Runtime, show: bool | None,
                      record: BuildRecord, timings: dict[str, float]):
    """:func:`update_extraction` with the stored config's extractor, recorded and timed."""
    t0 = time.perf_counter()
    extractor = _extractor(stored.config, runtime, show)
    record.record("extract", extractor.name)
    built_by = stored.manifest.components.get("extract")
    if built_by and built_by != extractor.name:
        log.warning("the stored chunks were extracted by %s, the changed ones are by %s: "
                    "rebuild the index to extract them all one way", built_by, extractor.name)
    out = update_extraction(stored, chunks, new_pos, keep_below, extractor, op)
    timings["extract_s"] = time.perf_counter() - t0
    return out


def _graph_embedder(stored: Stored, runtime: Runtime, spec: str | None) -> KnownVectors:
    return KnownVectors(runtime.embedder_for(spec), stored.known_texts, stored.known_vectors)


def _extractor(cfg: IndexConfig, runtime: Runtime, show: bool | None) -> Extractor:
    llm = runtime.llm if cfg.extractor.strip().lower() == "llm" and not cfg.triples else None
    return make_stage_extractor(cfg, llm, show)


# -- insert ---------------------------------------------------------------------------------
def new_documents(sources: Sequence[str | Path], existing: set[str], report: IngestReport,
                  follow_outside_links: bool = False,
                  options: ReadOptions | None = None) -> Iterator[Document]:
    """Documents of ``sources`` in order, skipping (and reporting) ids already in the index
    or already read from an earlier source."""
    taken = set(existing)
    for src in sources:
        for doc in iter_documents(src, report, follow_outside_links, options=options):
            if doc.doc_id in taken:
                report.documents -= 1
                reason = "already in the index" if doc.doc_id in existing else "duplicate id"
                report.skip(reason, doc.where or doc.source,
                            f"id {doc.doc_id!r} is already indexed; delete it first to replace "
                            "it" if doc.doc_id in existing else
                            f"id {doc.doc_id!r} was already used; the first one is kept")
                continue
            taken.add(doc.doc_id)
            yield doc


def insert_key(sources: Sequence[str | Path], manifest: Any) -> str:
    """The work-folder key of an insert of ``sources`` into the version ``manifest`` describes
    (a rerun of the same insert resumes its checkpoints)."""
    payload = json.dumps({"op": "insert", "sources": [source_fingerprint(s) for s in sources],
                          "parent": manifest.checksum or manifest.created,
                          "config": manifest.config}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass
class NewText:
    """What an insert read, chunked and embedded (:func:`chunk_embed_new`), exact or local."""

    chunks: pd.DataFrame
    vectors: np.ndarray
    report: IngestReport
    result: UpdateResult
    work: WorkDir
    record: BuildRecord
    timings: dict[str, float]


def chunk_embed_new(out: Path, old: pd.DataFrame, cfg: IndexConfig, manifest: Any,
                    sources: list[Path], runtime: Runtime, spec: str | None,
                    show: bool | None) -> NewText:
    """Read, chunk and embed the documents of ``sources`` not in ``old`` (the stored chunks),
    resumable in the insert's work folder; the set-up both insert paths share. With nothing
    new the work folder is removed (``chunks`` empty, ``result.version`` None)."""
    timings: dict[str, float] = {}
    record = BuildRecord()
    record.record("device", runtime.device)
    base = runtime.embedder_for(spec, cache_dir=layout.sibling(out, layout.EMBED_CACHE_SUFFIX))
    record.record("embed", implementation_name(base))
    work = WorkDir(out, insert_key(sources, manifest))
    checkpoints.repair(work)
    t0 = time.perf_counter()
    new_chunks, new_vectors, report = run_chunk_embed(
        sources[0], base, cfg, work, show,
        # tolist: a set over an Arrow-backed string column iterates it element by element
        documents=lambda r: new_documents(sources, set(old["doc_id"].astype(str).tolist()), r,
                                          cfg.follow_outside_links, read_options(cfg)),
        seen_chunks=set(old["chunk_id"].astype(str).tolist()))
    timings["chunk_embed_s"] = time.perf_counter() - t0
    skipped = {k: int(v) for k, v in report.skipped.items() if v}
    added = list(dict.fromkeys(new_chunks["doc_id"].astype(str)))
    result = UpdateResult("insert", out, None, documents=added, chunks=len(new_chunks),
                          skipped=skipped, timings_s=timings)
    if not len(new_chunks):
        work.remove()
        log.info("nothing new to insert: %s", report.summary())
    return NewText(new_chunks, new_vectors, report, result, work, record, timings)


def read_stored(out: Path) -> Stored:
    """What the committed index at ``out`` keeps for updates (read under the write lock)."""
    d = open_index_dir(out)
    try:
        return load_stored(d)
    finally:
        d.close()


def insert_locked(out: Path, lock: WriteLock, stored: Stored, sources: list[Path],
                   runtime: Runtime, spec: str | None, show: bool | None) -> UpdateResult:
    cfg = stored.config
    old = stored.chunks
    new = chunk_embed_new(out, old, cfg, stored.manifest, sources, runtime, spec, show)
    new_chunks, new_vectors, report, result = new.chunks, new.vectors, new.report, new.result
    work, record, timings = new.work, new.record, new.timings
    added = result.documents
    if not len(new_chunks):
        return result
    chunks = pd.concat([old, new_chunks], ignore_index=True)
    vectors = np.concatenate([stored.vectors, new_vectors.astype(np.float32)])
    embedder = _graph_embedder(stored, runtime, spec)
    ex = None
    if cfg.graph:
        ex, result.reextracted_chunks = _timed_extraction(
            stored, chunks, np.arange(len(old)), len(old), "insert", runtime, show, record,
            timings)
    change = {"op": "insert", "documents": _ids(added), "chunks": len(new_chunks),
              "documents_read": report.documents,
              "ingest": report.as_dict(), "sources": [str(s) for s in sources],
              "reextracted_chunks": result.reextracted_chunks}
    result.extra = commit_version(out, lock, stored, chunks, vectors, ex, embedder, runtime,
                                  record, change, timings, show, work)
    result.version = result.extra["version"]
    result.embedded_texts, result.reused_vectors = embedder.misses, embedder.hits
    work.remove()
    return result


# -- delete ---------------------------------------------------------------------------------
def documents_to_drop(chunks: pd.DataFrame, wanted: list[str], out: Path
                      ) -> tuple[list[str], list[str], np.ndarray]:
    """The ``wanted`` ids in the index, those not in it, and the mask of the chunks to remove;
    none found, or all of them, is an :class:`InputError`."""
    doc = chunks["doc_id"].astype(str)
    present = set(doc)
    found = [i for i in wanted if i in present]
    missing = [i for i in wanted if i not in present]
    if not found:
        raise InputError(f"delete: none of the {len(wanted)} document ids is in the index "
                         f"{out} (first: {wanted[0]!r})")
    drop = doc.isin(found).to_numpy()
    if drop.all():
        raise InputError(f"delete: removing {len(found)} documents would leave the index {out} "
                         "empty; delete the index directory instead")
    return found, missing, drop


def delete_locked(out: Path, lock: WriteLock, stored: Stored, wanted: list[str],
                   runtime: Runtime, spec: str | None, show: bool | None) -> UpdateResult:
    cfg = stored.config
    old = stored.chunks
    found, missing, drop = documents_to_drop(old, wanted, out)
    timings: dict[str, float] = {}
    record = BuildRecord()
    record.record("device", runtime.device)
    keep = ~drop
    new_pos = np.where(keep, np.cumsum(keep) - 1, -1)
    chunks = old[keep].reset_index(drop=True)
    vectors = stored.vectors[keep]
    result = UpdateResult("delete", out, None, documents=found, chunks=int(drop.sum()),
                          not_found=missing, timings_s=timings)
    embedder = _graph_embedder(stored, runtime, spec)
    ex = None
    if cfg.graph:
        ex, result.reextracted_chunks = _timed_extraction(
            stored, chunks, new_pos, int(np.flatnonzero(drop)[0]), "delete", runtime, show,
            record, timings)
    change = {"op": "delete", "documents": _ids(found), "chunks": int(drop.sum()),
              "not_found": missing[:MAX_IDS_RECORDED],
              "reextracted_chunks": result.reextracted_chunks}
    result.extra = commit_version(out, lock, stored, chunks, vectors, ex, embedder, runtime,
                                  record, change, timings, show)
    result.version = result.extra["version"]
    result.embedded_texts, result.reused_vectors = embedder.misses, embedder.hits
    return result


def read_ids_file(path: str | Path) -> list[str]:
    """The non-blank lines of an ``--ids-file``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"--ids-file {p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--ids-file {p}: cannot read it ({exc})") from None
    return [line.strip() for line in text.split("\n") if line.strip()]  # not splitlines: an
    # id may hold U+2028, \x0b, \x0c, \x1c-\x1e or \x85
