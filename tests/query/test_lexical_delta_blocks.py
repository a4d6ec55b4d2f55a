"""The BM25 delta (gpurag.query.lexical_delta.with_delta) is applied block by block into
preallocated arrays and the vocabulary extended in place: the same model as the whole-matrix
version before it (tests/query/lexical_delta_before.py), bit for bit, and little held besides
the merged arrays."""

from __future__ import annotations

import json
import tracemalloc
import types

import numpy as np
import pytest

from gpurag.query import lexical_delta as ld
from tests.query.lexical_delta_before import with_delta_reference


def _case(rng, folder, v_b: int, n_b: int, n_new: int, new_words: int, per_doc: int = 6):
    """A stored model (bm25s' scores: a term-passage CSC of float32 weights) of ``v_b`` terms
    over ``n_b`` passages, some terms held by none, and a delta of ``n_new`` passages in a few
    parts naming stored and new words; returns a function making fresh copies of the model."""
    dfs = rng.integers(0, max(n_b // 3, 1) + 1, v_b)
    if v_b:
        dfs[rng.integers(0, v_b, max(v_b // 10, 1))] = 0
    indptr = np.concatenate([[0], np.cumsum(dfs)]).astype(np.int64)
    idx = (np.concatenate([np.sort(rng.choice(n_b, d, replace=False)) for d in dfs])
           if v_b else np.zeros(0)).astype(np.int32)
    data = (rng.random(idx.size) * 3).astype(np.float32)
    n_terms, n = v_b + new_words, n_b + n_new
    entries = []
    for doc in range(n_b, n if n_terms else n_b):
        for t in np.unique(rng.integers(0, n_terms, int(rng.integers(1, per_doc)))):
            entries.append((int(t), doc, float(rng.integers(1, 4))))
    k = int(rng.integers(1, 4))
    names = []
    for i in range(k):
        arr = np.array([e for e in entries if e[1] % k == i], ld.ENTRY)
        arr = arr[np.lexsort((arr["doc"], arr["term"]))]
        names.append(f"delta.part{i:05d}.npy")
        np.save(folder / names[-1], arr)
    meta = {"k1": 1.5, "b": 0.75, "base_docs": n_b, "base_terms": v_b, "base_len": 10 * n_b,
            "weighted_docs": n_b, "docs": n, "total_len": 10 * n_b + 3 * len(entries),
            "words": [f"new{i}" for i in range(new_words)], "parts": names}
    (folder / ld.META).write_text(json.dumps(meta))
    for name, arr in (("indptr", indptr), ("indices", idx), ("data", data)):
        np.save(folder / f"{name}.npy", arr)

    def model():
        m = types.SimpleNamespace()
        m.scores = {name: np.load(folder / f"{name}.npy", mmap_mode="r")
                    for name in ("indptr", "indices", "data")}
        m.scores["num_docs"] = n_b
        m.vocab_dict = {f"t{i}": i for i in range(v_b)}
        m.unique_token_ids_set = set(m.vocab_dict.values())  # as bm25s' load makes it
        return m

    return model


@pytest.mark.parametrize("block", [1, 5, ld.RESCALE_BLOCK])
def test_blocked_delta_equals_the_whole_matrix_one(tmp_path, monkeypatch, block):
    """150 random stored models and deltas, any block size: data, indices, indptr (dtypes
    and bits), the passage count, the vocabulary and the token id set equal the reference's."""
    monkeypatch.setattr(ld, "RESCALE_BLOCK", block)
    rng = np.random.default_rng(block)
    for trial in range(150):
        folder = tmp_path / f"m{trial}"
        folder.mkdir()
        model = _case(rng, folder, int(rng.integers(0, 40)), int(rng.integers(1, 30)),
                      int(rng.integers(0, 8)), int(rng.integers(0, 5)))
        got, want = ld.with_delta(model(), folder), with_delta_reference(model(), folder)
        for key in ("data", "indices", "indptr"):
            g, w = np.asarray(got.scores[key]), np.asarray(want.scores[key])
            assert g.dtype == w.dtype, key
            assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), key
        assert got.scores["num_docs"] == want.scores["num_docs"]
        assert got.vocab_dict == want.vocab_dict
        assert got.unique_token_ids_set == want.unique_token_ids_set


def test_a_delta_holds_little_besides_the_merged_model(tmp_path, monkeypatch):
    """A memory-mapped stored model of about 500k entries over 2,000 terms and a delta of 20
    passages: the most with_delta holds at once (tracemalloc) is the merged arrays plus
    under a quarter of them (the whole-matrix version: 1.67 times them, 6.1 MB for 3.7 MB)."""
    monkeypatch.setattr(ld, "RESCALE_BLOCK", 8192)
    rng = np.random.default_rng(4)
    make = _case(rng, tmp_path, 2000, 1500, 20, 30, per_doc=60)
    model = make()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        got = ld.with_delta(model, tmp_path)
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    held = sum(got.scores[k].nbytes for k in ("data", "indices", "indptr"))
    assert held > 3_000_000
    want = with_delta_reference(make(), tmp_path)
    assert all(np.array_equal(got.scores[k], want.scores[k]) for k in ("indices", "indptr"))
    assert np.array_equal(got.scores["data"].view(np.int32), want.scores["data"].view(np.int32))
    assert peak < 1.25 * held, (peak, held)
