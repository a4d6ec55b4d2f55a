"""Extraction overlapped with chunking and embedding.

Rule-based extraction depends on the chunks alone, not on their vectors, so it need not wait
for the whole corpus to be embedded: :class:`ExtractAhead` receives each chunk checkpoint as
stage 1 writes it and extracts the chunks in worker processes while the main process embeds
the next batch (on a GPU build, the device embeds while the host extracts).

The batches are exactly those :func:`~gpurag.pipeline.graph_stage.run_extraction` cuts
(``batch_size`` rows from chunk row 0, the last one short), each extraction depends on its
batch alone, and each is checkpointed in order through the same
:func:`~gpurag.pipeline.graph_stage.checkpoint_extraction`: the work folder holds what an
extraction after stage 1 would hold, so a kill anywhere resumes as before, and
``run_extraction`` extracts whatever this did not (nothing, after :meth:`ExtractAhead.finish`).
At most two batches per worker are in flight: chunking waits for the oldest when the workers
fall behind, so memory stays bounded.

It runs only where the pool would: a CPU-bound extractor and a corpus of at least
``MIN_BATCHES_FOR_POOL`` batches (the workers start once that many rows are chunked), and only
on a build whose stage 1 starts from nothing (a resumed one extracts after stage 1, as before).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager

import pandas as pd

from gpurag.config import IndexConfig
from gpurag.extract.base import Extractor
from gpurag.pipeline.extract_pool import (
    MIN_BATCHES_FOR_POOL,
    _extract_in_worker,
    pool_workers,
    start_pool,
    worker_result,
)
from gpurag.pipeline.workdir import WorkDir

log = logging.getLogger(__name__)


class ExtractAhead:
    """Feed it each chunk checkpoint (:meth:`add`, in order), then :meth:`finish`."""

    def __init__(self, extractor: Extractor, work: WorkDir, workers: int,
                 batch_size: int, min_rows: int | None = None) -> None:
        from gpurag.pipeline.graph_stage import extract_state

        self.extractor, self.work, self.workers = extractor, work, workers
        self.batch_size = batch_size
        self.min_rows = batch_size * MIN_BATCHES_FOR_POOL if min_rows is None else min_rows
        self.buffer: list[pd.DataFrame] = []  # chunk rows from ``self.next_row`` on
        self.buffered = 0
        self.next_row = extract_state(work)["done_rows"]  # first row not yet submitted
        self.pending: deque[tuple[int, int, Future]] = deque()
        self.pool: ProcessPoolExecutor | None = None
        self.wait_s = 0.0

    @classmethod
    def for_build(cls, cfg: IndexConfig, work: WorkDir, show_progress: bool | None
                  ) -> ExtractAhead | None:
        """An ExtractAhead for this build, or None where extraction stays after stage 1: an
        LLM or imported-triples extraction, an extractor that is not CPU-bound or a setting
        that keeps it in this process, or a resumed stage 1."""
        from gpurag.pipeline.graph_stage import EXTRACT_BATCH, make_stage_extractor

        if not cfg.graph or cfg.triples or cfg.extractor.strip().lower() == "llm":
            return None
        chunked = work.state.get("chunk_embed", {})
        if chunked.get("parts", 0) or work.state.get("extract", {}).get("done_rows", 0):
            return None
        extractor = make_stage_extractor(cfg, None, show_progress)
        workers = pool_workers(extractor, 1 << 30)  # the corpus size is not known yet
        if workers <= 1:
            return None
        return cls(extractor, work, workers,
                   int(getattr(extractor, "batch_size", EXTRACT_BATCH)))

    def add(self, chunks: pd.DataFrame) -> None:
        """The next checkpoint's chunks (rows continue the previous ones)."""
        if len(chunks):
            self.buffer.append(chunks)
            self.buffered += len(chunks)
        self._collect(block=False)
        if self.pool is None and self.buffered < self.min_rows:
            return
        while self.buffered >= self.batch_size:
            self._submit(self.batch_size)

    def finish(self) -> None:
        """Submit the rest (the last, short batch too), checkpoint everything in order and
        stop the workers."""
        try:
            if self.pool is not None:
                while self.buffered:
                    self._submit(min(self.batch_size, self.buffered))
                while self.pending:
                    self._collect(block=True)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the workers (what is in flight is dropped: it is extracted again later)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        self.pending.clear()

    def _take(self, rows: int) -> pd.DataFrame:
        parts, need = [], rows
        while need:
            head = self.buffer[0]
            if len(head) <= need:
                parts.append(self.buffer.pop(0))
                need -= len(head)
            else:
                parts.append(head.iloc[:need])
                self.buffer[0] = head.iloc[need:]
                need = 0
        self.buffered -= rows
        return pd.concat(parts, ignore_index=True) if len(parts) > 1 else \
            parts[0].reset_index(drop=True)

    def _submit(self, rows: int) -> None:
        if self.pool is None:
            self.pool = start_pool(self.extractor, self.workers)
            log.info("extracting alongside chunk+embed in %d worker processes", self.workers)
        while len(self.pending) >= 2 * self.workers:  # bounded: wait for the oldest
            self._collect(block=True)
        start = self.next_row
        batch = self._take(rows)
        self.pending.append((start, len(batch), self.pool.submit(_extract_in_worker, batch,
                                                                 start)))
        self.next_row += len(batch)

    def _collect(self, block: bool) -> None:
        """Checkpoint finished batches, oldest first (the oldest one waited for if ``block``)."""
        from gpurag.pipeline.graph_stage import checkpoint_extraction

        while self.pending and (block or self.pending[0][2].done()):
            start, rows, future = self.pending[0]
            t = time.perf_counter()
            part = worker_result(future)
            self.wait_s += time.perf_counter() - t
            self.pending.popleft()
            checkpoint_extraction(self.work, start, rows, part)
            block = False


@contextmanager
def extraction_alongside(cfg: IndexConfig, work: WorkDir, show_progress: bool | None,
                         timings: dict[str, float]) -> Iterator[Callable[[pd.DataFrame], None]
                                                                | None]:
    """Around stage 1: gives the callback that takes each chunk checkpoint (None where
    extraction stays after stage 1), then waits for the extraction of the last batches
    (``timings["extract_ahead_wait_s"]``: the time stage 1's end waited for the workers)."""
    ahead = ExtractAhead.for_build(cfg, work, show_progress)
    try:
        yield ahead.add if ahead is not None else None
        if ahead is not None:
            t = time.perf_counter()
            ahead.finish()
            timings["extract_ahead_wait_s"] = time.perf_counter() - t
    finally:
        if ahead is not None:
            ahead.close()
