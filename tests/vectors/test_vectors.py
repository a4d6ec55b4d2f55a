"""Vector index kinds: exact, HNSW (entity/fact seeds) and IVF, saved and loaded."""

from __future__ import annotations

import numpy as np
import pytest

from gpurag.vectors import build_index, load_index, save_index, search


def _unit(n: int, d: int = 64, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_index_kinds_find_the_exact_neighbours(tmp_path, kind):
    x = _unit(3000)
    options = {"flat": {}, "hnsw": {"hnsw_threshold": 1000}, "ivf": {"ivf_threshold": 1000}}
    index = build_index(x, **options[kind])
    assert {"flat": "IndexFlatIP", "hnsw": "IndexHNSWFlat", "ivf": "IndexIVFFlat"}[kind] \
        in type(index).__name__
    save_index(index, tmp_path / "v.faiss")
    loaded = load_index(tmp_path / "v.faiss")
    queries = x[:50] + 0.01 * _unit(50, seed=1)
    scores, ids = search(loaded, queries, 5)
    exact = np.argsort(-(queries @ x.T), axis=1)[:, :5]
    top1 = (ids[:, 0] == exact[:, 0]).mean()
    assert top1 >= (1.0 if kind == "flat" else 0.9)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)
