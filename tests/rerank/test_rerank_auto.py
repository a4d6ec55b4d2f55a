"""``rerank="auto"``: the GAT is kept only where it pays on the index's own synthetic
questions; the decision is recorded in the manifest and a query with ``rerank="auto"`` follows
it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("safetensors")

from gpurag import Index
from gpurag.rerank import DEFAULT_CHECKPOINT, auto
from gpurag.rerank.model import load_checkpoint, save_checkpoint
from tests.conftest import copy_index

# Builds of texts embedded before in the session read their vectors back.
pytestmark = pytest.mark.usefixtures("shared_embeddings")

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def index_dir(rerank_index_path, tmp_path_factory) -> Path:
    """A copy of the session's index of DATA / "corpus.jsonl" (the tests record into it)."""
    return copy_index(rerank_index_path, tmp_path_factory.mktemp("auto") / "idx")


@pytest.fixture(scope="module")
def inverted(tmp_path_factory) -> Path:
    """The shipped GAT with its output negated: it ranks the candidates upside down, so it
    hurts on any corpus."""
    import torch

    model, settings = load_checkpoint(DEFAULT_CHECKPOINT)
    with torch.no_grad():
        for layer in (model.readout[2], model.skip):
            layer.weight.neg_()
            layer.bias.neg_()
    path = tmp_path_factory.mktemp("gat") / "inverted.safetensors"
    save_checkpoint(path, model, settings)
    return path


def test_a_reranker_that_hurts_is_turned_off_and_auto_follows_the_record(index_dir, inverted):
    index = Index.open(index_dir)
    small = auto.AutoProfile(questions=40)
    decision = auto.decide(index, small, reranker=f"gat:{inverted}")
    assert decision["questions"] > 0  # decided on questions, not for want of them
    assert decision["losses"] > decision["wins"] and decision["gain"] < 0
    assert decision["rerank"] == "none"
    auto.record(index_dir, decision)
    recorded = json.loads((index_dir / "manifest.json").read_text(encoding="utf-8"))
    assert recorded["extra"][auto.KEY]["rerank"] == "none"
    assert recorded["extra"][auto.KEY]["query_profile"] == "default@2"  # what it ran on
    reopened = Index.open(index_dir)  # the seal still holds: extra is informational
    assert auto.resolve(reopened) == "none"
    qs = ["Which river flows through the capital of the country where the composer was born?",
          "What is the capital of the city the writer moved to?"]
    a = [r.doc_ids for r in reopened.query_batch(qs, k=8, mode="graph", rerank="auto")]
    b = [r.doc_ids for r in reopened.query_batch(qs, k=8, mode="graph", rerank="none")]
    assert a == b


def test_a_recorded_gat_decision_turns_the_reranker_on(index_dir):
    auto.record(index_dir, {"rerank": "gat", "reason": "test"})
    index = Index.open(index_dir)
    assert auto.resolve(index) == "gat"
    qs = ["What is the capital of the city the writer moved to?"]
    on = index.query_batch(qs, k=8, mode="graph", rerank="auto")[0].doc_ids
    gat = index.query_batch(qs, k=8, mode="graph", rerank="gat")[0].doc_ids
    assert on == gat


def test_the_decision_can_be_made_at_build_time(tmp_path, monkeypatch):
    from gpurag import api

    opened = []
    real = api.open_index_dir
    monkeypatch.setattr(api, "open_index_dir", lambda *a, **kw: opened.append(a) or real(*a, **kw))
    index = Index.build(DATA / "corpus.jsonl", tmp_path / "idx", show_progress=False,
                        rerank_decision=True)
    assert len(opened) == 1  # the index decided on is the one returned, opened once
    assert index.manifest.extra == Index.open(tmp_path / "idx").manifest.extra
    d = index.manifest.extra[auto.KEY]
    assert d["questions"] > 0 and d["wins"] + d["losses"] <= d["questions"]
    # the recorded choice is the decision rule applied to the recorded measurements
    pays = d["gain"] >= auto.PROFILE.margin and d["wins"] > d["losses"]
    assert d["rerank"] == ("gat" if pays else "none")
    assert auto.resolve(index) == d["rerank"]


def test_the_decision_scores_each_question_by_r5_plus_all_gold():
    ranked = [["a", "b", "a", "c", "d", "e", "f"], ["x"], ["g"]]
    gold = [("a", "f"), ("y",), ()]
    # q1: a at 1, f at 6 (the repeated a collapsed): R@5 1/2, all-gold@8 1; q2: 0 + 0;
    # q3 without gold: 0 + 1
    assert auto._per_question(ranked, gold, 8).tolist() == [1.5, 0.0, 1.0]
    assert auto._per_question(ranked, gold, 5).tolist() == [0.5, 0.0, 1.0]


def test_auto_in_a_plan_stands_for_the_decision_in_graph_mode_only(index_dir):
    from gpurag.config import QueryConfig, query_plan

    auto.record(index_dir, {"rerank": "gat", "reason": "test"})
    index = Index.open(index_dir)
    plan = query_plan(QueryConfig(), {"rerank": "auto"})[1]
    assert auto.settle(index, plan, "graph").rerank == "gat"
    assert auto.settle(index, plan, "dense").rerank == "none"
    fixed = query_plan(QueryConfig(), {"rerank": "none"})[1]
    assert auto.settle(index, fixed, "graph") is fixed
