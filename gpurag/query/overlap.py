"""One helper thread beside the query: a stage that releases the GIL (a FAISS scan, the ONNX
question embedding) runs there while the calling thread does the stages that do not need its
result (BM25, linking), on the second core of a small machine.

:func:`ahead` starts ``fn(*args)`` on the process's one helper thread when that thread is
idle and returns a :class:`Pending`; its :meth:`Pending.result` waits for it. When the
helper is busy (another query's stage: the service's threads query at once), on a machine
with one core, or when the caller says the work is too small to hand over, the call runs on
the calling thread at :meth:`Pending.result` instead, as it would without the helper. Either
way the result is the one call's, so the query's results do not depend on where it ran.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
_IDLE = threading.Semaphore(1)  # taken while the helper runs a stage


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _reset_after_fork() -> None:
    """A forked child has no helper thread: it starts a new one on first use, with a new lock
    (the parent's may have been held by another of its threads at the fork: never released
    in the child) and a new idle flag."""
    global _LOCK, _POOL, _IDLE
    _LOCK = threading.Lock()
    _POOL = None
    _IDLE = threading.Semaphore(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(1, thread_name_prefix="gpurag-overlap")
        return _POOL


class Pending(Generic[T]):
    """A stage's result: computed on the helper thread, or here on :meth:`result`."""

    def __init__(self, fn: Callable[..., T], args: tuple, future: Future | None) -> None:
        self._fn, self._args, self._future = fn, args, future
        self._done = False
        self._value: Any = None

    @property
    def overlapped(self) -> bool:
        """Whether the call was handed to the helper thread."""
        return self._future is not None

    def result(self) -> T:
        """The call's result (its exception re-raised), waiting for the helper if it runs
        there, else computed now."""
        if not self._done:
            if self._future is not None:
                self._value = self._future.result()
            else:
                self._value = self._fn(*self._args)
            self._done = True
            self._fn = self._args = None  # type: ignore[assignment]
        return self._value


def _run(fn: Callable[..., T], args: tuple) -> T:
    try:
        return fn(*args)
    finally:
        _IDLE.release()


def ahead(fn: Callable[..., T], *args: Any, worth: bool = True) -> Pending[T]:
    """``fn(*args)`` started on the helper thread if ``worth`` (the caller's judgement that
    the call is long enough to hand over), the machine has more than one core and the helper
    is idle; else left to run on the calling thread when its result is asked for."""
    if worth and _cores() > 1 and _IDLE.acquire(blocking=False):
        try:
            future = _pool().submit(_run, fn, args)
        except RuntimeError:  # the pool shut down (the interpreter exiting): run it here later
            _IDLE.release()
            return Pending(fn, args, None)
        return Pending(fn, args, future)
    return Pending(fn, args, None)


__all__ = ["Pending", "ahead"]
