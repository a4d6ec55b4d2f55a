"""Confidence and evidence chains are computed on first read, with the values an eager
computation gives, and cost nothing to a caller that reads only the passages."""

from __future__ import annotations

import copy
import pickle

import numpy as np

from gpurag.query.confidence import add_confidence
from gpurag.query.deferred import Pending
from gpurag.query.evidence import add_chains
from gpurag.query.results import QueryResult


def test_unread_fields_are_never_computed(graph_index, questions):
    results = graph_index.query_batch(questions[:4], k=3)
    assert all(r.passages for r in results)
    # nothing ran: neither stage has a time yet
    assert not any({"confidence", "evidence"} & set(r.timings_ms) for r in results)
    assert results[1].confidence is not None  # one read fills the whole batch
    assert all("confidence" in r.timings_ms for r in results)
    assert not any("evidence" in r.timings_ms for r in results)
    assert results[2].chains  # chains are made per result
    assert ["evidence" in r.timings_ms for r in results] == [False, False, True, False]


def test_deferred_values_equal_eager_ones(graph_index, questions):
    qs = [*questions[:6], "What is the capital of France?"]
    for mode in ("graph", "dense"):
        lazy = graph_index.query_batch(qs, k=4, mode=mode)
        eager = graph_index.query_batch(qs, k=4, mode=mode)
        add_confidence(graph_index, eager, graph_index.embedder.encode(qs))
        assert [r.confidence for r in lazy] == [r.confidence for r in eager]
        assert all(isinstance(r.confidence, float) for r in lazy)
        if mode == "graph":
            row_of = {c: i for i, c in enumerate(graph_index.retriever.chunks["chunk_id"])}
            rows = np.full((len(qs), 4), -1, np.int64)
            for i, r in enumerate(eager):
                rows[i, :len(r.passages)] = [row_of[c] for c in r.chunk_ids]
            add_chains(graph_index.retriever, eager, rows)
            assert [r.chains for r in lazy] == [r.chains for r in eager]
            assert any(r.chains for r in lazy)
        else:
            assert all(r.chains == [] for r in lazy)


def test_copies_and_pickles_hold_values(graph_index, questions):
    r = graph_index.query(questions[0], k=3)
    for other in (pickle.loads(pickle.dumps(r)), copy.deepcopy(r)):
        assert "_deferred_chains" in other.__dict__
        assert not isinstance(other.__dict__["_deferred_chains"], Pending)
        assert other.chains == r.chains and other.confidence == r.confidence
    assert r.to_dict()["chains"] and r.to_dict()["confidence"] == r.confidence


def test_plain_results_keep_their_defaults():
    r = QueryResult(question="q", mode="dense", passages=[])
    assert r.confidence is None and r.chains == []
    r.chains.append(1)
    assert r.chains == [1] and QueryResult("q", "dense", []).chains == []
    assert QueryResult("q", "dense", [], confidence=0.5).confidence == 0.5
