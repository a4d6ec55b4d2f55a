"""A key's vector is the normalized sum of its names' vectors: the single-name copy must give
the bytes the sum over every name gave (a sum from zero turns -0.0 into 0.0)."""

from __future__ import annotations

import numpy as np

from gpurag.resolve.aliases import _key_vectors, _keys


def test_key_vectors_equal_the_summed_names():
    rng = np.random.default_rng(3)
    names = [f"Name {i % 700}" if i % 3 else f"the name {i % 700}" for i in range(2000)]
    names += [f"Solo {i}" for i in range(500)]
    emb = rng.standard_normal((len(names), 16)).astype(np.float32)
    emb[::7, 2] = -0.0
    emb[-1] = -0.0  # a zero vector: stays zero after normalization
    keys = _keys(names, None, np.ones(len(names)))
    assert 0 < len(keys.uniq) < len(names)
    want = np.zeros((len(keys.uniq), 16), np.float32)
    np.add.at(want, keys.gid, emb)
    want /= np.maximum(np.linalg.norm(want, axis=1, keepdims=True), 1e-12)
    got = _key_vectors(keys, emb, None, 256)
    assert got.tobytes() == want.tobytes()
    assert not np.signbit(got[keys.gid[-1]]).any()
