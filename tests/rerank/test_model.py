"""The GAT scorer on a synthetic graph: batching, checkpoints, training, determinism."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("safetensors")

from gpurag.graph.csr import build_csr  # noqa: E402
from gpurag.rerank import GATReranker  # noqa: E402
from gpurag.rerank.features import (  # noqa: E402
    NODE_FEATURES,
    CandidateInputs,
    GraphArrays,
    build_batch,
    concat_batches,
)
from gpurag.rerank.model import (  # noqa: E402
    GATConfig,
    QueryGAT,
    ScorerSettings,
    load_checkpoint,
    save_checkpoint,
)
from gpurag.rerank.train import (  # noqa: E402
    QuestionSet,
    TrainConfig,
    evaluate_model,
    listwise_loss,
    train,
)

SETTINGS = ScorerSettings((4, 2), 12)


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def make_toy(seed: int = 0, n_ent: int = 40, n_psg: int = 60, dim: int = 16, q: int = 12,
             c: int = 10) -> tuple[GraphArrays, CandidateInputs, list[np.ndarray]]:
    """A random entity-passage graph, questions, candidates and gold rows.

    Gold: the two candidates most similar to the question, so the task is learnable.
    """
    rng = np.random.default_rng(seed)
    psg = np.repeat(np.arange(n_psg), 3) + n_ent
    ent = rng.integers(0, n_ent, psg.size)
    ea, eb = rng.integers(0, n_ent, 30), rng.integers(0, n_ent, 30)
    graph = build_csr(np.r_[psg, ea], np.r_[ent, eb], rng.uniform(0.5, 2, psg.size + 30),
                      n_ent + n_psg)
    arrays = GraphArrays(graph, n_ent, n_psg, _unit(rng.normal(size=(n_ent, dim))),
                         _unit(rng.normal(size=(n_psg, dim))),
                         rng.uniform(0.2, 1, n_ent).astype(np.float32))
    qvecs = _unit(rng.normal(size=(q, dim)))
    cand = np.stack([rng.choice(n_psg, c, replace=False) for _ in range(q)])
    ppr = rng.random((q, n_ent + n_psg)).astype(np.float32) ** 4
    sims = qvecs @ arrays.passage_emb.T
    dense_rows = np.argsort(-sims, axis=1)[:, :8]
    dense_scores = np.take_along_axis(sims, dense_rows, axis=1)
    inputs = CandidateInputs(qvecs, cand, ppr, dense_scores, dense_rows)
    cs = np.take_along_axis(sims, cand, axis=1)
    gold = [cand[i, np.argsort(-cs[i])[:2]] for i in range(q)]
    return arrays, inputs, gold


@pytest.fixture
def toy():
    return make_toy()


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


def test_base_rank_feature_is_the_retrievers_order_and_old_checkpoints_ignore_it(toy):
    """Candidates arrive best first: each candidate root carries 1/(1 + its place), other
    nodes 0; a network trained before the feature existed (fewer ``n_features``) reads only
    the features it knows, so appending one leaves its scores as they were."""
    arrays, inp, _ = toy
    batch = build_batch(arrays, inp, SETTINGS.fanout, SETTINGS.max_nodes)
    col = NODE_FEATURES.index("base_rank")
    q, c = inp.cand.shape
    roots = batch.x[batch.ptr[:-1], col].view(q, c)
    want = torch.from_numpy(1.0 / (1.0 + np.arange(c, dtype=np.float32))).expand(q, c)
    torch.testing.assert_close(roots, want)
    is_ent = batch.node_id < arrays.n_ent
    assert (batch.x[is_ent, col] == 0).all()
    torch.manual_seed(0)
    old = QueryGAT(GATConfig(emb_dim=16, hidden=8, heads=2,
                             n_features=len(NODE_FEATURES) - 1)).eval()
    with torch.no_grad():
        before = old(batch)[1]
        batch.x[:, col] = 7.0
        after = old(batch)[1]
    assert torch.equal(before, after)


def test_balanced_sets_draw_as_many_questions_from_each_set():
    """With ``balance_sets`` a large set no longer outvotes a small one: each epoch takes as
    many (usable) questions from every set as the smallest has."""
    big, va = _toy_sets()
    small = big.take(np.arange(4))
    cfg = TrainConfig(seed=3, epochs=2, patience=6, batch_questions=4, hidden=8,
                      fanout=(4, 2), max_nodes=12)
    usable = [int((s.labels.sum(axis=1) > 0).sum()) for s in (big, small)]
    _, plain = train([big, small], [va], cfg)
    assert [r["train_questions"] for r in plain["history"]] == [sum(usable)] * 2
    cfg.balance_sets = True
    _, balanced = train([big, small], [va], cfg)
    assert [r["train_questions"] for r in balanced["history"]] == [2 * min(usable)] * 2
