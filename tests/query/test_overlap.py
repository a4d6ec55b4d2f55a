"""The dense scan beside the text stages (gpurag.query.overlap, issue 26): the same results
whether the helper thread ran it or the calling thread did, and a busy helper or a small
scan leaves the call to the caller."""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings

import numpy as np
import pytest

import gpurag.query.overlap as overlap
import gpurag.vectors.faiss_index as faiss_index
from gpurag import Index
from gpurag.vectors.codec import codec_for
from gpurag.vectors.parted import PartedIndex, delta_index


def _rows(results) -> list[list[tuple[str, float]]]:
    return [[(p.chunk_id, p.score) for p in r.passages] for r in results]


def test_the_scan_on_the_helper_gives_the_callers_results(graph_index_path, questions,
                                                          monkeypatch):
    index = Index.open(graph_index_path)
    qs = questions[:3]
    alone = [index.query_batch([q], k=8, evidence=False) for q in qs]  # too small: inline
    seen: list[str] = []  # the threads the passage scans ran on
    real = faiss_index.search

    def recording(searcher, *args, **kwargs):
        if searcher is index.passage_search:
            seen.append(threading.current_thread().name)
        return real(searcher, *args, **kwargs)

    monkeypatch.setattr(faiss_index, "OVERLAP_MIN_WORK", 0)
    monkeypatch.setattr("gpurag.query.graph.search", recording)
    monkeypatch.setattr(overlap, "_cores", lambda: 2)
    beside = [index.query_batch([q], k=8, evidence=False) for q in qs]
    assert [_rows(r) for r in beside] == [_rows(r) for r in alone]
    assert len(seen) == len(qs) and all(name.startswith("gpurag-overlap") for name in seen)
    # the scan's own time, measured where it ran, beside the wait for it ("dense")
    assert all(r[0].timings_ms["dense_scan"] > 0 and "dense" in r[0].timings_ms
               for r in alone + beside)


class _DeviceSearcher:
    """What a GPU or torch searcher shows the query: ``ntotal`` and ``search``."""

    ntotal = 300

    def search(self, x, k):  # pragma: no cover - never called
        raise AssertionError


def test_only_an_exhaustive_host_scan_is_handed_over(monkeypatch):
    """rows x vectors is the cost of a flat (or scalar-quantized flat) host scan only: IVF
    and HNSW scan a fraction, a device searcher does not run on a host core."""
    monkeypatch.setattr(faiss_index, "OVERLAP_MIN_WORK", 0)
    x = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    codec = codec_for("int8", 16)
    sq = faiss_index.build_index(codec.round_trip(x), 10_000, codec=codec)
    hnsw = faiss_index.build_index(x, hnsw_threshold=100)
    scans = [faiss_index.build_index(x, 10_000), sq, PartedIndex(sq, [delta_index(x[:5], codec)])]
    partial = [faiss_index.build_index(x, ivf_threshold=100), hnsw,
               PartedIndex(hnsw, [delta_index(x[:5], None)]), _DeviceSearcher()]
    assert [faiss_index.overlaps_scan(i, 1) for i in scans] == [True] * 3
    assert [faiss_index.overlaps_scan(i, 1) for i in partial] == [False] * 4


def test_a_busy_helper_or_one_core_runs_the_call_here(monkeypatch):
    monkeypatch.setattr(overlap, "_cores", lambda: 2)  # as on any runner, a 1-core one too
    release = threading.Event()
    first = overlap.ahead(release.wait, 5.0)
    assert first.overlapped
    second = overlap.ahead(threading.current_thread)  # the helper is busy: run here
    assert not second.overlapped and second.result() is threading.current_thread()
    release.set()
    assert first.result() is True
    assert not overlap.ahead(int, worth=False).overlapped
    monkeypatch.setattr(overlap, "_cores", lambda: 1)
    alone = overlap.ahead(threading.current_thread)  # one core: run here
    assert not alone.overlapped and alone.result() is threading.current_thread()


def test_an_error_on_the_helper_reaches_the_caller(monkeypatch):
    def fail():
        raise ValueError("boom")

    monkeypatch.setattr(overlap, "_cores", lambda: 2)
    job = overlap.ahead(fail)
    assert job.overlapped
    with pytest.raises(ValueError, match="boom"):
        job.result()
    again = overlap.ahead(int)
    assert again.overlapped and again.result() == 0  # the helper is free again


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_its_own_helper_though_the_lock_was_held(monkeypatch):
    """The lock another thread held at the fork stays held in the child: the child's first
    hand-over must not wait for it."""
    monkeypatch.setattr(overlap, "_cores", lambda: 2)
    held, release = threading.Event(), threading.Event()

    def hold():
        with overlap._LOCK:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process
        pid = os.fork()
    if pid == 0:  # the child: exit 0 when the helper ran the call
        code = 1
        try:
            job = overlap.ahead(int)
            code = 0 if job.overlapped and job.result() == 0 else 1
        finally:
            os._exit(code)
    release.set()
    holder.join()
    deadline = time.monotonic() + 5
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child waited for its parent's lock")
    assert os.waitstatus_to_exitcode(done[1]) == 0
