"""Stage 1: stream documents, cut them into bounded parts and token windows, drop duplicate
chunks, embed, checkpoint.

A checkpoint holds at most ``ingest_batch_chunks // 2`` document parts and ``max_part_chars``
characters, so memory and the work a kill loses stay bounded even for one huge document.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpurag.config import IndexConfig
from gpurag.embed.base import Embedder
from gpurag.ingest import IngestReport, chunk_id, iter_documents
from gpurag.ingest.formats import read_options
from gpurag.ingest.parts import DocPart, iter_parts
from gpurag.ingest.readers import Document
from gpurag.pipeline.ahead import ahead
from gpurag.pipeline.checkpoints import chunk_part, count_chunk_part, emb_part, write_durably
from gpurag.pipeline.chunk_tokens import batch_windows, model_inputs_of_windows, tokenizes_once
from gpurag.pipeline.progress import progress_bar
from gpurag.pipeline.workdir import WorkDir
from gpurag.vectors.codec import codec_for

log = logging.getLogger(__name__)

PREPARE_AHEAD = 1  # batches read, cut and tokenized ahead of the one embedding

CHUNK_COLUMNS = ["chunk_id", "doc_id", "title", "text", "char_start", "char_end", "n_tokens"]
# Every checkpoint part has this schema, an empty one too (a batch whose chunks were all
# duplicates): inferred from an empty frame its text columns were null and no later part fit.
CHUNK_SCHEMA = pa.schema([("chunk_id", pa.string()), ("doc_id", pa.string()),
                          ("title", pa.string()), ("text", pa.string()),
                          ("char_start", pa.int64()), ("char_end", pa.int64()),
                          ("n_tokens", pa.int32())])


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
    chunks, duplicates, _ = chunk_batch(docs, embedder, cfg, seen)
    return chunks, duplicates


def chunk_batch(
    docs: Sequence[Document | DocPart], embedder: Embedder, cfg: IndexConfig, seen: set[str]
) -> tuple[pd.DataFrame, int, tuple[np.ndarray, np.ndarray] | None]:
    """:func:`chunk_documents`, plus the chunks' model inputs (``model_inputs``' layout) from
    the same tokenization when the embedder takes token ids (else None: embed the texts of
    :func:`embed_texts`)."""
    doc_texts = [d.text for d in docs]
    if tokenizes_once(embedder):
        ids, offsets, counts = embedder.token_ids_offsets(doc_texts)
    else:
        per_doc = embedder.token_offsets_batch(doc_texts)
        counts = np.fromiter((len(o) for o in per_doc), dtype=np.int64, count=len(per_doc))
        offsets = (np.concatenate(per_doc).reshape(-1, 2) if len(per_doc)
                   else np.zeros((0, 2), np.int64))
        ids = None
    win = batch_windows(counts, cfg.chunk_tokens, cfg.chunk_overlap)
    starts = offsets[win.start, 0].tolist()
    ends = offsets[win.stop - 1, 1].tolist()
    texts = [doc_texts[d][a:b] for d, a, b in zip(win.doc.tolist(), starts, ends, strict=True)]
    cids = [chunk_id(t) for t in texts]
    # new chunks: not seen before this batch, and the first of their id within it
    keep = (~pd.Series(cids, dtype=object).duplicated().to_numpy()
            & np.fromiter((c not in seen for c in cids), dtype=bool, count=len(cids)))
    kept = np.flatnonzero(keep)
    seen.update(cids[i] for i in kept)
    kept_docs = win.doc[kept].tolist()
    base = np.fromiter((getattr(d, "offset", 0) for d in docs), dtype=np.int64,
                       count=len(docs))[win.doc[kept]]
    frame = pd.DataFrame({
        "chunk_id": [cids[i] for i in kept],
        "doc_id": [docs[d].doc_id for d in kept_docs],
        "title": [docs[d].title for d in kept_docs],
        "text": [texts[i] for i in kept],
        "char_start": base + offsets[win.start[kept], 0],
        "char_end": base + offsets[win.stop[kept] - 1, 1],
        "n_tokens": win.stop[kept] - win.start[kept],
    }, columns=CHUNK_COLUMNS)
    frame = frame.astype({"char_start": "int64", "char_end": "int64", "n_tokens": "int32"})
    inputs = None
    if ids is not None:
        markup = np.fromiter((bool(getattr(docs[d], "markup", "")) for d in kept_docs),
                             dtype=bool, count=len(kept_docs))
        inputs = model_inputs_of_windows(
            embedder, ids, win, keep, frame["title"].tolist(), markup,
            lambda rows: embed_texts(frame.iloc[rows], docs))
    return frame, len(cids) - len(kept), inputs


def embed_texts(chunks: pd.DataFrame, docs: Sequence[Document | DocPart]) -> list[str]:
    """The strings embedded for ``chunks`` of ``docs`` (:func:`embed_text`)."""
    markup = {d.doc_id: d.markup for d in docs if getattr(d, "markup", "")}
    return [embed_text(t, x, markup.get(d, "")) for t, x, d in
            zip(chunks["title"], chunks["text"], chunks["doc_id"], strict=True)]


def run_chunk_embed(
    source: str | Path, embedder: Embedder, cfg: IndexConfig, work: WorkDir,
    show_progress: bool | None, *,
    documents: Callable[[IngestReport], Iterator[Document]] | None = None,
    seen_chunks: set[str] | None = None,
    on_part: Callable[[pd.DataFrame], None] | None = None,
    source_files: list[list[str]] | None = None,
) -> tuple[pd.DataFrame, np.ndarray, IngestReport]:
    """Chunk and embed everything under ``source``; resumes from ``work`` checkpoints.

    ``documents`` (default: every document under ``source``) gives the documents from a report
    to fill; chunks whose id is in ``seen_chunks`` (an index's existing chunks) are duplicates.
    ``parts`` counts checkpoint files, ``units`` the document parts they hold (a resume skips
    that many), ``docs`` the documents finished. ``on_part`` is given each new checkpoint's
    chunks once it is saved (:mod:`gpurag.pipeline.extract_ahead`). ``source_files``
    (:func:`gpurag.ingest.readers.source_files` of ``source``) is kept in the stage with, per
    part, the last input file it depends on (``reach``), so a rerun after one file changed
    keeps the parts made before it (:func:`gpurag.pipeline.checkpoints.keep_unchanged_files`).
    """
    stage = work.state.setdefault("chunk_embed", {"parts": 0, "units": 0, "docs": 0,
                                                   "duplicates": 0, "report": None,
                                                   "done": False})
    report = IngestReport()
    seen: set[str] = set(seen_chunks or ())
    for i in range(stage["parts"]):
        seen.update(pq.read_table(work.path(chunk_part(i)),
                                  columns=["chunk_id"]).column(0).to_pylist())
    was_done = stage["done"]
    track = documents is None and source_files is not None
    if track:
        stage["source_files"] = [list(f) for f in source_files]
    if not stage["done"]:
        file_at = [-1]  # the input file whose documents are being read
        docs = (documents(report) if documents is not None else
                iter_documents(source, report, cfg.follow_outside_links,
                               options=read_options(cfg),
                               on_file=lambda i: file_at.__setitem__(0, i)))
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
        # Batch i + 1 is read, cut and tokenized on a thread while batch i embeds; only this
        # thread embeds and checkpoints, in order (the producer alone updates ``seen``).
        reach = _Reach(parts, file_at, len(source_files or ()))
        prepared = ((batch, reach.of(batch) if track else None,
                     *chunk_batch(batch, embedder, cfg, seen)) for batch in
                    _batches(reach.tagged() if track else parts,
                             max(1, cfg.ingest_batch_chunks // 2), cfg.max_part_chars))
        with ahead(prepared, depth=PREPARE_AHEAD, name="gpurag-chunk") as ready:
            for batch, reached, chunks, dups, inputs in ready:
                vectors = embed_chunks(chunks, inputs, batch, embedder, cfg, codec)
                write_part(work, stage["parts"], chunks, vectors)
                finished = sum(p.last for p in batch)
                count_chunk_part(stage, len(batch), finished, dups, reach=reached)
                work.save()
                if on_part is not None:
                    on_part(chunks)
                n_chunks += len(chunks)
                bar.update(finished)
                bar.set_postfix(chunks=n_chunks)
        bar.close()
        stage["done"] = True
        stage["report"] = report.as_dict()
        work.save()
    return read_chunk_embed(work, stage, embedder, report, was_done)


class _Reach:
    """The input file index of each part ``_batches`` takes, so each batch knows the last
    input file it depends on: its last part's, or, where the batch was closed because the
    next part did not fit, that next part's; ``n_files`` (every file) for the final batch,
    closed by the end of the input."""

    def __init__(self, parts: Iterator[DocPart], file_at: list[int], n_files: int) -> None:
        self.parts, self.file_at, self.n_files = parts, file_at, n_files
        self.files: deque[int] = deque()
        self.ended = False

    def tagged(self) -> Iterator[DocPart]:
        for part in self.parts:
            self.files.append(self.file_at[0])
            yield part
        self.ended = True

    def of(self, batch: Sequence[DocPart]) -> int:
        last = -1
        for _ in batch:
            last = self.files.popleft()
        if self.files:  # closed by the next part, already taken
            return max(last, self.files[0])
        return self.n_files if self.ended else last


def embed_batch(batch: Sequence[DocPart], embedder: Embedder, cfg: IndexConfig,
                seen: set[str], codec=None) -> tuple[pd.DataFrame, np.ndarray, int]:
    """The chunks of ``batch`` not in ``seen`` (updated), their vectors as stored, and the
    number of duplicates dropped: one checkpoint part (here or on a cluster worker)."""
    chunks, dups, inputs = chunk_batch(batch, embedder, cfg, seen)
    return chunks, embed_chunks(chunks, inputs, batch, embedder, cfg, codec), dups


def embed_chunks(chunks: pd.DataFrame, inputs: tuple[np.ndarray, np.ndarray] | None,
                 batch: Sequence[DocPart], embedder: Embedder, cfg: IndexConfig,
                 codec=None) -> np.ndarray:
    """The vectors, as stored, of ``chunks`` of ``batch`` (``inputs``: their model inputs
    from :func:`chunk_batch`, or None to embed their texts)."""
    codec = codec or codec_for(cfg.vector_precision, embedder.dim)
    if inputs is not None and hasattr(type(embedder), "encode_inputs_for"):
        fresh = embedder.encode_inputs_for(embed_texts(chunks, batch), *inputs,
                                           batch_size=cfg.embed_batch_size)  # cache: by text
    elif inputs is not None:  # the chunker's token ids: tokenized once
        fresh = embedder.encode_tokens(*inputs, batch_size=cfg.embed_batch_size)
    else:
        fresh = embedder.encode(embed_texts(chunks, batch), batch_size=cfg.embed_batch_size)
    return codec.round_trip(fresh)


def write_part(work: WorkDir, i: int, chunks: pd.DataFrame, vectors: np.ndarray,
               prefix: str = "") -> None:
    """Checkpoint part ``i`` (``prefix``: a cluster's shard not yet in order, ``shards/``)."""
    where = (f"{prefix}emb-{i:05d}.npy", f"{prefix}chunks-{i:05d}.parquet") if prefix else (
        emb_part(i), chunk_part(i))
    table = pa.Table.from_pandas(chunks, schema=CHUNK_SCHEMA, preserve_index=False)
    write_durably(work, where[0], lambda fh: np.save(fh, vectors, allow_pickle=False))
    write_durably(work, where[1], lambda fh: pq.write_table(table, fh))


def read_chunk_embed(work: WorkDir, stage: dict, embedder: Embedder, report: IngestReport,
                     was_done: bool) -> tuple[pd.DataFrame, np.ndarray, IngestReport]:
    """The finished stage's chunks, vectors and report, from its checkpoints."""
    chunks = _read_parts(work, stage["parts"])
    vectors = (
        np.concatenate([np.load(work.path(emb_part(i))) for i in range(stage["parts"])])
        if stage["parts"] else np.zeros((0, embedder.dim), dtype=np.float32)
    )
    if was_done:  # finished by an earlier run: its report, as saved
        report = IngestReport.from_dict(stage["report"] or {})
    if stage["duplicates"]:  # not "0 duplicate chunks" in every summary
        report.skipped["duplicate chunks"] = stage["duplicates"]
    else:
        report.skipped.pop("duplicate chunks", None)
    return chunks, vectors, report


def _read_parts(work: WorkDir, n_parts: int) -> pd.DataFrame:
    if not n_parts:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in CHUNK_COLUMNS})
    tables = [_as_chunk_schema(pq.read_table(work.path(chunk_part(i))))
              for i in range(n_parts)]
    return pa.concat_tables(tables).to_pandas()


def _as_chunk_schema(table: pa.Table) -> pa.Table:
    """A checkpoint part in :data:`CHUNK_SCHEMA` (an empty part an older build wrote with null
    columns is cast, so its resume does not fail on it again)."""
    if table.schema.equals(CHUNK_SCHEMA):
        return table
    if table.num_rows == 0:
        return CHUNK_SCHEMA.empty_table()
    return table.select(CHUNK_SCHEMA.names).cast(CHUNK_SCHEMA)
