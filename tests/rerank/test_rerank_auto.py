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

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("auto") / "idx"
    Index.build(DATA / "corpus.jsonl", out, show_progress=False).close()
    return out


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
    assert recorded["extra"][auto.KEY]["query_profile"] == "default@1"  # what it ran on
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


def test_the_decision_can_be_made_at_build_time(tmp_path):
    index = Index.build(DATA / "corpus.jsonl", tmp_path / "idx", show_progress=False,
                        rerank_decision=True)
    d = index.manifest.extra[auto.KEY]
    assert d["questions"] > 0 and d["wins"] + d["losses"] <= d["questions"]
    # the recorded choice is the decision rule applied to the recorded measurements
    pays = d["gain"] >= auto.PROFILE.margin and d["wins"] > d["losses"]
    assert d["rerank"] == ("gat" if pays else "none")
    assert auto.resolve(index) == d["rerank"]
