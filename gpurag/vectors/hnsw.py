"""Host kNN indexes for the build (alias candidates): an exact FAISS ``IndexFlatIP``, or
above a row count a :class:`ReducedHNSW` (HNSW over PCA-reduced vectors). The device kNN
lives in :mod:`gpurag.backends.knn`.

Their results do not depend on the FAISS thread count (``GPURAG_THREADS``): the steps that go
through BLAS (the PCA's covariance and eigenvectors, its projection of the vectors, the exact
index's scores) run on one OpenMP thread, because OpenBLAS splits a matrix product among its
threads and the split changes the last bits of the sums (on 34k name keys two threads gave
another PCA than one, so other candidate pairs and another index). HNSW construction and
search compute each distance on its own and keep their threads: their output is the same at
every thread count.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpurag.vectors.faiss_setup import on_one_thread


class ReducedHNSW:
    """FAISS HNSW over PCA-reduced, re-normalized vectors; queries are reduced the same way.

    Scores are inner products in the reduced space: callers that need exact scores rescore.
    """

    def __init__(self, vectors: np.ndarray, search_dim: int | None = 128, hnsw_m: int = 16,
                 ef_search: int = 32, ef_construction: int = 40) -> None:
        from gpurag.vectors.faiss_index import _faiss

        faiss = self._faiss = _faiss()  # this thread at the process's thread count

        x = np.ascontiguousarray(vectors, dtype=np.float32)
        n, dim = x.shape
        self.pca = None
        if search_dim and search_dim < dim:
            self.pca = faiss.PCAMatrix(dim, search_dim)
            sample = np.random.default_rng(0).choice(n, size=min(n, 50_000), replace=False)
            # BLAS: the same PCA at every thread count
            on_one_thread(self.pca.train, x[np.sort(sample)])
        reduced = self._reduce(x)
        self.index = faiss.IndexHNSWFlat(reduced.shape[1], hnsw_m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = ef_construction
        self.index.hnsw.efSearch = ef_search
        self.index.add(reduced)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def _reduce(self, x: np.ndarray) -> np.ndarray:
        if self.pca is None:
            return x
        # BLAS: the same projection at every thread count
        out = on_one_thread(self.pca.apply, np.ascontiguousarray(x, dtype=np.float32))
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.index.hnsw.efSearch = max(self.index.hnsw.efSearch, 2 * k)
        return self.index.search(self._reduce(queries), k)


class ExactIP:
    """FAISS ``IndexFlatIP`` searched on one thread (its scores are BLAS products), so the
    neighbours of near ties do not change with the thread count. Up to the exact limit
    (5,000 keys) that is at most a (5k x 5k x 384) product, a fraction of a second."""

    def __init__(self, vectors: np.ndarray) -> None:
        from gpurag.vectors.faiss_index import _faiss

        self._faiss = _faiss()
        self.index = self._faiss.IndexFlatIP(vectors.shape[1])
        self.index.add(vectors)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return on_one_thread(self.index.search, np.ascontiguousarray(queries, dtype=np.float32),
                             k)


def build_host_knn(vectors: np.ndarray, *, approximate_above: int | None = None,
                     search_dim: int | None = 128, hnsw_m: int = 16,
                     hnsw_ef_construction: int = 40, hnsw_ef_search: int = 32) -> Any:
    """Exact inner product (:class:`ExactIP`); above ``approximate_above`` rows a
    :class:`ReducedHNSW`. Either gives the same neighbours at every FAISS thread count."""
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    if approximate_above is not None and len(x) > approximate_above:
        return ReducedHNSW(x, search_dim=search_dim, hnsw_m=hnsw_m, ef_search=hnsw_ef_search,
                           ef_construction=hnsw_ef_construction)
    return ExactIP(x)
