"""Query-time searchers over loaded FAISS files (flat, scalar-quantized, IVF-SQ): the device
searcher decodes the vectors in bounded chunks and, on CPU torch, matches host FAISS; on the
CPU a query searches the FAISS index itself."""

from __future__ import annotations

import numpy as np
import pytest

from gpurag.backends.searcher import query_index, searcher_for_index
from gpurag.vectors import load_index, save_index
from gpurag.vectors.searcher import decoded_chunks

faiss = pytest.importorskip("faiss")
torch = pytest.importorskip("torch")


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _make(kind: str, x: np.ndarray):
    d = x.shape[1]
    ip = faiss.METRIC_INNER_PRODUCT
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
    elif kind == "sq8":
        index = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_8bit_uniform, ip)
    elif kind == "sq16":
        index = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_fp16, ip)
    else:  # ivf-sq
        index = faiss.IndexIVFScalarQuantizer(faiss.IndexFlatIP(d), d, 16,
                                              faiss.ScalarQuantizer.QT_8bit_uniform, ip)
    if not index.is_trained:
        index.train(x)
    index.add(x)
    return index


KINDS = ["flat", "sq8", "sq16", "ivf-sq"]


@pytest.mark.parametrize("kind", KINDS)
def test_decoded_in_chunks_equals_reconstruct(tmp_path, kind):
    x = _unit(1000, 24, 0)
    save_index(_make(kind, x), tmp_path / "v.faiss")
    index = load_index(tmp_path / "v.faiss")  # memory-mapped, read only
    chunks = list(decoded_chunks(index, rows=300))
    assert [s for s, _ in chunks] == [0, 300, 600, 900] and len(chunks[-1][1]) == 100
    got = np.concatenate([c for _, c in chunks])
    assert got.shape == (1000, 24) and got.dtype == np.float32
    tol = {"flat": 0, "sq16": 1e-3, "sq8": 2e-2, "ivf-sq": 2e-2}[kind]
    np.testing.assert_allclose(got, x, atol=tol)
    dev = searcher_for_index(index, "cpu", backend="torch", dtype=torch.float16)
    np.testing.assert_array_equal(dev._index._scan.float().numpy(),
                                  got.astype(np.float16).astype(np.float32))
    assert dev._index._exact is dev._index._scan  # no float32 copy kept for the re-rank


@pytest.mark.parametrize("kind", KINDS)
def test_float16_device_searcher_matches_host_faiss(tmp_path, kind):
    """CPU-torch parity of the cuda path (float16 vectors, float32 re-rank) with the host
    search of the same file (IVF: with the exact scan over its decoded vectors)."""
    x = _unit(4000, 48, 1)
    save_index(_make(kind, x), tmp_path / "v.faiss")
    index = load_index(tmp_path / "v.faiss")
    qs = x[:50] + 0.2 * _unit(50, 48, 2)
    dev = searcher_for_index(index, "cpu", backend="torch", dtype=torch.float16)
    assert dev.ntotal == 4000 and dev.d == 48
    assert dev.implementation.startswith("kernels.knn torch-cpu float16 vectors + float32")
    s_dev, i_dev = dev.search(qs, 10)
    if kind == "ivf-sq":
        index.nprobe = index.nlist  # the device search is exact: compare with an exact scan
    s_ref, i_ref = index.search(qs, 10)
    # Scores: exact float32 dot products with the float16-rounded decoded vectors.
    np.testing.assert_allclose(s_dev, s_ref, atol=2e-3)
    decoded = np.concatenate([c for _, c in decoded_chunks(index)]).astype(np.float16)
    exact = qs.astype(np.float64) @ decoded.astype(np.float64).T
    kth = -np.sort(-exact, axis=1)[:, 9]
    for row in range(len(qs)):
        clear = set(np.flatnonzero(exact[row] > kth[row] + 1e-5))
        assert clear <= set(i_dev[row].tolist())
        assert (exact[row, i_dev[row]] >= kth[row] - 1e-5).all()
    assert np.mean([set(a) == set(b) for a, b in zip(i_dev, i_ref, strict=True)]) >= 0.9


def test_query_index_keeps_host_faiss_on_the_cpu():
    index = _make("sq8", _unit(200, 8, 3))
    assert query_index(index, "cpu") is index

    class Adapter:  # an object over a names index that knows how to go to the device
        ntotal, d = 5, 8

        def search(self, x, k):
            raise AssertionError("not searched here")

        def searched_by(self, searcher):
            return ("moved", searcher)

    moved, searcher = query_index(Adapter(), "cuda")
    assert moved == "moved" and callable(searcher)
    plain = Adapter()
    del Adapter.searched_by
    assert query_index(plain, "cuda") is plain  # unknown objects stay as they are
    assert query_index(plain, "cpu") is plain


def _cuda() -> bool:
    return bool(torch.cuda.is_available())


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_query_index_matches_host(tmp_path, kind):
    x = _unit(20000, 64, 4)
    save_index(_make(kind, x), tmp_path / "v.faiss")
    index = load_index(tmp_path / "v.faiss")
    qs = x[:64] + 0.2 * _unit(64, 64, 5)
    dev = query_index(index, "cuda")
    assert "cuda" in dev.implementation or "Gpu" in dev.implementation
    s_dev, i_dev = dev.search(qs, 10)
    if kind == "ivf-sq":
        index.nprobe = index.nlist
    s_ref, i_ref = index.search(qs, 10)
    np.testing.assert_allclose(s_dev, s_ref, atol=3e-3)
    assert np.mean([set(a) == set(b) for a, b in zip(i_dev, i_ref, strict=True)]) >= 0.9
