"""The kNN searcher factory: torch kernel vs faiss-cpu parity (random and real vectors), the
FAISS protocol (padding, shapes, errors), L2, wrapping loaded FAISS files, and selection."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpurag.backends import probe
from gpurag.backends.searcher import choose_backend, make_searcher, searcher_for_index
from gpurag.vectors import build_index, load_index, save_index

torch = pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def assert_same_topk(exact: np.ndarray, ids: np.ndarray, k: int, tie: float,
                     largest: bool = True) -> None:
    """``ids`` is a top-``k`` of the exact score matrix up to scores within ``tie``."""
    s = exact if largest else -exact
    kth = -np.sort(-s, axis=1)[:, k - 1]
    got = np.take_along_axis(s, ids, axis=1)
    assert (got >= kth[:, None] - tie).all()
    for row, clear in enumerate(s > kth[:, None] + tie):
        assert set(np.flatnonzero(clear)) <= set(ids[row].tolist())


@pytest.mark.parametrize("dtype", [None, torch.float16, torch.bfloat16])
def test_torch_matches_faiss_on_random_vectors(dtype):
    db = _unit(20000, 96, 0)
    qs = db[:40] + 0.1 * _unit(40, 96, 1)
    ref = make_searcher(db, "cpu")
    dev = make_searcher(db, "cpu", backend="torch", dtype=dtype)
    assert ref.implementation.startswith("faiss-cpu") and "IndexFlatIP" in ref.implementation
    assert dev.implementation.startswith("kernels.knn torch-cpu")
    assert ("re-rank" in dev.implementation) == (dtype is not None)
    s_ref, i_ref = ref.search(qs, 10)
    s_dev, i_dev = dev.search(qs, 10)
    assert i_dev.shape == (40, 10) and i_dev.dtype == np.int64 and s_dev.dtype == np.float32
    exact = qs.astype(np.float64) @ db.T.astype(np.float64)
    assert_same_topk(exact, i_dev, 10, tie=1e-5)
    same = [set(a) == set(b) for a, b in zip(i_ref, i_dev, strict=True)]
    assert np.mean(same) >= 0.95  # the rest differ only inside a tie (checked above)
    np.testing.assert_allclose(s_dev, s_ref, atol=1e-5)


def test_torch_matches_faiss_on_real_embeddings():
    from gpurag.backends.embed import load_embedder

    texts = [json.loads(line)["text"] for line in
             (REPO / "examples" / "sample" / "corpus.jsonl").read_text().splitlines() if line]
    sentences = [s.strip() for t in texts for s in t.split(". ") if len(s.strip()) > 20]
    vecs = load_embedder("onnx-minilm").encode(sentences)
    qs = vecs[::7]
    s_ref, i_ref = make_searcher(vecs, "cpu").search(qs, 5)
    for dtype in (None, torch.float16):
        s_dev, i_dev = make_searcher(vecs, "cpu", backend="torch", dtype=dtype).search(qs, 5)
        exact = qs.astype(np.float64) @ vecs.T.astype(np.float64)
        assert_same_topk(exact, i_dev, 5, tie=1e-6)
        assert np.mean([set(a) == set(b) for a, b in zip(i_ref, i_dev, strict=True)]) >= 0.95
        np.testing.assert_allclose(s_dev, s_ref, atol=1e-5)


@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_l2_metric_matches_faiss(backend):
    rng = np.random.default_rng(3)
    db = (rng.standard_normal((3000, 32)) * 3).astype(np.float32)
    qs = (rng.standard_normal((20, 32)) * 3).astype(np.float32)
    s, i = make_searcher(db, "cpu", metric="l2", backend=backend).search(qs, 7)
    d2 = ((qs[:, None, :].astype(np.float64) - db[None].astype(np.float64)) ** 2).sum(-1)
    assert_same_topk(d2, i, 7, tie=1e-3, largest=False)
    np.testing.assert_allclose(s, np.take_along_axis(d2, i, 1), rtol=1e-4, atol=1e-3)
    assert np.all(np.diff(s, axis=1) >= -1e-4)


@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_fewer_vectors_than_k_pads_like_faiss(backend):
    db = _unit(3, 16, 4)
    s, i = make_searcher(db, "cpu", backend=backend).search(db[0], 5)
    assert s.shape == i.shape == (1, 5)
    assert i[0, 0] == 0 and set(i[0, :3]) == {0, 1, 2}
    assert (i[0, 3:] == -1).all() and np.isneginf(s[0, 3:]).all()
    empty = make_searcher(np.zeros((0, 16), np.float32), "cpu", backend=backend)
    s, i = empty.search(db, 2)
    assert empty.ntotal == 0 and (i == -1).all() and np.isneginf(s).all()


@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_bad_input_is_a_clear_error(backend):
    srch = make_searcher(_unit(10, 8, 5), "cpu", backend=backend)
    with pytest.raises(ValueError, match=r"queries must have shape \(n, 8\)"):
        srch.search(np.zeros((2, 9), np.float32), 3)
    with pytest.raises(ValueError, match="k must be at least 1"):
        srch.search(np.zeros((2, 8), np.float32), 0)
    with pytest.raises(ValueError, match="unknown metric"):
        make_searcher(_unit(10, 8, 5), "cpu", metric="cos")
    with pytest.raises(ValueError, match="unknown kNN backend"):
        make_searcher(_unit(10, 8, 5), "cpu", backend="annoy")


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_searcher_over_a_saved_faiss_file(tmp_path, kind):
    x = _unit(3000, 32, 6)
    opts = {"flat": {}, "hnsw": {"hnsw_threshold": 1000}, "ivf": {"ivf_threshold": 1000}}[kind]
    save_index(build_index(x, **opts), tmp_path / "v.faiss")
    host = searcher_for_index(load_index(tmp_path / "v.faiss"), "cpu")
    assert type(host.index).__name__ in host.implementation  # the file's index, as built
    exact = searcher_for_index(load_index(tmp_path / "v.faiss"), "cpu", backend="torch")
    assert exact.ntotal == 3000 and exact.implementation.startswith("kernels.knn")
    qs = x[:30] + 0.01 * _unit(30, 32, 7)
    _, ids = exact.search(qs, 5)
    assert_same_topk(qs.astype(np.float64) @ x.T, ids, 5, tie=1e-6)


def test_backend_choice(monkeypatch):
    monkeypatch.setattr(probe, "faiss_gpu_available", lambda: False)
    assert choose_backend("cpu") == "faiss"
    assert choose_backend("cuda") == "torch"
    assert choose_backend("cuda:0", "faiss") == "faiss"
    assert choose_backend("cpu", "torch") == "torch"
    with pytest.raises(ValueError, match="faiss-gpu"):
        choose_backend("cuda", "faiss-gpu")
    monkeypatch.setattr(probe, "faiss_gpu_available", lambda: True)
    assert choose_backend("cuda") == "faiss-gpu"
    assert choose_backend("cuda", "faiss") == "faiss-gpu"
    assert choose_backend("cuda", "torch") == "torch"
    assert choose_backend("cpu") == "faiss"
