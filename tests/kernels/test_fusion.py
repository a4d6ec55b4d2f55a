"""The torch fusion kernels (gpurag/kernels/fusion.py) against their NumPy specification
(gpurag/query/fusion.py, gpurag/query/walk.py): identical rows and scores on tie-heavy random
batches (scores drawn from a few values, rows repeated across sources), on CPU tensors and,
with a GPU, on cuda."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpurag.graph.ppr_top import PPRTop, numpy_topk  # noqa: E402
from gpurag.kernels import fusion  # noqa: E402
from gpurag.kernels.topk import topk_dense_stable  # noqa: E402
from gpurag.query import fusion as host  # noqa: E402
from gpurag.query.walk import candidate_scores  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")])]


def rows(rng, q: int, d: int, n: int, pad: float = 0.2) -> np.ndarray:
    """``(q, d)`` distinct rows per question from ``[0, n)``, -1 padded at the tail."""
    out = np.argsort(rng.random((q, n)), axis=1)[:, :d].astype(np.int64)
    cut = rng.random(q) < pad
    out[cut, d // 2:] = -1
    return out


def t(a, dev):
    return torch.as_tensor(a, device=dev)


@pytest.mark.parametrize("dev", DEVICES)
def test_stable_topk_breaks_ties_like_numpy(dev):
    rng = np.random.default_rng(0)
    scores = rng.choice(np.array([0.0, 0.25, 0.5, 1.0], np.float32), size=(7, 300))
    for k in (1, 5, 64, 300, 310):
        v, i = topk_dense_stable(t(scores, dev), k)
        ev, ei = numpy_topk(scores, k)
        np.testing.assert_array_equal(i.cpu().numpy(), ei)
        np.testing.assert_array_equal(v.cpu().numpy(), ev)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("blend", [0.0, 0.3])
def test_candidate_scores_match(dev, blend):
    rng = np.random.default_rng(1)
    q, n, k, dd, bb = 9, 40, 12, 8, 8
    vals = rng.choice(np.array([0.0, 0.1, 0.2], np.float32), size=(q, n))
    tv, ti = numpy_topk(vals, k)
    gather = np.concatenate([rows(rng, q, dd, n), rows(rng, q, bb, n)], axis=1)
    gathered = (np.take_along_axis(vals, gather.clip(0), axis=1) * (gather >= 0)).astype(
        np.float32)
    ds = rng.choice(np.array([0.3, 0.5, 0.9], np.float32), size=(q, dd))
    di = gather[:, :dd]
    cand, score = candidate_scores(PPRTop(tv, ti, gathered), gather, (ds, di), blend)
    c2, s2 = fusion.candidate_scores(t(tv, dev), t(ti, dev), t(gathered, dev), t(gather, dev),
                                     t(ds, dev), t(di, dev), blend)
    np.testing.assert_array_equal(c2.cpu().numpy(), cand)
    np.testing.assert_array_equal(s2.cpu().numpy(), score)
    for depth in (1, 10, 40):
        er, es = host.best_candidates(cand, score, depth)
        r2, s3 = fusion.best_candidates(c2, s2, depth)
        np.testing.assert_array_equal(r2.cpu().numpy(), er)
        np.testing.assert_array_equal(s3.cpu().numpy(), es)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("mode", ["fused", "union"])
@pytest.mark.parametrize("sources", [["dense"], ["dense", "bm25"], ["dense", "bm25", "ppr"],
                                     ["ppr", "title", "dense"]])
def test_head_rows_and_lift_match(dev, mode, sources):
    rng = np.random.default_rng(2)
    q, n, d = 11, 25, 10  # few rows: the sources share many, their rank gains tie
    rankings = {"dense": rows(rng, q, d, n), "bm25": rows(rng, q, d, n),
                "title": rows(rng, q, d, n, pad=0.6)}
    ppr = rows(rng, q, d, n)
    for head in (1, 3):
        want = host.head_rows(rankings, ppr, sources=sources, mode=mode, head=head, n=n)
        got = fusion.head_rows({k: t(v, dev) for k, v in rankings.items()}, t(ppr, dev),
                               sources=sources, mode=mode, head=head, n=n)
        np.testing.assert_array_equal(got.cpu().numpy(), want)
        cand = np.concatenate([ppr, rankings["dense"]], axis=1)
        score = rng.choice(np.array([0.0, 0.5, 1.0]), size=cand.shape)
        score[cand < 0] = -np.inf
        lifted = score.copy()
        host.lift_head(cand, lifted, want, want.shape[1])
        got_s = fusion.lift_head(t(cand, dev), t(score, dev), got, got.shape[1])
        np.testing.assert_array_equal(got_s.cpu().numpy(), lifted)


@pytest.mark.parametrize("dev", DEVICES)
def test_rrf_sums_in_ranking_order(dev):
    """Row 5 at ranks (0, 1, 6) of three rankings, row 3 at (6, 0, 1): the same three gains,
    summed in ranking order they differ in the last bit (row 5 ahead); summed another way
    they would tie and the lower row (3) would come first."""
    fill = iter(range(10, 100))
    ranks = []
    for x_at, y_at in ((0, 6), (1, 0), (6, 1)):
        r = [next(fill) for _ in range(8)]
        r[x_at], r[y_at] = 5, 3
        ranks.append(np.array([r], np.int64))
    want = host.rrf_order(*ranks, n=100)
    assert list(want[0, :2]) == [5, 3]
    got = fusion.rrf_order([t(r, dev) for r in ranks], n=100)
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    rng = np.random.default_rng(3)
    for _ in range(20):
        q, n = 6, 12
        ranks = [rows(rng, q, 8, n, pad=0.3) for _ in range(3)]
        want = host.rrf_order(*ranks, n=n)
        got = fusion.rrf_order([t(r, dev) for r in ranks], n=n)
        np.testing.assert_array_equal(got.cpu().numpy(), want)
