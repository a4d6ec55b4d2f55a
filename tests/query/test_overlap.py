"""The dense scan beside the text stages (gpurag.query.overlap, issue 26): the same results
whether the helper thread ran it or the calling thread did, and a busy helper or a small
scan leaves the call to the caller."""

from __future__ import annotations

import threading

import pytest

import gpurag.query.overlap as overlap
import gpurag.vectors.faiss_index as faiss_index
from gpurag import Index


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


def test_a_busy_helper_or_one_core_runs_the_call_here():
    release = threading.Event()
    first = overlap.ahead(release.wait, 5.0)
    assert first.overlapped
    second = overlap.ahead(threading.current_thread)  # the helper is busy: run here
    assert not second.overlapped and second.result() is threading.current_thread()
    release.set()
    assert first.result() is True
    assert not overlap.ahead(int, worth=False).overlapped


def test_an_error_on_the_helper_reaches_the_caller():
    def fail():
        raise ValueError("boom")

    job = overlap.ahead(fail)
    with pytest.raises(ValueError, match="boom"):
        job.result()
    assert overlap.ahead(int).result() == 0  # the helper is free again
