"""The GAT scorer on a synthetic graph: batching, checkpoints, training, determinism."""

from __future__ import annotations

import numpy as np
import torch

from gpurag.score import GATReranker
from gpurag.score.features import NODE_FEATURES, build_batch, concat_batches
from gpurag.score.model import (
    GATConfig,
    QueryGAT,
    ScorerSettings,
    load_checkpoint,
    save_checkpoint,
)
from gpurag.score.train import QuestionSet, TrainConfig, evaluate_model, listwise_loss, train
from tests.score.conftest import make_toy

SETTINGS = ScorerSettings((4, 2), 12)


def _model(dim: int = 16, seed: int = 0) -> QueryGAT:
    torch.manual_seed(seed)
    return QueryGAT(GATConfig(emb_dim=dim, hidden=8, heads=2)).eval()


def test_batch_shapes_and_concat(toy):
    arrays, inp, _ = toy
    whole = build_batch(arrays, inp, SETTINGS.fanout, SETTINGS.max_nodes)
    q, c = inp.cand.shape
    assert whole.x.shape[1] == len(NODE_FEATURES)
    assert whole.ptr.numel() == q * c + 1
    assert torch.equal(whole.node_id[whole.ptr[:-1]],
                       torch.from_numpy(inp.cand.ravel() + arrays.n_ent))
    parts = concat_batches([build_batch(arrays, inp.take([i]), SETTINGS.fanout,
                                        SETTINGS.max_nodes) for i in range(q)])
    for key in ("edge_index", "edge_attr", "batch", "ptr", "node_id", "question"):
        assert torch.equal(getattr(whole, key), getattr(parts, key)), key
    torch.testing.assert_close(whole.x, parts.x, rtol=1e-5, atol=1e-6)  # BLAS shapes differ
    assert torch.equal(whole.emb[whole.emb_index], parts.emb[parts.emb_index])


def test_batched_scores_equal_one_by_one(toy):
    arrays, inp, _ = toy
    rr = GATReranker(arrays, _model(), SETTINGS)
    together = rr.score(inp.qvecs, inp.cand, inp.ppr, (inp.dense_scores, inp.dense_rows))
    assert together.shape == inp.cand.shape and np.isfinite(together).all()
    alone = np.concatenate([rr.score_inputs(inp.take([i])) for i in range(len(inp))])
    np.testing.assert_allclose(together, alone, rtol=1e-4, atol=1e-5)
    rr.max_questions = 5  # chunked forward passes give the same scores too
    np.testing.assert_allclose(rr.score_inputs(inp), together, rtol=1e-4, atol=1e-5)


def test_checkpoint_roundtrip(toy, tmp_path):
    arrays, inp, _ = toy
    model = _model(seed=3)
    path = tmp_path / "m.safetensors"
    save_checkpoint(path, model, SETTINGS)
    loaded, settings = load_checkpoint(path)
    assert settings == SETTINGS and loaded.cfg == model.cfg
    a = GATReranker(arrays, model, SETTINGS).score_inputs(inp)
    b = GATReranker(arrays, loaded, settings).score_inputs(inp)
    np.testing.assert_array_equal(a, b)


def test_listwise_loss_prefers_gold_first():
    labels = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    good = listwise_loss(torch.tensor([[5.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), labels)
    bad = listwise_loss(torch.tensor([[0.0, 5.0, 0.0], [9.0, 0.0, 0.0]]), labels)
    assert float(good) < float(bad)


def _toy_sets(seed: int = 0):
    arrays, inp, gold = make_toy(seed=seed, q=16)
    qs = QuestionSet("toy", [str(i) for i in range(16)], arrays, inp, gold)
    return qs.take(np.arange(12)), qs.take(np.arange(12, 16))


def test_training_lowers_loss_and_is_deterministic():
    tr, va = _toy_sets()
    cfg = TrainConfig(seed=7, epochs=6, patience=6, batch_questions=4, lr=1e-2, hidden=8,
                      fanout=(4, 2), max_nodes=12, dropout=0.0)
    torch.manual_seed(0)
    before = evaluate_model(QueryGAT(GATConfig(emb_dim=16, hidden=8, dropout=0.0)), tr, cfg)
    model, info = train([tr], [va], cfg)
    after = evaluate_model(model, tr, cfg)
    assert after["loss"] < before["loss"]
    hist = info["history"]
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]
    again, _ = train([tr], [va], cfg)
    for (k, v), (_, w) in zip(model.state_dict().items(), again.state_dict().items(),
                              strict=True):
        assert torch.equal(v, w), k
