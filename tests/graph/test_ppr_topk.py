"""The PPR component returns only top-k per question; the ranking over those candidates is the
ranking over the dense (q, n) scores it replaces."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gpurag.backends import ppr as device_ppr
from gpurag.config import QueryConfig
from gpurag.graph import build_csr
from gpurag.graph import ppr as host_ppr
from gpurag.graph import ppr_top as backend
from gpurag.query.graph import (
    _minmax,
    best_candidates,
    candidate_scores,
    lift_head,
    rrf_order,
)
from gpurag.runtime import Runtime


def _graph(seed: int, n: int, m: int):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    return build_csr(src, dst, rng.random(m).astype(np.float32) + 0.1, n_nodes=n,
                     symmetric=True)


def _reset(seed: int, q: int, n: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    r = np.zeros((q, n))
    for i in range(q):
        r[i, rng.choice(n, 1 + i % 4, replace=False)] = rng.random(1 + i % 4) + 0.1
    return sp.csr_array(r)


def dense_rrf(*rankings: np.ndarray, n: int, c: float = 60.0) -> np.ndarray:
    """Reciprocal-rank fusion over a dense (q, n) score array (the former implementation)."""
    q = rankings[0].shape[0]
    score = np.zeros((q, n))
    rows = np.arange(q)[:, None]
    for ranking in rankings:
        r = 1.0 / (c + 1.0 + np.arange(ranking.shape[1]))
        ok = ranking >= 0
        np.add.at(score, (np.broadcast_to(rows, ranking.shape)[ok], ranking[ok]),
                  np.broadcast_to(r, ranking.shape)[ok])
    depth = max(r.shape[1] for r in rankings)
    top = np.argsort(-score, axis=1, kind="stable")[:, :depth]
    return np.where(np.take_along_axis(score, top, axis=1) > 0, top, -1)


def old_ranking(psg_ppr: np.ndarray, dense, cfg: QueryConfig, lexical=None):
    """The ranking query/graph.py computed on the dense (q, n_passages) PPR scores."""
    psg = np.asarray(psg_ppr, dtype=np.float64)
    psg = psg / np.maximum(psg.max(axis=1, keepdims=True), 1e-30)
    ds, di = dense
    if cfg.dense_blend:
        dense_full = np.zeros_like(psg)
        rows = np.repeat(np.arange(len(psg)), di.shape[1])
        ok = di.ravel() >= 0
        dense_full[rows[ok], di.ravel()[ok]] = _minmax(ds).ravel()[ok]
        psg = psg + cfg.dense_blend * dense_full
    head = cfg.dense_head
    if head:
        rankings = []
        for source in cfg.head_fusion.split("+"):
            if source == "dense":
                rankings.append(di)
            elif source == "bm25":
                rankings.append(lexical[:, :di.shape[1]])
            elif source == "ppr":
                rankings.append(np.argsort(-psg, axis=1, kind="stable")[:, :di.shape[1]])
        order = rankings[0] if len(rankings) == 1 else dense_rrf(*rankings, n=psg.shape[1])
        top_dense = order[:, :head]
        lift = psg.max(axis=1, keepdims=True) + 1.0 + (head - np.arange(top_dense.shape[1]))
        rows_q = np.repeat(np.arange(len(psg))[:, None], top_dense.shape[1], axis=1)
        ok = top_dense >= 0
        psg[rows_q[ok], top_dense[ok]] = np.broadcast_to(lift, top_dense.shape)[ok]
    k = min(cfg.k, psg.shape[1])
    top = np.argsort(-psg, axis=1, kind="stable")[:, :k]
    return top, np.take_along_axis(psg, top, axis=1)


def new_ranking(g, reset, n_ent, dense, cfg: QueryConfig, lexical=None):
    """The candidate ranking as GraphRetriever.retrieve runs it."""
    di = dense[1]
    depth = di.shape[1]
    sources = cfg.head_fusion.split("+") if cfg.dense_head else []
    known = [di] + ([lexical[:, :depth]] if "bm25" in sources else [])
    gather = np.concatenate(known, axis=1)
    k = min(cfg.k, g.n_nodes - n_ent)
    top = backend.host_ppr_topk(g, reset, k=max(k, depth) + gather.shape[1], lo=n_ent,
                                gather=gather, damping=0.8, tol=1e-6)
    assert top.full is None
    cand, score = candidate_scores(top, gather, dense, cfg.dense_blend)
    if cfg.dense_head:
        rankings = []
        for source in sources:
            if source == "dense":
                rankings.append(di)
            elif source == "bm25":
                rankings.append(lexical[:, :depth])
            elif source == "ppr":
                rankings.append(best_candidates(cand, score, depth)[0])
        order = rankings[0] if len(rankings) == 1 else rrf_order(*rankings, n=g.n_nodes)
        lift_head(cand, score, order[:, :cfg.dense_head], cfg.dense_head)
    return best_candidates(cand, score, k)


@pytest.mark.parametrize(("blend", "head", "k", "fusion"), [
    (0.0, 2, 5, "dense"), (0.3, 0, 8, "dense"), (0.5, 3, 4, "dense"), (0.0, 0, 10, "dense"),
    (0.0, 1, 5, "dense+bm25"), (0.2, 2, 6, "dense+bm25+ppr"), (0.0, 3, 8, "dense+ppr")])
def test_candidate_ranking_equals_the_dense_ranking(blend, head, k, fusion):
    g = _graph(1, 600, 3000)
    n_ent = 200
    n_psg = g.n_nodes - n_ent
    reset = _reset(2, 16, g.n_nodes)
    rng = np.random.default_rng(3)
    depth = 12
    di = np.stack([rng.choice(n_psg, depth, replace=False) for _ in range(16)])
    ds = -np.sort(-rng.random((16, depth)), axis=1).astype(np.float32)
    di[0, -2:] = -1  # fewer dense results than asked
    lexical = np.stack([rng.choice(n_psg, depth, replace=False) for _ in range(16)])
    lexical[:, :3] = di[:, 3:6]  # sources agree on some passages
    lexical[1, -4:] = -1
    cfg = QueryConfig(k=k).plan(dense_blend=blend, dense_head=head, head_fusion=fusion)
    full = host_ppr.ppr(g, reset, damping=0.8, tol=1e-6)
    want_rows, want_scores = old_ranking(full[:, n_ent:], (ds, di), cfg, lexical)
    rows, scores = new_ranking(g, reset, n_ent, (ds, di), cfg, lexical)
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(scores, want_scores)


def test_rrf_order_equals_the_dense_fusion():
    rng = np.random.default_rng(12)
    a = np.stack([rng.choice(300, 20, replace=False) for _ in range(8)])
    b = np.stack([rng.choice(300, 15, replace=False) for _ in range(8)])
    b[:, :5] = a[:, 5:10]
    b[2, 7:] = -1
    np.testing.assert_array_equal(rrf_order(a, b, n=300), dense_rrf(a, b, n=300))


def test_host_topk_is_the_top_of_the_full_scores():
    g = _graph(4, 300, 1500)
    reset = _reset(5, 6, g.n_nodes)
    full = host_ppr.ppr(g, reset, damping=0.5)
    gather = np.array([[0, 5, -1]] * 6)
    top = backend.host_ppr_topk(g, reset, k=7, lo=100, hi=250, gather=gather, damping=0.5,
                                tol=1e-8, full=True)
    part = full[:, 100:250]
    want = -np.sort(-part, axis=1)[:, :7]
    np.testing.assert_array_equal(top.values, want)
    np.testing.assert_array_equal(np.take_along_axis(part, top.ids, axis=1), top.values)
    np.testing.assert_array_equal(top.gathered[:, :2], part[:, [0, 5]])
    assert (top.gathered[:, 2] == 0).all()
    np.testing.assert_array_equal(top.full, full)


def test_numpy_topk_pads_and_breaks_ties_by_id():
    v, i = backend.numpy_topk(np.array([[1.0, 3.0, 3.0], [0.0, 0.0, 0.0]]), 4)
    np.testing.assert_array_equal(i, [[1, 2, 0, -1], [0, 1, 2, -1]])
    assert v[0, 0] == 3.0 and np.isneginf(v[:, 3]).all()


def test_device_ppr_component_on_cpu_torch_matches_host(monkeypatch):
    """The device path (kernels.ppr_batched + kernels.topk), run on CPU torch, chunked so
    that several question blocks go through it."""
    pytest.importorskip("torch")
    g = _graph(6, 2000, 12000)
    reset = _reset(7, 10, g.n_nodes)
    monkeypatch.setattr(device_ppr, "DEVICE_CHUNK_BYTES", 4 * g.n_nodes * 3)  # 3 rows a chunk
    fn = device_ppr.make_device_ppr_topk(device_ppr.make_kernels_ppr("cpu"), "cpu")
    gather = np.tile(np.arange(5), (10, 1))
    got = fn(g, reset, k=20, lo=500, gather=gather, damping=0.8, tol=1e-7, full=True)
    want = backend.host_ppr_topk(g, reset, k=20, lo=500, gather=gather, damping=0.8,
                                 tol=1e-7, method="power", full=True)
    assert got.values.shape == (10, 20) and got.ids.dtype == np.int64
    np.testing.assert_allclose(got.values, want.values, atol=2e-6)
    np.testing.assert_allclose(got.gathered, want.gathered, atol=2e-6)
    np.testing.assert_allclose(got.full, want.full, atol=2e-6)
    # the same nodes, up to near-ties
    clear = want.values[:, :-1] - want.values[:, 1:] > 1e-5
    for row in range(10):
        upto = int(np.argmin(np.r_[clear[row], False]))
        assert set(got.ids[row, :upto]) == set(want.ids[row, :upto])


def _cuda() -> bool:
    from gpurag.device import cuda_available

    return cuda_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_cuda_ppr_component_returns_only_topk_and_matches_host():
    import torch

    g = _graph(8, 20000, 150000)
    reset = _reset(9, 64, g.n_nodes)
    b = Runtime(device="cuda")
    gather = np.tile(np.arange(10), (64, 1))
    torch.cuda.reset_peak_memory_stats()
    got = b.ppr(g, reset, k=30, lo=5000, gather=gather, damping=0.8, tol=1e-7)
    want = backend.host_ppr_topk(g, reset, k=30, lo=5000, gather=gather, damping=0.8,
                                 tol=1e-7, method="power")
    assert got.full is None and isinstance(got.values, np.ndarray)
    np.testing.assert_allclose(got.values, want.values, atol=1e-5)
    np.testing.assert_allclose(got.gathered, want.gathered, atol=1e-5)


def test_numpy_topk_ties_at_the_cut_go_to_the_lower_ids():
    rng = np.random.default_rng(11)
    x = rng.integers(0, 4, size=(20, 50)).astype(np.float32)
    for k in (1, 5, 17, 50):
        v, i = backend.numpy_topk(x, k)
        want = np.argsort(-x, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(i, want)
        np.testing.assert_array_equal(v, np.take_along_axis(x, want, axis=1))


@pytest.mark.parametrize("method", ["auto", "power", "push"])
def test_a_large_host_batch_runs_in_chunks_with_the_same_results(monkeypatch, method):
    """A batch too large for one (q, n) iterate is split into chunks of questions; each
    question's values, ids and gathered scores are what the whole batch gave."""
    g = _graph(4, 300, 1500)
    reset = _reset(5, 23, g.n_nodes)
    gather = np.random.default_rng(6).integers(-1, 200, size=(23, 4))
    kw = dict(k=7, lo=50, hi=250, gather=gather, damping=0.5, tol=1e-8, method=method)
    whole = backend.host_ppr_topk(g, reset, **kw)
    monkeypatch.setattr(backend, "HOST_CHUNK_BYTES", 1)
    monkeypatch.setattr(backend, "HOST_CHUNK_MIN_ROWS", 5)
    calls = []
    inner = backend._split_topk  # the walk of one chunk (no full rows asked)
    monkeypatch.setattr(backend, "_split_topk", lambda g, r, *a, **kw: calls.append(
        r.shape[0]) or inner(g, r, *a, **kw))
    chunked = backend.host_ppr_topk(g, reset, **kw)
    assert calls == [5, 5, 5, 5, 3]
    np.testing.assert_array_equal(chunked.values, whole.values)
    np.testing.assert_array_equal(chunked.ids, whole.ids)
    np.testing.assert_array_equal(chunked.gathered, whole.gathered)
