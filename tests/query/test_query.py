"""Index.query / query_batch: ranked passages with provenance, batch == one by one."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from gpurag.errors import ConfigError
from gpurag.query.results import Passage, QueryResult


def _check_result(result: QueryResult, question: str, k: int, by_id: dict) -> None:
    assert isinstance(result, QueryResult)
    assert result.question == question and result.mode == "dense"
    assert [p.rank for p in result.passages] == list(range(1, k + 1))
    scores = [p.score for p in result.passages]
    assert all(a >= b for a, b in itertools.pairwise(scores)), scores
    assert all(-1.0001 <= s <= 1.0001 for s in scores)
    assert len(set(result.chunk_ids)) == k, "no passage twice"
    for p in result.passages:
        assert isinstance(p, Passage)
        src = by_id[p.doc_id]
        assert p.title == src["title"] and p.chunk_id
        assert 0 <= p.char_start < p.char_end <= len(src["text"])
        assert p.text == src["text"][p.char_start:p.char_end]
    assert result.doc_ids == [p.doc_id for p in result.passages]
    assert set(result.timings_ms) >= {"embed", "retrieve"}


def test_query_ranked_passages(sample_index, sample_questions, sample_by_id):
    q = sample_questions[0]["question"]
    result = sample_index.query(q, k=5)
    _check_result(result, q, 5, sample_by_id)
    # the bundled question's first gold passage is among the dense top 5
    assert set(sample_questions[0]["gold_ids"]) & set(result.doc_ids)


def test_query_scores_are_cosine(sample_index, embedder):
    q = "Which festival floats paper lanterns on the river?"
    result = sample_index.query(q, k=3)
    qv = embedder.encode([q])[0]
    rows = [sample_index.chunks.index[sample_index.chunks["chunk_id"] == c][0]
            for c in result.chunk_ids]
    emb = sample_index.passage_vectors()[rows]
    np.testing.assert_allclose([p.score for p in result.passages], emb @ qv, atol=1e-4)
    # nothing outside the top 3 scores higher than the third
    all_scores = sample_index.passage_vectors() @ qv
    assert np.sort(all_scores)[-3] == pytest.approx(result.passages[-1].score, abs=1e-4)


def test_query_batch_equals_one_by_one(sample_index, sample_questions, sample_by_id):
    questions = [q["question"] for q in sample_questions]
    batch = sample_index.query_batch(questions, k=4)
    assert len(batch) == len(questions)
    for q, res in zip(questions, batch, strict=True):
        _check_result(res, q, 4, sample_by_id)
        single = sample_index.query(q, k=4)
        assert single.chunk_ids == res.chunk_ids
        np.testing.assert_allclose([p.score for p in single.passages],
                                   [p.score for p in res.passages], atol=1e-5)


def test_k_larger_than_corpus_returns_all(sample_index, sample_by_id):
    n = len(sample_index.chunks)
    result = sample_index.query("anything at all", k=n + 50)
    _check_result(result, "anything at all", n, sample_by_id)
    assert set(result.chunk_ids) == set(sample_index.chunks["chunk_id"])


def test_unknown_mode_is_config_error(sample_index):
    with pytest.raises(ConfigError, match="unknown query mode 'sparse'"):
        sample_index.query("q", mode="sparse")


def test_graph_mode_without_graph_is_config_error(sample_index):
    assert sample_index.retriever is None
    with pytest.raises(ConfigError, match="no knowledge graph"):
        sample_index.query("q", mode="graph")


def test_unknown_query_option_is_config_error(sample_index):
    with pytest.raises(ConfigError, match="unknown setting 'not_an_option'"):
        sample_index.query("q", not_an_option=1)


def test_empty_batch(sample_index):
    assert sample_index.query_batch([]) == []


def test_default_mode_is_dense_without_graph(sample_index):
    assert sample_index.query("lanterns", k=1).mode == "dense"


def test_result_to_dict_is_json(sample_index):
    d = sample_index.query("lanterns", k=2).to_dict()
    back = json.loads(json.dumps(d))
    assert back["passages"][0]["rank"] == 1
    assert set(back["passages"][0]) == {"rank", "chunk_id", "doc_id", "title", "text",
                                        "char_start", "char_end", "score"}
