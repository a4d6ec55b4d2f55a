"""Host kNN indexes for the build (alias candidates): an exact FAISS ``IndexFlatIP``, or
above a row count a :class:`ReducedHNSW` (HNSW over PCA-reduced vectors). The device kNN
lives in :mod:`gpurag.backends.knn`."""

from __future__ import annotations

from typing import Any

import numpy as np


class ReducedHNSW:
    """FAISS HNSW over PCA-reduced, re-normalized vectors; queries are reduced the same way.

    Scores are inner products in the reduced space: callers that need exact scores rescore.
    """

    def __init__(self, vectors: np.ndarray, search_dim: int | None = 128, hnsw_m: int = 16,
                 ef_search: int = 32, ef_construction: int = 40) -> None:
        from gpurag.vectors.faiss_index import _faiss

        faiss = _faiss()  # this thread at the process's thread count (HNSW adds depend on it)

        x = np.ascontiguousarray(vectors, dtype=np.float32)
        n, dim = x.shape
        self.pca = None
        if search_dim and search_dim < dim:
            self.pca = faiss.PCAMatrix(dim, search_dim)
            sample = np.random.default_rng(0).choice(n, size=min(n, 50_000), replace=False)
            self.pca.train(x[np.sort(sample)])
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
        out = self.pca.apply(np.ascontiguousarray(x, dtype=np.float32))
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.index.hnsw.efSearch = max(self.index.hnsw.efSearch, 2 * k)
        return self.index.search(self._reduce(queries), k)


def build_host_knn(vectors: np.ndarray, *, approximate_above: int | None = None,
                     search_dim: int | None = 128, hnsw_m: int = 16,
                     hnsw_ef_construction: int = 40, hnsw_ef_search: int = 32) -> Any:
    """Exact ``IndexFlatIP``; above ``approximate_above`` rows a :class:`ReducedHNSW`."""
    from gpurag.vectors.faiss_index import _faiss

    faiss = _faiss()

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    if approximate_above is not None and len(x) > approximate_above:
        return ReducedHNSW(x, search_dim=search_dim, hnsw_m=hnsw_m, ef_search=hnsw_ef_search,
                           ef_construction=hnsw_ef_construction)
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    return index
