"""FAISS threads are configured once per process: ``GPURAG_THREADS`` holds in every thread
(OpenMP keeps the count per calling thread), no search sets a thread count (a thread keeps the
count it has, whatever it searches), and small searches still run on one OpenMP thread (the
calling thread's, put at one for the call and back after), with the results of one thread."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from gpurag.vectors.faiss_index import SINGLE_THREAD_WORK, build_index, search
from gpurag.vectors.faiss_setup import configured_faiss as _faiss
from gpurag.vectors.faiss_setup import on_one_thread, process_threads

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


def _vectors(n: int, d: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _in_thread(fn):
    """``fn()`` run in a new thread (its OpenMP count starts at the library's default)."""
    out: list = []
    errors: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # re-raised in the calling thread
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return out[0]


def test_a_search_never_sets_the_thread_count_of_its_thread():
    """The count is set once per thread (on its first FAISS call), never per search: after a
    thread's count was set to something else, small and large searches leave it as it is."""
    faiss = _faiss()
    x = _vectors(2048, 32)
    index = build_index(x)
    small_q = x[:2]
    large_q = np.repeat(x, SINGLE_THREAD_WORK // len(x) // len(x) + 1, axis=0)
    assert len(small_q) * len(x) < SINGLE_THREAD_WORK <= len(large_q) * len(x)

    def probe() -> list[int]:
        search(index, small_q, 5)  # this thread's first FAISS call: put at the process count
        first = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(3)  # as another library in this thread might
        seen = [first]
        for q in (small_q, large_q, small_q):
            search(index, q, 5)
            seen.append(faiss.omp_get_max_threads())
        return seen

    assert _in_thread(probe) == [process_threads(), 3, 3, 3]


def test_small_searches_give_the_results_of_one_thread():
    """A small search runs on one OpenMP thread, as it did when each search set its thread's
    count: 8 query rows over a flat index, compared bit for bit with one thread's search."""
    faiss = _faiss()
    x = _vectors(20_000, 96, seed=1)
    index = build_index(x)
    q = _vectors(8, 96, seed=2)
    assert len(q) * len(x) < SINGLE_THREAD_WORK

    def one_thread():
        faiss.omp_set_num_threads(1)
        return index.search(q, 10)

    want = _in_thread(one_thread)
    got = _in_thread(lambda: search(index, q, 10))
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


def test_on_one_thread_runs_at_one_openmp_thread_and_leaves_the_caller_as_it_was():
    faiss = _faiss()
    assert on_one_thread(faiss.omp_get_max_threads) == 1
    assert on_one_thread(lambda: on_one_thread(faiss.omp_get_max_threads)) == 1  # nested
    assert faiss.omp_get_max_threads() == process_threads()


def test_a_small_search_runs_on_the_calling_thread():
    """No handoff to another thread (a wake-up of it cost ~6 ms a search on a loaded 2-core
    machine, several times the search)."""
    faiss = _faiss()
    x = _vectors(256, 16)
    index = build_index(x)
    seen: list[int] = []

    def probe(q):
        seen.append(threading.get_ident())
        return index.search(q, 3)

    on_one_thread(probe, x[:1])
    assert seen == [threading.get_ident()]
    assert faiss.omp_get_max_threads() == process_threads()


def test_concurrent_small_and_large_searches_keep_their_threads_and_results():
    faiss = _faiss()
    configured = process_threads()
    x = _vectors(2048, 32)
    index = build_index(x)
    small_q = x[:2]
    large_q = np.repeat(x, SINGLE_THREAD_WORK // len(x) // len(x) + 1, axis=0)
    assert len(small_q) * len(x) < SINGLE_THREAD_WORK <= len(large_q) * len(x)
    want_small, want_large = search(index, small_q, 5), search(index, large_q[:64], 5)
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
    assert set(counts["small"]) == set(counts["large"]) == {configured}
    assert faiss.omp_get_max_threads() == configured  # this thread untouched by either
    for scores, ids in results["small"]:
        np.testing.assert_array_equal(ids, want_small[1])
        np.testing.assert_array_equal(scores, want_small[0])
    for _scores, ids in results["large"]:
        np.testing.assert_array_equal(ids[:64], want_large[1])


def test_a_runtime_fixes_the_thread_count_before_faiss_loads():
    """``Runtime.create`` records the settings' thread count; FAISS, loaded later, uses it in
    every thread (GPURAG_THREADS unset in the environment)."""
    code = (
        "import sys, threading\n"
        "from gpurag.runtime import Runtime\n"
        "from gpurag.settings import Settings\n"
        "Runtime.create(Settings(threads=1))\n"
        "assert 'faiss' not in sys.modules\n"
        "from gpurag.vectors.faiss_setup import configured_faiss as f, process_threads\n"
        "seen = []\n"
        "t = threading.Thread(target=lambda: seen.append(f().omp_get_max_threads()))\n"
        "t.start(); t.join()\n"
        "print(process_threads(), f().omp_get_max_threads(), seen[0])\n")
    env = {k: v for k, v in os.environ.items() if k != "GPURAG_THREADS"}
    env.update(OMP_NUM_THREADS="2", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=120).stdout.split()
    assert out == ["1", "1", "1"]


def test_a_later_thread_count_applies_until_faiss_ran_and_is_refused_loudly_after(
        monkeypatch, caplog):
    from gpurag.vectors import faiss_setup

    fixed = process_threads()
    with monkeypatch.context() as m:  # a process where FAISS has not run yet
        m.setattr(faiss_setup, "_FAISS", None)
        m.setattr(faiss_setup, "_REQUESTED", None)
        faiss_setup.configure(0)  # a runtime without a count
        faiss_setup.configure(3)  # a later one asking for three threads: used
        faiss_setup.configure(None)  # one without a count changes nothing
        assert faiss_setup._REQUESTED == 3
    caplog.set_level("WARNING", logger=faiss_setup.__name__)
    faiss_setup.configure(fixed)
    faiss_setup.configure(0)
    assert not caplog.records  # the count already in force, or none asked for: nothing said
    faiss_setup.configure(fixed + 1)
    [record] = caplog.records
    assert f"{fixed + 1} asked for, not applied" in record.getMessage()
    assert f"fixed at {fixed}" in record.getMessage()
    assert process_threads() == fixed
