"""Training the GAT reranker on synthetic questions of an index: per-epoch draws beside
balanced real sets, ``gpurag train-scorer --synthetic`` end to end, and synthetic questions in
the training folds (only) of the pooled cross-validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("safetensors")

from gpurag import Index
from gpurag.cli import main
from gpurag.eval.datasets import load_dataset
from gpurag.rerank.train import TrainConfig, train
from gpurag.training import crossval
from tests.rerank.test_model import _toy_sets

DATA = Path(__file__).parents[1] / "rerank" / "data"
NOTES = Path(__file__).parents[1] / "data" / "notes_corpus.jsonl"


@pytest.fixture(scope="module")
def index_dir(rerank_index_path) -> Path:
    return rerank_index_path  # DATA / "corpus.jsonl", built once (tests/conftest.py)


def test_a_set_with_its_own_draw_stays_out_of_balancing():
    big, va = _toy_sets()
    small = big.take(np.arange(4))
    synthetic = big.take(np.arange(12))
    synthetic.draw = 6
    assert synthetic.take(np.arange(8)).draw == 6  # carried by take
    cfg = TrainConfig(seed=3, epochs=2, patience=6, batch_questions=4, hidden=8,
                      fanout=(4, 2), max_nodes=12, balance_sets=True)
    usable = [int((s.labels.sum(axis=1) > 0).sum()) for s in (big, small)]
    _, info = train([big, small, synthetic], [va], cfg)
    # big and small balanced to the smallest; the synthetic set draws its own 6 per epoch
    assert [r["train_questions"] for r in info["history"]] == [2 * min(usable) + 6] * 2


def test_train_scorer_on_synthetic_questions_only(index_dir, tmp_path):
    out = tmp_path / "syn.safetensors"
    rc = main(["-q", "train-scorer", "--index", str(index_dir), "--synthetic", "16",
               "--synthetic-trivial-top", "0", "--synthetic-aspects", "--epochs", "2",
               "--seed", "1", "-o", str(out)])
    assert rc == 0 and out.is_file()
    card = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    (entry,) = card["data"]
    assert entry["aspects"] is True  # --synthetic-aspects reached the generator
    assert entry["synthetic"] and entry["train"] + entry["val"] == entry["questions"] > 0
    assert entry["val"] > 0 and sum(k["kept"] for k in entry["kinds"].values()) == \
        entry["questions"]
    index = Index.open(index_dir)
    q = "In what county is the city where Harris W. Fawell was born?"
    res = index.query(q, k=5, mode="graph", rerank=f"gat:{out}")
    assert len(res.passages) == 5 and all(np.isfinite(p.score) for p in res.passages)


@pytest.fixture(scope="module")
def notes_dir(notes_index_path) -> Path:
    return notes_index_path  # NOTES, built once (tests/conftest.py)


def test_train_scorer_says_when_an_index_has_no_bridges(notes_dir, index_dir, tmp_path,
                                                        capsys):
    out = tmp_path / "x.safetensors"
    rc = main(["-q", "train-scorer", "--index", str(notes_dir), "--synthetic", "8",
               "--synthetic-kinds", "bridge=1", "-o", str(out)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "yields no synthetic questions" in err and "no bridge pairs" in err
    assert not out.exists()
    # beside an index that has bridges, the one without is skipped, and said so
    rc = main(["-q", "train-scorer", "--index", str(notes_dir), "--index", str(index_dir),
               "--synthetic", "8", "--synthetic-kinds", "bridge=1",
               "--synthetic-trivial-top", "0", "--epochs", "1", "-o", str(out)])
    assert rc == 0 and out.is_file()
    assert "skipped" in capsys.readouterr().err
    card = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert [d["path"] for d in card["data"]] == [str(index_dir)]


def test_crossval_adds_synthetic_questions_to_training_folds_only(index_dir, monkeypatch):
    seen = []

    def spy(train_sets, val_sets, cfg, progress=False):
        seen.append(([s.name for s in train_sets], [i for s in val_sets for i in s.ids],
                     [i for s in train_sets for i in s.ids]))
        return train(train_sets, val_sets, cfg, progress)

    monkeypatch.setattr(crossval, "train", spy)
    index = Index.open(index_dir)
    ds = load_dataset(DATA)
    cfg = TrainConfig(seed=0, epochs=1, hidden=8, balance_sets=True)
    res = crossval.pooled_cv([(index, ds)], cfg, folds=3, synthetic=10, synthetic_draw=4,
                             trivial_top=0)
    real = {q.id for q in ds.questions}
    assert len(seen) == 3
    for names, val_ids, train_ids in seen:
        assert names[-1].startswith("synthetic:")  # every fold trains on them ...
        assert set(val_ids) <= real  # ... and validates on real questions only
        assert any(i.startswith("syn") for i in train_ids)
    assert res["synthetic"]["sets"][ds.name]["questions"] > 0
    ranks = res["sets"][ds.name]["ranks"]["graph+gat"]
    assert len(ranks) == len(ds.questions) and all(r is not None for r in ranks)


def test_crossval_decides_rerank_auto_per_fold_on_questions_it_did_not_train_on(index_dir,
                                                                                monkeypatch,
                                                                                capsys):
    from gpurag.rerank.auto import decision_questions

    index = Index.open(index_dir)
    ds = load_dataset(DATA)
    docs = index.chunks["doc_id"].to_numpy(object)
    held = {frozenset(q.gold_ids) for q in decision_questions(index).questions}
    trained = []

    def spy(train_sets, val_sets, cfg, progress=False):
        for s in train_sets:
            if s.name.startswith("synthetic:"):
                trained.extend(frozenset(docs[g].tolist()) for g in s.gold)
        return train(train_sets, val_sets, cfg, progress)

    monkeypatch.setattr(crossval, "train", spy)
    cfg = TrainConfig(seed=0, epochs=1, hidden=8, balance_sets=True)
    res = crossval.pooled_cv([(index, ds)], cfg, folds=3, synthetic=40, synthetic_draw=4,
                             trivial_top=0, synthetic_aspects=True, auto=True, progress=True)
    # the questions the decision is made on never train the model it judges
    assert trained and held and not held & set(trained)
    excluded = res["synthetic"]["sets"][ds.name]["excluded"]
    assert excluded > 0  # and the count that shrank says so
    assert f"({excluded} left out: rerank=auto decides on them;" in capsys.readouterr().out
    ranks = res["sets"][ds.name]["ranks"]
    parts = crossval.fold_parts(len(ds.questions), 3, cfg.seed)
    for k, info in enumerate(res["folds"]):
        choice = info["auto"][ds.name]["rerank"]
        assert choice in ("gat", "none")
        mode = "graph+gat" if choice == "gat" else "graph"
        assert all(ranks["graph+auto"][i] == ranks[mode][i] for i in parts[k])
    assert set(res["sets"][ds.name]) >= {"graph", "graph+gat", "graph+auto"}


def test_crossvals_auto_judge_decides_as_decide_does_at_any_candidate_count(index_dir):
    """The judge and ``auto.decide`` share their rankings: at a count other than the index's
    (crossval's --candidates) and at the index's own (``rerank_candidates``, the default)."""
    from gpurag.config import QueryConfig
    from gpurag.rerank import auto

    index = Index.open(index_dir)
    small = auto.AutoProfile(questions=40)
    judge = crossval._AutoJudge(index, small)
    at_n, at_30 = auto.decide(index, small, candidates=4), auto.decide(index, small)
    assert at_n["questions"] > 0 and (at_n["candidates"], at_30["candidates"]) == (4, 30)
    assert at_n["gat"] != at_30["gat"]  # the count changes the reranked ranking here
    assert judge.decide(4) == at_n and judge.decide() == at_30
    index.query_config = QueryConfig(rerank_candidates=4)  # rerank="auto" queries rerank 4
    assert auto.decide(index, small) == at_n == judge.decide()


def test_questions_left_out_are_counted_and_named_when_none_remain(index_dir):
    from gpurag.errors import ConfigError
    from gpurag.query.synthetic import generate
    from gpurag.training.synthetic import prepare_synthetic

    index = Index.open(index_dir)
    cfg = TrainConfig(seed=0)
    made = generate(index, 16, seed=0, trivial_top=0).questions
    golds = [frozenset(q.gold_ids) for q in made]
    with pytest.raises(ConfigError) as info:  # every question made shares a kept-apart gold
        prepare_synthetic(index, 16, cfg, trivial_top=0, exclude=set(golds))
    message = str(info.value)
    assert f"all {len(made)} questions made were left out" in message
    assert "rerank=auto" in message and "dense retrieval" not in message
    some = {golds[0]}
    qs, syn = prepare_synthetic(index, 16, cfg, trivial_top=0, exclude=some)
    gone = sum(g in some for g in golds)
    assert syn.excluded == gone == len(made) - len(syn.questions) > 0
    # each kind's counts follow: what was kept is what is there, the rest is counted apart
    assert sum(s["kept"] for s in syn.stats.values()) == len(syn.questions) == len(qs)
    assert sum(s.get("excluded", 0) for s in syn.stats.values()) == gone
