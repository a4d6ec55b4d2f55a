"""Exact chunked kNN against the NumPy float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpurag.kernels.knn import ExactIndex, knn_reference, knn_search  # noqa: E402
from tests.kernels import device_params  # noqa: E402

DEVICES = device_params()


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def assert_same_topk(scores_ref_full: np.ndarray, ids: np.ndarray, k: int, tie: float) -> None:
    """Every returned id is within ``tie`` of the k-th best exact score, and every id clearly
    above it is returned (identical sets where scores are not tied)."""
    kth = -np.sort(-scores_ref_full, axis=1)[:, k - 1]
    got = np.take_along_axis(scores_ref_full, ids, axis=1)
    assert (got >= kth[:, None] - tie).all()
    for row, want in enumerate(scores_ref_full > kth[:, None] + tie):
        assert set(np.flatnonzero(want)) <= set(ids[row].tolist())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("chunk_rows", [None, 97])
def test_float32_matches_reference(device, chunk_rows):
    rng = np.random.default_rng(0)
    db, qs = unit_rows(rng, 2000, 48), unit_rows(rng, 37, 48)
    scores, ids = knn_search(qs, db, 10, device=device, compute_dtype=torch.float32,
                             chunk_rows=chunk_rows)
    assert isinstance(scores, np.ndarray) and scores.dtype == np.float32 and ids.dtype == np.int64
    rv, ri = knn_reference(qs, db, 10)
    assert_same_topk(qs.astype(np.float64) @ db.T.astype(np.float64), ids, 10, tie=1e-6)
    np.testing.assert_allclose(scores, rv, atol=1e-5)
    assert (ids == ri).mean() > 0.99  # identical up to (improbable) near-ties


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduced_precision_scan_with_rerank_is_exact(device, dtype):
    rng = np.random.default_rng(0)
    db, qs = unit_rows(rng, 3000, 64), unit_rows(rng, 20, 64)
    index = ExactIndex(64, device, compute_dtype=getattr(torch, dtype))
    index.add(db)
    scores, ids = index.search(qs, 8, chunk_rows=512)
    exact = qs.astype(np.float64) @ db.T.astype(np.float64)
    assert_same_topk(exact, ids, 8, tie=1e-6)
    np.testing.assert_allclose(scores, knn_reference(qs, db, 8)[0], atol=1e-5)
    # without the re-rank the scores carry the reduced precision
    loose = ExactIndex(64, device, compute_dtype=getattr(torch, dtype), rerank=False)
    loose.add(db)
    lv, _ = loose.search(qs, 8)
    assert np.abs(lv - scores).max() < 2e-2


@pytest.mark.parametrize("device", DEVICES)
def test_index_add_search_protocol(device):
    rng = np.random.default_rng(0)
    a, b, qs = unit_rows(rng, 50, 16), unit_rows(rng, 30, 16), unit_rows(rng, 4, 16)
    index = ExactIndex(16, device, compute_dtype=torch.float32)
    index.add(a)
    index.add(torch.as_tensor(b))
    assert index.ntotal == 80
    scores, ids = index.search(qs, 100)  # k > ntotal: padded
    rv, _ = knn_reference(qs, np.concatenate([a, b]), 100)
    assert (ids[:, 80:] == -1).all() and np.isneginf(scores[:, 80:]).all()
    np.testing.assert_allclose(scores[:, :80], rv[:, :80], atol=1e-5)
    tv, ti = index.search(torch.as_tensor(qs[0], device=device), 3)  # torch in, torch out
    assert isinstance(tv, torch.Tensor) and ti.shape == (1, 3)
    np.testing.assert_array_equal(ti.cpu().numpy()[0], ids[0, :3])


def test_empty_index_and_bad_shapes():
    index = ExactIndex(8)
    scores, ids = index.search(np.zeros((2, 8), np.float32), 3)
    assert (ids == -1).all() and scores.shape == (2, 3)
    with pytest.raises(ValueError, match="queries"):
        index.search(np.zeros((2, 7), np.float32), 3)
    with pytest.raises(ValueError, match="vectors"):
        index.add(np.zeros((2, 9), np.float32))
    with pytest.raises(ValueError, match="k must"):
        index.search(np.zeros((1, 8), np.float32), 0)
