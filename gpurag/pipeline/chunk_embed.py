"""Stage 1: stream documents, cut them into bounded parts and token windows, drop duplicate
chunks, embed, checkpoint.

A checkpoint holds at most ``ingest_batch_chunks // 2`` document parts and ``max_part_chars``
characters, so memory and the work a kill loses stay bounded even for one huge document.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpurag.config import IndexConfig
from gpurag.embed.base import Embedder
from gpurag.ingest import IngestReport, chunk_id, iter_documents, window_spans
from gpurag.ingest.formats import read_options
from gpurag.ingest.parts import DocPart, iter_parts
from gpurag.ingest.readers import Document
from gpurag.pipeline.progress import progress_bar
from gpurag.pipeline.workdir import WorkDir
from gpurag.vectors.codec import codec_for

log = logging.getLogger(__name__)

CHUNK_COLUMNS = ["chunk_id", "doc_id", "title", "text", "char_start", "char_end", "n_tokens"]


def embed_text(title: str, text: str, markup: str = "") -> str:
    """The string embedded for a chunk: its title line, then its text (for Markdown and
    reStructuredText, without markup and without a first line repeating the title)."""
    if markup:
        from gpurag.ingest.formats.markup import preview_text

        text = preview_text(title, text, markup) or text
    return f"{title}\n{text}" if title else text


def _batches(parts: Iterator[DocPart], size: int, max_chars: int) -> Iterator[list[DocPart]]:
    """Consecutive parts, at most ``size`` of them and ``max_chars`` characters a batch (a part
    is never longer than ``max_chars``)."""
    batch: list[DocPart] = []
    chars = 0
    for part in parts:
        if batch and chars + len(part.text) > max_chars:
            yield batch
            batch, chars = [], 0
        batch.append(part)
        chars += len(part.text)
        if len(batch) >= size:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def chunk_documents(
    docs: Sequence[Document | DocPart], embedder: Embedder, cfg: IndexConfig, seen: set[str]
) -> tuple[pd.DataFrame, int]:
    """Token-window chunks of ``docs`` (whole documents or parts of them: spans are in the
    original document's characters) not in ``seen`` (updated); returns (chunks, duplicates)."""
    offsets = embedder.token_offsets_batch([d.text for d in docs])
    rows: dict[str, list] = {c: [] for c in CHUNK_COLUMNS}
    duplicates = 0
    for doc, offs in zip(docs, offsets, strict=False):
        windows = window_spans(offs, cfg.chunk_tokens, cfg.chunk_overlap)
        base = getattr(doc, "offset", 0)
        for start, end, n_tokens in windows.tolist():
            text = doc.text[start:end]
            cid = chunk_id(text)
            if cid in seen:
                duplicates += 1
                continue
            seen.add(cid)
            for column, value in zip(CHUNK_COLUMNS, (cid, doc.doc_id, doc.title, text,
                                                     base + start, base + end, n_tokens),
                                     strict=False):
                rows[column].append(value)
    frame = pd.DataFrame(rows)
    types = {"char_start": "int64", "char_end": "int64", "n_tokens": "int32"}
    if frame.empty:  # every window a duplicate: text columns typed as a non-empty batch's
        text = pd.Series(["text"]).dtype
        types.update({c: text for c in ("chunk_id", "doc_id", "title", "text")})
    return frame.astype(types), duplicates


def run_chunk_embed(
    source: str | Path, embedder: Embedder, cfg: IndexConfig, work: WorkDir,
    show_progress: bool | None, *,
    documents: Callable[[IngestReport], Iterator[Document]] | None = None,
    seen_chunks: set[str] | None = None,
) -> tuple[pd.DataFrame, np.ndarray, IngestReport]:
    """Chunk and embed everything under ``source``; resumes from ``work`` checkpoints.

    ``documents`` (default: every document under ``source``) gives the documents from a report
    to fill; chunks whose id is in ``seen_chunks`` (an index's existing chunks) are duplicates.
    ``parts`` counts checkpoint files, ``units`` the document parts they hold (a resume skips
    that many), ``docs`` the documents finished."""
    stage = work.state.setdefault("chunk_embed", {"parts": 0, "units": 0, "docs": 0,
                                                   "duplicates": 0, "report": None,
                                                   "done": False})
    report = IngestReport()
    seen: set[str] = set(seen_chunks or ())
    for i in range(stage["parts"]):
        seen.update(pq.read_table(work.path(f"chunks/part-{i:05d}.parquet"),
                                  columns=["chunk_id"]).column(0).to_pylist())
    was_done = stage["done"]
    if not stage["done"]:
        docs = (documents(report) if documents is not None else
                iter_documents(source, report, cfg.follow_outside_links,
                               options=read_options(cfg)))
        parts = iter_parts(docs, cfg.max_part_chars)
        skip = stage["units"]
        if skip:
            log.info("resuming: %d documents (%d parts) already chunked and embedded",
                     stage["docs"], skip)
            for _ in range(skip):
                next(parts, None)
        bar = progress_bar(total=None, desc="chunk+embed", unit="doc", show=show_progress)
        bar.update(stage["docs"])
        n_chunks = len(seen)
        codec = codec_for(cfg.vector_precision, embedder.dim)  # vectors as they will be stored
        for batch in _batches(parts, max(1, cfg.ingest_batch_chunks // 2), cfg.max_part_chars):
            chunks, dups = chunk_documents(batch, embedder, cfg, seen)
            markup = {p.doc_id: p.markup for p in batch if p.markup}
            vectors = embed_chunks(chunks, embedder, cfg, codec, markup)
            part = stage["parts"]
            np.save(work.path(f"emb/part-{part:05d}.npy"), vectors, allow_pickle=False)
            pq.write_table(pa.Table.from_pandas(chunks, preserve_index=False),
                           work.path(f"chunks/part-{part:05d}.parquet"))
            finished = sum(p.last for p in batch)
            stage["parts"] += 1
            stage["units"] += len(batch)
            stage["docs"] += finished
            stage["duplicates"] += dups
            work.save()
            n_chunks += len(chunks)
            bar.update(finished)
            bar.set_postfix(chunks=n_chunks)
        bar.close()
        stage["done"] = True
        stage["report"] = report.as_dict()
        work.save()
    return read_chunk_embed(work, stage, embedder, report, was_done)


def embed_chunks(chunks: pd.DataFrame, embedder: Embedder, cfg: IndexConfig,
                 codec=None, markup: dict[str, str] | None = None) -> np.ndarray:
    """The vectors of ``chunks`` (title line + text; ``markup``: the markup of the documents
    that have one, by id), rounded to their stored precision."""
    codec = codec or codec_for(cfg.vector_precision, embedder.dim)
    markup = markup or {}
    return codec.round_trip(embedder.encode(
        [embed_text(t, x, markup.get(d, "")) for t, x, d in zip(
            chunks["title"], chunks["text"], chunks["doc_id"], strict=False)],
        batch_size=cfg.embed_batch_size,
    ))


def read_chunk_embed(work: WorkDir, stage: dict, embedder: Embedder, report: IngestReport,
                     was_done: bool) -> tuple[pd.DataFrame, np.ndarray, IngestReport]:
    """The finished stage's chunks, vectors and report, from its checkpoints."""
    chunks = _read_parts(work, stage["parts"])
    vectors = (
        np.concatenate([np.load(work.path(f"emb/part-{i:05d}.npy")) for i in range(stage["parts"])])
        if stage["parts"] else np.zeros((0, embedder.dim), dtype=np.float32)
    )
    if was_done:  # finished by an earlier run: its report, as saved
        report = IngestReport.from_dict(stage["report"] or {})
    report.skipped["duplicate chunks"] = stage["duplicates"]
    return chunks, vectors, report


def _read_parts(work: WorkDir, n_parts: int) -> pd.DataFrame:
    if not n_parts:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in CHUNK_COLUMNS})
    tables = [pq.read_table(work.path(f"chunks/part-{i:05d}.parquet")) for i in range(n_parts)]
    return pa.concat_tables(tables).to_pandas()
