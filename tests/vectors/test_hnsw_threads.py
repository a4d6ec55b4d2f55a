"""The build's host kNN (alias candidates) gives the same neighbours at every FAISS thread
count: the PCA, its projection and the exact scores go through BLAS, whose sums change with
the number of threads splitting a product, so they run on one thread (issue 27)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from gpurag.resolve.knn import knn_pairs
from gpurag.vectors import faiss_setup
from gpurag.vectors.hnsw import ExactIP, ReducedHNSW, build_host_knn

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2,
                                reason="OpenBLAS runs one thread on a one-core machine")


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    # near-duplicate clusters, as name keys are: many close pairs, some exact ties
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((1500, 384)).astype(np.float32)
    x = centers[rng.integers(0, len(centers), 6000)]
    x = x + 0.15 * rng.standard_normal(x.shape).astype(np.float32)
    x[::50] = x[1::50]  # exact duplicates
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def at_threads(monkeypatch):
    """Set the process's FAISS thread count (as GPURAG_THREADS would) for this test."""
    faiss = faiss_setup.configured_faiss()

    def set_count(n: int):
        monkeypatch.setattr(faiss_setup, "_THREADS", n)
        faiss.omp_set_num_threads(n)  # this thread, as if configured at n
        return faiss

    yield set_count
    faiss.omp_set_num_threads(faiss_setup.process_threads())


def _pca_state(index: ReducedHNSW, faiss) -> list[bytes]:
    return [faiss.vector_to_array(getattr(index.pca, f)).tobytes()
            for f in ("mean", "eigenvalues", "A", "b")]


def test_reduced_hnsw_is_the_same_at_one_and_two_threads(vectors, at_threads):
    out = []
    for n in (1, 2):
        faiss = at_threads(n)
        index = ReducedHNSW(vectors)
        reduced = index._reduce(vectors[:1024])
        scores, ids = index.search(vectors[:1024], 11)
        out.append((_pca_state(index, faiss), reduced.tobytes(),
                    faiss.serialize_index(index.index).tobytes(), scores.tobytes(),
                    ids.tobytes(), faiss.omp_get_max_threads()))
    assert out[0][5] == 1 and out[1][5] == 2  # the count is restored after each BLAS step
    assert out[0][0] == out[1][0]  # the PCA
    assert out[0][1] == out[1][1]  # the projection
    assert out[0][2:5] == out[1][2:5]  # the HNSW graph and its answers


def test_exact_index_is_the_same_at_one_and_two_threads(vectors, at_threads):
    got = []
    for n in (1, 2):
        at_threads(n)
        index = build_host_knn(vectors[:5000], approximate_above=5000)
        assert isinstance(index, ExactIP)
        scores, ids = index.search(vectors[:5000], 11)
        got.append((scores.tobytes(), ids.tobytes()))
    assert got[0] == got[1]


def test_alias_candidate_pairs_are_the_same_at_one_and_two_threads(vectors, at_threads):
    pairs = []
    for n in (1, 2):
        at_threads(n)
        i, j, s = knn_pairs(vectors, 10, 0.8, exact_limit=1000)
        pairs.append((i.tobytes(), j.tobytes(), s.tobytes()))
    assert pairs[0] == pairs[1]
