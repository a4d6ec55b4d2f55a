"""The GAT reranker on the sample index: the shipped checkpoint, the hook, batching, the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("safetensors")

from gpurag.errors import ConfigError  # noqa: E402
from gpurag.rerank import DEFAULT_CHECKPOINT, GATReranker, get_reranker  # noqa: E402
from gpurag.rerank.model import GATConfig, QueryGAT, ScorerSettings, save_checkpoint  # noqa: E402
from gpurag.rerank.train import record_inputs  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.setenv("GPURAG_PROGRESS", "0")
    for name in list(os.environ):
        if name.startswith(("GPURAG_INDEX_", "GPURAG_QUERY_", "GPURAG_GAT_")):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def sample_index(tmp_path_factory):
    """The bundled sample corpus (57 passages) indexed with its graph, once per module."""
    from gpurag.eval.datasets import load_dataset
    from gpurag.eval.runner import open_or_build_index

    index, _, _ = open_or_build_index(load_dataset(SAMPLE),
                                      str(tmp_path_factory.mktemp("gat") / "sample"), None,
                                      show_progress=False)
    return index


@pytest.fixture(scope="module")
def questions() -> list[str]:
    return [json.loads(line)["question"] for line in
            (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines() if line]


def test_shipped_checkpoint_is_small_and_documented():
    assert DEFAULT_CHECKPOINT.is_file()
    blob = DEFAULT_CHECKPOINT.read_bytes()
    assert len(blob) < 2_000_000
    card = json.loads(DEFAULT_CHECKPOINT.with_suffix(".json").read_text(encoding="utf-8"))
    assert card["file"]["sha256"] == hashlib.sha256(blob).hexdigest()
    for key in ("seed", "data", "metrics", "gpurag_version", "train_config", "model_config"):
        assert key in card, key
    assert card["data"] and all("test_ids" in d for d in card["data"])


def test_shipped_checkpoint_loads_and_reranks(sample_index, questions):
    retriever = sample_index.retriever
    rr = get_reranker("gat", retriever)
    assert isinstance(rr, GATReranker) and get_reranker("gat", retriever) is rr
    plain = sample_index.query_batch(questions, k=5, mode="graph")
    reranked = sample_index.query_batch(questions, k=5, mode="graph", rerank="gat")
    assert [len(r.passages) for r in reranked] == [5] * len(questions)
    assert all(np.isfinite(p.score) for r in reranked for p in r.passages)
    assert [r.doc_ids for r in reranked] != [r.doc_ids for r in plain]  # it does something
    one = [sample_index.query(q, k=5, mode="graph", rerank="gat") for q in questions[:4]]
    assert [r.doc_ids for r in one] == [r.doc_ids for r in reranked[:4]]


def test_batched_scores_equal_one_by_one(sample_index, questions):
    inp, _ = record_inputs(sample_index, questions, candidates=20)
    rr = get_reranker("gat", sample_index.retriever)
    together = rr.score(inp.qvecs, inp.cand, inp.ppr, (inp.dense_scores, inp.dense_rows))
    alone = np.concatenate([rr.score_inputs(inp.take([i])) for i in range(len(inp))])
    assert together.shape == (len(questions), 20)
    np.testing.assert_allclose(together, alone, rtol=1e-4, atol=1e-5)


def test_checkpoint_selection_and_errors(sample_index, tmp_path, monkeypatch):
    retriever = sample_index.retriever
    with pytest.raises(ConfigError, match="unknown reranker"):
        get_reranker("nope", retriever)
    with pytest.raises(ConfigError, match="does not exist"):
        get_reranker(f"gat:{tmp_path / 'missing.safetensors'}", retriever)
    torch.manual_seed(0)
    path = tmp_path / "other.safetensors"
    save_checkpoint(path, QueryGAT(GATConfig(hidden=8)), ScorerSettings((3, 2), 10))
    by_name = get_reranker(f"gat:{path}", retriever)
    assert by_name.model.cfg.hidden == 8 and by_name.settings.max_nodes == 10
    assert get_reranker("gat", retriever, checkpoint=path) is by_name
    from gpurag import Index
    from gpurag.runtime import Runtime, read_settings

    rt = Runtime.create(read_settings({"GPURAG_GAT_CHECKPOINT": str(path),
                                       "GPURAG_DEVICE": "cpu"}))
    from_env = get_reranker("gat", Index.open(sample_index.path, runtime=rt).retriever)
    assert from_env.model.cfg.hidden == 8
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="cannot load"):
        get_reranker(f"gat:{bad}", retriever)


def test_missing_gnn_dependencies_say_how_to_install(sample_index, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    with pytest.raises(ConfigError, match=r'pip install "gpurag\[gnn\]"'):
        get_reranker("gat", sample_index.retriever)


def test_train_scorer_cli(sample_index, tmp_path):
    from gpurag.cli import main

    out = tmp_path / "tiny.safetensors"
    rc = main(["-q", "train-scorer", str(SAMPLE), "--index", str(sample_index.path),
               "--out", str(out), "--epochs", "2", "--hidden", "8", "--fanout", "3,2",
               "--max-nodes", "10", "--val-frac", "0.25", "--test-frac", "0",
               "--candidates", "12"])
    assert rc == 0 and out.is_file()
    card = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert card["seed"] == 0 and card["data"][0]["train"] == 9 and card["data"][0]["val"] == 3
    assert "val/sample" in card["metrics"]
    rr = get_reranker(f"gat:{out}", sample_index.retriever)
    assert rr.model.cfg.hidden == 8
    res = sample_index.query_batch(["Who founded Kestrel Dynamics?"], k=3, mode="graph",
                                   rerank=f"gat:{out}")
    assert len(res[0].passages) == 3


def test_one_question_runs_on_one_torch_thread_and_restores_the_setting(sample_index,
                                                                         questions,
                                                                         monkeypatch):
    """A question's few hundred subgraph nodes go through the network on one thread (torch's
    other threads only wait at barriers); torch's own setting comes back after, and the
    scores equal those of a pass on torch's threads."""
    from gpurag.rerank.threads import NODES_PER_THREAD, threads_for, torch_threads

    inp, _ = record_inputs(sample_index, questions[:1], candidates=20)
    rr = get_reranker("gat", sample_index.retriever)
    seen: list[int] = []
    forward = rr.model.forward

    def spy(batch):
        seen.append(torch.get_num_threads())
        return forward(batch)

    monkeypatch.setattr(rr.model, "forward", spy)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        auto = rr.score_inputs(inp)
        assert seen == [1] and torch.get_num_threads() == 2
        rr.cpu_threads = 0  # leave torch alone
        plain = rr.score_inputs(inp)
        assert seen == [1, 2]
        with torch_threads(3), torch_threads(1):  # nested scopes restore the outermost
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        rr.cpu_threads = None
        torch.set_num_threads(before)
    np.testing.assert_allclose(auto, plain, rtol=1e-5, atol=1e-6)
    assert threads_for(500, 8) == 1 and threads_for(4 * NODES_PER_THREAD, 8) == 4
    assert threads_for(100 * NODES_PER_THREAD, 8) == 8


def test_pooled_cross_validation_ranks_every_question_with_a_model_that_never_saw_it(
        sample_index):
    """Folds partition the questions; a fold's test part is neither trained nor validated
    on; every question gets graph+gat ranks from the full query path."""
    from gpurag.eval.datasets import load_dataset
    from gpurag.rerank.train import TrainConfig
    from gpurag.training.crossval import fold_parts, fold_split, pooled_cv

    parts = fold_parts(12, 3, seed=0)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(12))
    for k in range(3):
        tr, va, te = fold_split(parts, k)
        assert not set(te) & (set(tr) | set(va)) and not set(tr) & set(va)
        assert len(tr) + len(va) + len(te) == 12
    ds = load_dataset(SAMPLE)
    cfg = TrainConfig(epochs=1, hidden=8, fanout=(3, 2), max_nodes=10, candidates=12)
    res = pooled_cv([(sample_index, ds)], cfg, folds=3)
    row = res["sets"][ds.name]
    assert len(res["folds"]) == 3
    assert len(row["ranks"]["graph+gat"]) == len(ds.questions)
    assert all(r is not None for r in row["ranks"]["graph+gat"])
    assert set(row["graph+gat"]) >= {"recall@2", "recall@5", "all_gold@8", "mrr"}
    # the folds' networks (hidden 8) are gone: "gat" is the shipped checkpoint again
    assert get_reranker("gat", sample_index.retriever).model.cfg.hidden == 16


def test_crossval_keeps_two_indexes_of_one_dataset_apart():
    """Two jobs on the same questions (say the rule-based index and the one with LLM triples)
    get their own rows: the second one no longer overwrites the first."""
    from types import SimpleNamespace

    from gpurag.training.crossval import job_labels

    ds = SimpleNamespace(name="musique")
    other = SimpleNamespace(name="hotpotqa")
    assert job_labels([(None, ds), (None, other), (None, ds)]) == ["musique", "hotpotqa",
                                                                    "musique#2"]
