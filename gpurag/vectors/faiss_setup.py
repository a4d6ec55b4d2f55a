"""FAISS configured once per process: small query batches use BLAS (its default threshold of 20
sends 1-19 queries down a slow scalar path), and one thread count, from ``GPURAG_THREADS`` or
else OpenMP's default. OpenMP keeps the thread count per calling thread (``nthreads-var`` is a
per-task setting), so each thread is put at it here, written only when it changes, and a
setting made by one thread never changes the searches of another."""

from __future__ import annotations

import threading

from gpurag.config import threads_from_env

_CONFIGURED = False
_THREADS = 0  # the process's FAISS thread count, resolved once by configured_faiss()
_LOCAL = threading.local()  # the count last set in this thread


def configured_faiss():
    """The faiss module, configured, with this thread at the process's thread count."""
    global _CONFIGURED, _THREADS
    import faiss

    if not _CONFIGURED:
        faiss.cvar.distance_compute_blas_threshold = 1
        _THREADS = threads_from_env() or int(faiss.omp_get_max_threads())
        _CONFIGURED = True
    use_threads(faiss, _THREADS)
    return faiss


def process_threads() -> int:
    """The process's FAISS thread count (resolving it on first use)."""
    if not _CONFIGURED:
        configured_faiss()
    return _THREADS


def use_threads(faiss, n: int) -> None:
    """Run this thread's FAISS calls on ``n`` OpenMP threads (written only when it changes)."""
    if getattr(_LOCAL, "threads", None) != n:
        faiss.omp_set_num_threads(n)
        _LOCAL.threads = n
