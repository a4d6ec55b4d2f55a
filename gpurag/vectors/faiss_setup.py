"""FAISS configured once per process: small query batches use BLAS (its default threshold of 20
sends 1-19 queries down a slow scalar path), and one thread count for every FAISS call of the
process: the runtime's ``threads`` setting (``GPURAG_THREADS``), else OpenMP's default.

The count is fixed on the first FAISS call, and never changes after: the last count a runtime
asked for before then (:func:`configure`, when the runtime is created), else ``GPURAG_THREADS``
or OpenMP's default; a runtime that asks for another count later is told, in a warning, that
it is not applied. OpenMP keeps it per thread (``nthreads-var`` is a per-task
setting, and a new thread starts at the library's default, not at what another thread set), so
each thread is put at the process's count the first time it calls FAISS, and never again: no
search changes a thread's count (a small one puts it back as it was), so the service's worker
threads, searching at once, all run at the one count and none can change another's.

A small search (fewer than ``SINGLE_THREAD_WORK`` query rows x indexed vectors) runs on one
OpenMP thread, where start-up and barriers would cost more than the scan: on the calling
thread, put at one OpenMP thread for the call (:func:`on_one_thread`). The results are those
of one thread, as before (BLAS splits a batch of 8 or more rows differently on two
threads, which changes the last bits of the scores).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from gpurag.config import threads_from_env

T = TypeVar("T")
_LOCK = threading.Lock()
_REQUESTED: int | None = None  # the runtime's setting, recorded by configure()
_THREADS = 0  # the process's FAISS thread count, fixed on the first FAISS call
_FAISS = None  # the faiss module, once configured
_LOCAL = threading.local()  # whether this thread was put at the process's count
SINGLE_THREAD_WORK = 2_000_000  # query rows x indexed vectors below which one thread is faster


def configure(threads: int | None = None) -> None:
    """Record the process's FAISS thread count (``threads``; 0 or None: no count asked for,
    ``GPURAG_THREADS`` else OpenMP's default) without loading FAISS: the runtime calls this
    when it is created. Until FAISS runs, a later count replaces an earlier one; once it ran,
    the count is fixed (every thread of the process runs at it), and a call asking for
    another count logs a warning naming both and changes nothing."""
    global _REQUESTED
    asked = int(threads or 0)
    with _LOCK:
        if _FAISS is None:
            if asked or _REQUESTED is None:
                _REQUESTED = asked
            return
        fixed = _THREADS
    if asked and asked != fixed:
        logging.getLogger(__name__).warning(
            "FAISS threads: %d asked for, not applied: this process's count was fixed at %d "
            "by its first FAISS call; set GPURAG_THREADS before the first index is built or "
            "opened", asked, fixed)


def configured_faiss():
    """The faiss module, configured, with this thread at the process's thread count."""
    faiss = _FAISS if _FAISS is not None else _configure_process()
    if not getattr(_LOCAL, "ready", False):  # once per thread: OpenMP's count is per thread
        faiss.omp_set_num_threads(_THREADS)
        _LOCAL.ready = True
    return faiss


def _configure_process():
    global _FAISS, _THREADS
    with _LOCK:
        if _FAISS is None:
            import faiss

            faiss.cvar.distance_compute_blas_threshold = 1
            _THREADS = _REQUESTED or threads_from_env() or int(faiss.omp_get_max_threads())
            _FAISS = faiss
    return _FAISS


def process_threads() -> int:
    """The process's FAISS thread count (fixing it on first use)."""
    if _FAISS is None:
        _configure_process()
    return _THREADS


def on_one_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on one OpenMP thread, here on the calling thread: its count is
    put at one for the call and back at what it was after (OpenMP keeps the count per thread,
    so no other thread sees it). For FAISS calls whose result must not depend on the thread
    count (BLAS splits a product among threads, which changes the last bits of the sums) or
    that are too small to share. Handing the call to another thread instead cost a wake-up
    of that thread each time: about 6 ms a search on 2 cores at a load of 16, where the
    search itself takes well under one."""
    if getattr(_LOCAL, "one", False):  # already at one thread (nested, or a pool worker)
        return fn(*args, **kwargs)
    faiss = configured_faiss()
    before = faiss.omp_get_max_threads()
    if before <= 1:
        return fn(*args, **kwargs)
    faiss.omp_set_num_threads(1)
    _LOCAL.one = True
    try:
        return fn(*args, **kwargs)
    finally:
        _LOCAL.one = False
        faiss.omp_set_num_threads(before)
