"""Extraction batches in worker processes, for the CPU-bound extractors.

A rule-based extractor's output for a batch depends on that batch alone, so batches can run in
any process and still give, in order, exactly what one process gives. The fast extractor runs a
few thousand chunks per second on one core: once embedding moves to a GPU, extraction on one
core is a sixth of a build (docs/SCALING.md). Extractors opt in with ``cpu_bound = True``; an
LLM extractor (network bound, already concurrent) and spaCy (one model per process) do not.
Workers are spawned, not forked: the parent holds onnxruntime and torch thread pools.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pandas as pd

from gpurag.config import bounded_workers
from gpurag.errors import GpuragError
from gpurag.extract.base import Extraction, Extractor

MIN_BATCHES_FOR_POOL = 16  # 8k chunks, ~1.3 s on one core; a worker takes ~1 s to start
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_POLL_S = 0.5
_worker_extractor: Extractor | None = None


class ExtractionWorkerError(GpuragError):
    """An extraction worker process ended without finishing its batch."""


def worker_result(future: Future) -> Extraction:
    """The extraction a worker returned; a worker that died (the operating system's
    out-of-memory killer, a signal) is an :class:`ExtractionWorkerError` saying what to do."""
    try:
        return future.result()
    except BrokenProcessPool as exc:
        raise ExtractionWorkerError(
            "an extraction worker process ended abruptly (killed by the operating system, "
            "most often for lack of memory); the batches extracted so far are kept and the "
            "same command resumes after them; GPURAG_EXTRACT_WORKERS=1 extracts in the "
            "build's own process, with less memory") from exc


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def main_module_is_guarded() -> bool:
    """Whether spawned workers can import ``__main__`` without running it: gpurag's command
    line, pytest, an interactive session or notebook. A user's script may call the build at
    its top level, without ``if __name__ == "__main__"``; a spawned worker would run it."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and (spec.name or "").split(".")[0] in ("gpurag", "pytest"):
        return True
    path = getattr(main, "__file__", None)
    return path is None or Path(path).name in ("gpurag", "pytest", "py.test")


def pool_workers(extractor: Extractor, n_batches: int, cap: int | None = None) -> int:
    """How many worker processes to extract ``n_batches`` with: 1 (in this process) unless the
    extractor is CPU-bound and there are enough batches to pay for starting workers.
    ``GPURAG_EXTRACT_WORKERS`` sets the number (1 turns the pool off); without it, a script of
    the user's keeps extraction in its own process (see :func:`main_module_is_guarded`)."""
    if not getattr(extractor, "cpu_bound", False) or n_batches < MIN_BATCHES_FOR_POOL:
        return 1
    from gpurag.settings import current

    asked = current().extract_workers
    if asked:
        wanted = bounded_workers(asked, "GPURAG_EXTRACT_WORKERS")
    elif main_module_is_guarded():
        wanted = cap or available_cores()
    else:
        return 1
    return max(1, min(wanted, n_batches))


def start_pool(extractor: Extractor, workers: int) -> ProcessPoolExecutor:
    """``workers`` spawned processes that extract with ``extractor`` and end with this one."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(extractor, os.getpid()))


def exit_with_parent(parent: int) -> None:
    """End this process once ``parent`` is gone, even if it was killed (SIGKILL, SIGTERM)
    and never shut its pool down: a worker waiting on its call queue would sleep forever.
    On Linux the kernel sends SIGKILL (``PR_SET_PDEATHSIG``); everywhere, a daemon thread
    exits once this process is re-parented."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:  # died before the line above took effect
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="gpurag-parent-watch", daemon=True).start()


def _init_worker(extractor: Extractor, parent: int | None = None) -> None:
    global _worker_extractor
    _worker_extractor = extractor
    if parent is not None:
        exit_with_parent(parent)


def _extract_in_worker(batch: pd.DataFrame, offset: int) -> Extraction:
    assert _worker_extractor is not None
    return _worker_extractor.extract(batch, offset=offset)


def extract_batches(chunks: pd.DataFrame, extractor: Extractor, start: int, batch_size: int,
                    workers: int = 1) -> Iterator[tuple[int, int, Extraction]]:
    """``(start, rows, extraction)`` of each batch of ``chunks`` from ``start``, in order.
    With ``workers > 1`` the batches run in that many spawned processes, at most two per
    worker in flight, so memory stays bounded and results are yielded (and checkpointed by
    the caller) as they come in order."""
    starts = range(start, len(chunks), batch_size)

    def batch(a: int) -> pd.DataFrame:
        return chunks.iloc[a : a + batch_size].reset_index(drop=True)

    if workers <= 1:
        for a in starts:
            part = batch(a)
            yield a, len(part), extractor.extract(part, offset=a)
        return
    with start_pool(extractor, workers) as pool:
        pending: deque[tuple[int, int, Future]] = deque()
        todo = iter(starts)
        for a in todo:
            part = batch(a)
            pending.append((a, len(part), pool.submit(_extract_in_worker, part, a)))
            if len(pending) >= 2 * workers:
                break
        while pending:
            a, rows, future = pending.popleft()
            nxt = next(todo, None)
            if nxt is not None:
                part = batch(nxt)
                pending.append((nxt, len(part), pool.submit(_extract_in_worker, part, nxt)))
            yield a, rows, worker_result(future)
