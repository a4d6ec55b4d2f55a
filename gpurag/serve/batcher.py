"""Micro-batching: concurrent requests share one ``Index.query_batch`` call.

Requests wait in a bounded queue. The dispatcher takes the first one, waits until the batch
window (counted from that request's arrival) has passed, then takes every waiting request that
fits in ``max_batch`` questions. Requests with the same settings (k, mode, options) are answered
by one ``query_batch`` call on a worker thread; each caller gets the slice of the results for its
own questions. If a shared call fails, each request of the group is rerun alone, so an error
reaches only the request that caused it. A batch reads the served index once when it starts:
a hot reload lands between batches. The results' deferred fields (confidence, evidence chains)
are computed on the worker thread, once per batch, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpurag.query.results import QueryResult
from gpurag.serve.metrics import Metrics

log = logging.getLogger(__name__)

Settings = tuple[int, str | None, tuple[tuple[str, Any], ...]]
# a job's results: (index version, its results, the index that ranked them: answer on that one)
Outcome = tuple[str, list[QueryResult], Any]


class OverloadedError(Exception):
    """The queue cannot take the request now (answered 503 with Retry-After)."""


@dataclass(eq=False)
class Job:
    """One request's questions, settings and the future its handler awaits."""

    questions: list[str]
    settings: Settings
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)


def settings_key(k: int, mode: str | None, options: dict[str, Any]) -> Settings:
    return (k, mode, tuple(sorted(options.items())))


class MicroBatcher:
    """Queues requests and answers them in batches on one worker thread."""

    def __init__(self, current: Callable[[], Any], metrics: Metrics, *,
                 batching: bool = True, window_s: float = 0.002, max_batch: int = 64,
                 max_queue: int = 256) -> None:
        self._current = current  # () -> an object with .index and .version
        self.metrics = metrics
        self.batching = batching
        self.window_s = window_s if batching else 0.0
        self.max_batch = max_batch if batching else 1
        self.max_queue = max_queue
        self._pending: deque[Job] = deque()
        self._waiting = 0  # questions in _pending
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="gpurag-query")

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="gpurag-batcher")

    async def stop(self) -> None:
        """Fail what still waits (nothing, after a graceful drain) and stop the worker."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        while self._pending:
            job = self._pending.popleft()
            if not job.future.done():
                job.future.set_exception(OverloadedError("the server is shutting down"))
        self._waiting = 0
        self.metrics.queue_depth = 0
        self._executor.shutdown(wait=True)

    # -- submitting ---------------------------------------------------------------------
    def submit(self, questions: list[str], k: int, mode: str | None,
               options: dict[str, Any]) -> asyncio.Future:
        """Queue the questions; the future resolves to ``(index version, results)``."""
        if self._wake is None:
            raise OverloadedError("the server is not ready")
        if self._waiting + len(questions) > self.max_queue:
            self.metrics.shed += 1
            raise OverloadedError(f"queue full ({self._waiting} questions waiting)")
        job = Job(list(questions), settings_key(k, mode, options),
                  asyncio.get_running_loop().create_future())
        self._pending.append(job)
        self._waiting += len(job.questions)
        self.metrics.queue_depth = self._waiting
        self._wake.set()
        return job.future

    # -- dispatching --------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.window_s > 0 and self._waiting < self.max_batch:
                delay = self._pending[0].arrived + self.window_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            batch = self._take()
            groups: dict[Settings, list[Job]] = {}
            for job in batch:
                groups.setdefault(job.settings, []).append(job)
            # once per batch, before its first group: a reload lands between batches, never
            # between two groups of one batch (which would answer it from two versions)
            served = self._current()
            for settings, jobs in groups.items():
                try:
                    outcomes = await loop.run_in_executor(self._executor, self._execute, served,
                                                          settings, jobs)
                except Exception as exc:  # the executor itself failed
                    outcomes = [exc] * len(jobs)
                for job, outcome in zip(jobs, outcomes, strict=True):
                    if job.future.done():  # timed out or cancelled meanwhile
                        continue
                    if isinstance(outcome, BaseException):
                        job.future.set_exception(outcome)
                    else:
                        job.future.set_result(outcome)

    def _take(self) -> list[Job]:
        """The first waiting request plus those that fit in ``max_batch`` questions."""
        batch: list[Job] = []
        size = 0
        while self._pending:
            job = self._pending[0]
            n = len(job.questions)
            if batch and size + n > self.max_batch:
                break
            self._pending.popleft()
            self._waiting -= n
            if job.future.done():  # its caller gave up while it waited
                continue
            batch.append(job)
            size += n
        self.metrics.queue_depth = self._waiting
        return batch

    def _execute(self, served: Any, settings: Settings,
                 jobs: list[Job]) -> list[Outcome | BaseException]:
        """One ``query_batch`` for all jobs; on failure, each job alone (worker thread).

        Each job's outcome is ``(index version, its results, the index that ranked them)``
        or the exception it caused.
        """
        k, mode, options = settings
        questions = [q for job in jobs for q in job.questions]
        t0 = time.perf_counter()
        try:
            results = served.index.query_batch(questions, k=k, mode=mode, **dict(options))
        except Exception as exc:
            if len(jobs) == 1:
                return [exc]
            log.info("batch of %d requests failed (%s): retrying each alone", len(jobs), exc)
            return [self._execute(served, settings, [job])[0] for job in jobs]
        # The results' deferred fields (confidence, evidence chains: one computation for the
        # whole batch) are filled here, on the worker thread: read first by the response on
        # the event loop, they would block every other request while one batch's ran.
        for result in results:
            result.resolve_deferred()
        self.metrics.batch(len(questions), time.perf_counter() - t0)
        out: list[Outcome | BaseException] = []
        start = 0
        for job in jobs:
            out.append((served.version, results[start:start + len(job.questions)],
                        served.index))
            start += len(job.questions)
        return out
