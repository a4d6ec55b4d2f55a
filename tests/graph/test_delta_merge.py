"""The graph delta's merge on read (gpurag.graph.delta.merge) fills preallocated output arrays
block by block: the same arrays as the whole-array merge before it (tests/graph/delta_before.py),
bit for bit, over random inserts and deletes, and a reader holds little besides them."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from gpurag.graph import delta as delta_mod
from gpurag.graph.csr import build_csr
from tests.graph.delta_before import merge_reference


def _random_case(rng):
    """A random base graph and a random sequence of delta parts: entities and passages
    added (every passage id shifts), new pairs, re-weighted and REMOVED stored pairs, REMOVED
    pairs nowhere, pairs of new nodes."""
    n_e, n_p = int(rng.integers(1, 25)), int(rng.integers(1, 25))
    n0 = n_e + n_p
    m = int(rng.integers(0, 150))
    src, dst = rng.integers(0, n0, m), rng.integers(0, n0, m)
    base = build_csr(src, dst, rng.random(m).astype(np.float32) + 0.5, n0, symmetric=True)
    grow_e, grow_p = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    n_e1, n_p1 = n_e + grow_e, n_p + grow_p
    n = n_e1 + n_p1
    rows = np.repeat(np.arange(n0), np.diff(base.indptr))
    parts = []
    for _ in range(int(rng.integers(0, 5))):
        k = int(rng.integers(0, 30))
        if rng.random() < 0.5 and rows.size:  # stored pairs, in the node ids of now
            pick = rng.integers(0, rows.size, k)
            r, c = rows[pick], base.indices[pick].astype(np.int64)
            r = np.where(r >= n_e, r + grow_e, r)
            c = np.where(c >= n_e, c + grow_e, c)
        else:
            r, c = rng.integers(0, n, k), rng.integers(0, n, k)
        r, c = r[r != c], c[r != c]
        keys = np.unique(delta_mod.keys(r, c, n_e1))
        part = np.empty(keys.size, delta_mod.ENTRY)
        part["key"] = keys
        w = rng.random(keys.size).astype(np.float32) + 0.5
        w[rng.random(keys.size) < 0.4] = delta_mod.REMOVED
        part["weight"] = w
        parts.append(part)
    meta = {"base_entities": n_e, "entities": n_e1, "passages": n_p1}
    return base, meta, parts


@pytest.mark.parametrize("block", [1, 7, delta_mod.MERGE_BLOCK])
def test_blocked_merge_equals_the_whole_array_merge(monkeypatch, block):
    """200 random bases and delta sequences, any grouping of the parts (the binary counter's
    unions), any block size: indptr, indices and weights equal the reference's, dtypes and
    bits included."""
    monkeypatch.setattr(delta_mod, "MERGE_BLOCK", block)
    rng = np.random.default_rng(block)
    for _ in range(200):
        base, meta, parts = _random_case(rng)
        for grouped in (parts, [delta_mod.union(parts)],
                        [delta_mod.union(parts[:1]), delta_mod.union(parts[1:])]):
            got = delta_mod.merge(base.indptr, base.indices, base.weights, meta, grouped)
            want = merge_reference(base.indptr, base.indices, base.weights, meta, grouped)
            for g, w in zip(got, want, strict=True):
                assert g.dtype == w.dtype
                assert np.array_equal(g.view(np.uint8), w.view(np.uint8))


def test_a_merge_holds_little_besides_the_merged_graph(tmp_path, monkeypatch):
    """Over a memory-mapped base of 600k entries and a delta of 1% of them (re-weighted,
    removed and new pairs, new entities shifting the passages): the most the merge holds at
    once, measured by tracemalloc, is the merged arrays plus under a quarter of them (the
    whole-array merge held about four times the merged arrays; blocks of 8192 entries here,
    a graph this small would be a few blocks of the default)."""
    monkeypatch.setattr(delta_mod, "MERGE_BLOCK", 8192)
    rng = np.random.default_rng(3)
    n_e, n_p, m = 20_000, 40_000, 300_000
    base = build_csr(rng.integers(0, n_e + n_p, m), rng.integers(0, n_e + n_p, m),
                     rng.random(m).astype(np.float32) + 0.5, n_e + n_p, symmetric=True)
    for name in ("indptr", "indices", "weights"):
        np.save(tmp_path / f"{name}.npy", getattr(base, name))
    mapped = [np.load(tmp_path / f"{name}.npy", mmap_mode="r")
              for name in ("indptr", "indices", "weights")]
    rows = np.repeat(np.arange(n_e + n_p), np.diff(base.indptr))
    pick = rng.choice(rows.size, base.indices.size // 100, replace=False)
    r, c = rows[pick], base.indices[pick].astype(np.int64)
    grow = 50
    r, c = np.where(r >= n_e, r + grow, r), np.where(c >= n_e, c + grow, c)
    new_r, new_c = rng.integers(0, n_e + grow + n_p, 2000), rng.integers(0, n_e + n_p, 2000)
    r, c = np.concatenate([r, new_r]), np.concatenate([c, new_c])
    r, c = r[r != c], c[r != c]
    keys = np.unique(delta_mod.keys(r, c, n_e + grow))
    part = np.empty(keys.size, delta_mod.ENTRY)
    part["key"] = keys
    part["weight"] = rng.random(keys.size).astype(np.float32) + 0.5
    part["weight"][rng.random(keys.size) < 0.3] = delta_mod.REMOVED
    meta = {"base_entities": n_e, "entities": n_e + grow, "passages": n_p}
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        out = delta_mod.merge(*mapped, meta, [part])
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    held = sum(a.nbytes for a in out)
    want = merge_reference(*mapped, meta, [part])
    assert all(np.array_equal(g.view(np.uint8), w.view(np.uint8))
               for g, w in zip(out, want, strict=True))
    assert peak < 1.25 * held, (peak, held)
