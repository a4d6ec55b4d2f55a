"""FAISS threads are configured once per process: ``GPURAG_THREADS`` holds in every thread
(OpenMP keeps the count per calling thread), and a small search in one thread never changes the
thread count another thread searches with."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from gpurag.vectors.faiss_index import SINGLE_THREAD_WORK, build_index, search
from gpurag.vectors.faiss_setup import configured_faiss as _faiss
from gpurag.vectors.faiss_setup import process_threads

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import threading
from gpurag.vectors.faiss_setup import configured_faiss as _faiss
faiss = _faiss()
seen = []
def worker():
    seen.append(_faiss().omp_get_max_threads())
t = threading.Thread(target=worker)
t.start(); t.join()
print(faiss.omp_get_max_threads(), seen[0])
"""


def test_configured_thread_count_holds_in_every_thread():
    # OpenMP's default (2 threads) differs from the configured count (1, within any machine's
    # cores, which bound GPURAG_THREADS)
    env = {**os.environ, "GPURAG_THREADS": "1", "OMP_NUM_THREADS": "2", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, check=True, timeout=120).stdout.split()
    assert out == ["1", "1"]  # the main thread and a later worker thread


def test_concurrent_small_and_large_searches_keep_their_own_threads():
    faiss = _faiss()
    configured = process_threads()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2048, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = build_index(x)
    small_q = x[:2]
    large_q = np.repeat(x, SINGLE_THREAD_WORK // len(x) // len(x) + 1, axis=0)
    assert len(small_q) * len(x) < SINGLE_THREAD_WORK <= len(large_q) * len(x)
    want_small, want_large = index.search(small_q, 5), index.search(large_q[:64], 5)
    counts: dict[str, list[int]] = {"small": [], "large": []}
    results: dict[str, list] = {"small": [], "large": []}
    start = threading.Barrier(2)

    def run(kind: str, q: np.ndarray) -> None:
        start.wait()
        for _ in range(20):
            results[kind].append(search(index, q, 5))
            counts[kind].append(faiss.omp_get_max_threads())

    threads = [threading.Thread(target=run, args=("small", small_q)),
               threading.Thread(target=run, args=("large", large_q))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(counts["small"]) == {1}
    assert set(counts["large"]) == {configured}
    assert faiss.omp_get_max_threads() == configured  # this thread untouched by either
    for scores, ids in results["small"]:
        np.testing.assert_array_equal(ids, want_small[1])
        np.testing.assert_array_equal(scores, want_small[0])
    for _scores, ids in results["large"]:
        np.testing.assert_array_equal(ids[:64], want_large[1])


def test_heavy_calls_after_a_small_search_run_on_the_configured_threads():
    faiss = _faiss()
    x = np.eye(4, dtype=np.float32)
    search(build_index(x), x[:1], 1)
    assert faiss.omp_get_max_threads() == 1  # a small search: one thread, left set
    _faiss()  # what build_index, load_index and the graph kNN call first
    assert faiss.omp_get_max_threads() == process_threads()
