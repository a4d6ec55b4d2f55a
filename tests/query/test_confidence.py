"""An absolute confidence per result, and ``min_confidence`` to return nothing below it."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from gpurag.cli import main as gpurag_main
from gpurag.errors import ConfigError
from gpurag.query.confidence import FEATURES, features, known_share

# About nothing the sample corpus mentions (its world is invented)
ABSENT = ["What is the capital of France?", "Who wrote the novel War and Peace?",
          "When did Barack Obama become president of the United States?",
          "Which river flows through Budapest?"]


def test_known_share_weighs_words_the_corpus_lacks_by_idf(graph_index):
    lexical = graph_index.retriever.lexical
    vocab = lexical.model.vocab_dict
    known = next(w for w in ("kestrel", "merlin", "company") if w in vocab)  # a word it has
    got = known_share(lexical, [f"What is {known}?", f"What is {known} zzqxv?", "what is it?",
                                "zzqxv wqzzy"])
    assert got[0] == 1.0 and got[2] == 1.0  # all words known; no word but stopwords
    assert got[3] == 0.0  # nothing known
    # an unknown word weighs as a word in no passage: at least as much as any known one
    assert 0.0 < got[1] <= 0.5


def test_answerable_questions_score_above_absent_ones(graph_index, questions):
    answerable = graph_index.query_batch(questions, k=3)
    absent = graph_index.query_batch(ABSENT, k=3)
    sure = [r.confidence for r in answerable]
    unsure = [r.confidence for r in absent]
    assert all(0.0 <= c <= 1.0 for c in sure + unsure)
    assert min(sure) > max(unsure), (sure, unsure)
    # graph scores alone cannot tell them apart: both tops are 1.0
    assert {r.passages[0].score for r in absent} == {1.0}
    x = features(graph_index, ABSENT, graph_index.embedder.encode(ABSENT))
    assert x.shape == (len(ABSENT), len(FEATURES)) and np.isfinite(x).all()


def test_min_confidence_returns_nothing_below_it(graph_index, questions):
    qs = [questions[0], ABSENT[0]]
    plain = graph_index.query_batch(qs, k=4)
    cut = plain[1].confidence + (plain[0].confidence - plain[1].confidence) / 2
    held = graph_index.query_batch(qs, k=4, min_confidence=cut)
    assert held[0].chunk_ids == plain[0].chunk_ids and held[0].chains
    assert held[1].passages == [] and held[1].chains == [] and held[1].paths == []
    assert held[1].confidence == plain[1].confidence
    # dense mode has a confidence too, the same one (it does not depend on the ranking)
    dense = graph_index.query_batch(qs, k=4, mode="dense", min_confidence=cut)
    assert [r.confidence for r in dense] == [r.confidence for r in plain]
    assert dense[0].passages and not dense[1].passages
    with pytest.raises(ConfigError, match="min_confidence must be within"):
        graph_index.query(qs[0], min_confidence=1.5)


def test_cli_and_json_show_the_confidence(graph_index, questions):
    def run(*argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert gpurag_main(["-q", "query", str(graph_index.path), *argv]) == 0
        return out.getvalue()

    [sure] = json.loads(run(questions[0], "--json"))
    [unsure] = json.loads(run(ABSENT[0], "--json"))
    assert sure["confidence"] > unsure["confidence"]
    cut = f"{(sure['confidence'] + unsure['confidence']) / 2:.4f}"
    [held] = json.loads(run(ABSENT[0], "--json", "--min-confidence", cut))
    assert held["passages"] == [] and held["confidence"] == unsure["confidence"]
    text = run(ABSENT[0], "--min-confidence", cut)
    assert f"confidence {unsure['confidence']:.2f}" in text
    assert "nothing returned: confidence below --min-confidence" in text
