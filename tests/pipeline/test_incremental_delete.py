"""The array parts of a local delete (issue 34): tombstoned rows never found by a search of any
FAISS kind a build writes (nor of a parted index or a device searcher), decoded as zeros, and
the graph without the removed passages' edges and relation weights (ids not renumbered)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from gpurag.graph.csr import build_csr
from gpurag.pipeline.incremental_delete import shrunk_graph, split_by_chunk
from gpurag.vectors import build_index
from gpurag.vectors.codec import codec_for, decode_all
from gpurag.vectors.faiss_index import search
from gpurag.vectors.masked import MaskedIndex, drop_rows, masked
from gpurag.vectors.parted import PartedIndex, delta_index


def _vectors(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return codec_for("int8", dim).round_trip(x / np.linalg.norm(x, axis=1, keepdims=True))


KINDS = {"flat": (10_000, None), "ivf": (100, None), "hnsw": (10_000, 100)}


def _exact_without(x: np.ndarray, q: np.ndarray, gone: np.ndarray, k: int) -> np.ndarray:
    s = q @ x.T
    s[:, gone] = -np.inf
    return np.argsort(-s, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("kind", list(KINDS))
def test_masked_search_never_returns_a_deleted_row(kind):
    x = _vectors(400)
    ivf, hnsw = KINDS[kind]
    index = build_index(x, ivf, 42, hnsw, codec=codec_for("int8", 16))
    gone = np.array([0, 3, 7, 150, 399], np.int64)
    q = x[[0, 3, 7, 150, 399, 11]]  # each deleted row is its own query's nearest vector
    plain = search(index, q, 5)[1]
    assert np.isin(plain, gone).any()  # without the mask they are found
    scores, ids = search(MaskedIndex(index, gone), q, 5)
    assert not np.isin(ids, gone).any() and (ids >= 0).all()
    if kind == "flat":  # exact: the other rows' order and scores unchanged
        assert np.array_equal(ids, _exact_without(x, q, gone, 5))
        np.testing.assert_allclose(scores, np.take_along_axis(q @ x.T, ids, 1), rtol=1e-5)


def test_masked_search_over_parts_and_a_device_searcher():
    x = _vectors(300)
    base = build_index(x[:200], 10_000, 42, None, codec=codec_for("int8", 16))
    parted = PartedIndex(base, [delta_index(x[200:], codec_for("int8", 16))])
    gone = np.array([5, 199, 200, 250], np.int64)
    q = x[gone]
    ids = MaskedIndex(parted, gone).search(q, 6)[1]
    assert not np.isin(ids, gone).any()
    assert np.array_equal(ids, _exact_without(x, q, gone, 6))

    class Device:  # a searcher with no selector support: searched wider, deleted rows dropped
        ntotal, d = base.ntotal, base.d

        def search(self, q, k):
            return search(base, q, k)

    ids_dev = MaskedIndex(Device(), gone[gone < 200]).search(q, 6)[1]
    assert np.array_equal(ids_dev, MaskedIndex(base, gone[gone < 200]).search(q, 6)[1])
    assert not np.isin(ids_dev, gone).any()


def test_masked_index_decodes_deleted_rows_as_zeros_and_passes_through_when_none():
    x = _vectors(50)
    index = build_index(x, 10_000, 42, None, codec=codec_for("int8", 16))
    assert masked(index, np.zeros(0, np.int64)) is index
    out = decode_all(MaskedIndex(index, np.array([2, 9])))
    assert not out[[2, 9]].any()
    np.testing.assert_array_equal(np.delete(out, [2, 9], 0), np.delete(decode_all(index),
                                                                         [2, 9], 0))


def test_drop_rows_moves_the_others_up_and_pads():
    rows = np.array([[4, 2, 9, -1], [1, 2, 3, 4]])
    scores = np.array([[4.0, 3.0, 2.0, 0.0], [9.0, 8.0, 7.0, 6.0]], np.float32)
    s, r = drop_rows(scores, rows, np.array([2, 4]))
    assert r.tolist() == [[9, -1, -1, -1], [1, 3, -1, -1]]
    assert s.tolist() == [[2.0, 0.0, 0.0, 0.0], [9.0, 7.0, 0.0, 0.0]]


def test_shrunk_graph_takes_out_passage_edges_and_relation_weights_keeping_ids():
    # entities 0-2, passages 3-5 (passage 1 = node 4 removed); entity 2 blanked
    src = np.array([0, 0, 1, 0, 1, 2, 1])
    dst = np.array([1, 2, 2, 3, 4, 4, 5])
    w = np.array([3.0, 1.0, 0.5, 1.0, 1.0, 1.0, 2.0])
    g = build_csr(src, dst, w, 6)
    removed = pd.DataFrame({"head_entity": [0, 0], "tail_entity": [1, 2], "weight": [2.0, 1.0]})
    out = shrunk_graph(g, 3, np.array([False, True, False]), np.array([False, False, True]),
                       removed)
    want = build_csr(np.array([0, 0, 1]), np.array([1, 3, 5]), np.array([1.0, 1.0, 2.0]), 6)
    assert np.array_equal(out.indptr, want.indptr)  # node 4 stays, without edges
    assert np.array_equal(out.indices, want.indices)
    assert np.allclose(out.weights, want.weights)


def test_split_by_chunk_keeps_ids():
    table = pa.table({"entity": pa.array([1, 2, 3, 4], pa.int32()),
                      "chunk": pa.array([0, 1, 1, 2], pa.int32())})
    kept, gone = split_by_chunk(table, np.array([False, True, False]))
    assert kept.column("chunk").to_pylist() == [0, 2] and kept.schema == table.schema
    assert gone["entity"].tolist() == [2, 3]


def test_a_masked_index_on_cuda_searches_a_device_searcher_of_its_live_rows(monkeypatch):
    """query_index on cuda: the device searcher holds the live rows only and is asked for k
    (not k plus the tombstones: its scan, re-rank and memory do not grow with them); its rows
    map back to the ids, the results those of the host masked search, never a deleted id."""
    torch = pytest.importorskip("torch")
    from gpurag.backends import searcher as backend

    x = _vectors(600)
    index = build_index(x, 10_000, 42, None, codec=codec_for("fp32", 16))
    real = backend.searcher_for_index
    made, asked = [], []

    def on_cpu_torch(rows, device):  # the cuda path's torch searcher, on CPU tensors
        dev = real(rows, "cpu", backend="torch", dtype=torch.float16)
        made.append(dev)
        search = dev.search
        dev.search = lambda q, k: (asked.append(k), search(q, k))[1]
        return dev

    monkeypatch.setattr(backend, "searcher_for_index", on_cpu_torch)
    q = x[:40] + 0.05
    for gone in (np.zeros(0, np.int64), np.arange(0, 600, 3, dtype=np.int64)):
        made.clear(), asked.clear()
        out = backend.query_index(masked(index, gone), "cuda:0")
        scores, ids = out.search(q, 7)
        assert asked == [7] and made[0].ntotal == 600 - len(gone)
        assert out.ntotal == 600 and not np.isin(ids, gone).any() and (ids >= 0).all()
        s_ref, i_ref = masked(index, gone).search(q, 7)
        assert np.array_equal(ids, i_ref)
        np.testing.assert_allclose(scores, s_ref, atol=2e-3)
    everything = backend.query_index(MaskedIndex(index, np.arange(600)), "cuda:0")
    s, ids = everything.search(q, 3)
    assert (ids == -1).all() and not s.any()


def test_a_float32_flat_index_with_few_tombstones_gives_the_unmasked_search_without_them():
    """Float32 flat, WIDER_MIN_ROWS query rows or more, few tombstones: searched without
    FAISS's selector (which leaves the BLAS path) for k + |D| and the deleted dropped, so the
    ids and scores are exactly the unmasked search's (the kernel a full build is searched
    with); many tombstones keep the selector, never returning a deleted row either way."""
    from gpurag.vectors import masked as mod
    from gpurag.vectors.faiss_index import overlaps_scan, scans_every_vector

    x = _vectors(3000, 48, seed=4)
    index = build_index(x, 10_000, 42, None, codec=codec_for("fp32", 48))
    gone = np.array([3, 40, 41, 2000], np.int64)
    q = x[[3, 40, 5, 6, 7, 8, 9, 10]] + 0.01
    s_all, i_all = search(index, q, 10 + len(gone))
    keep = ~np.isin(i_all, gone)
    want_i = np.array([r[m][:10] for r, m in zip(i_all, keep, strict=True)])
    want_s = np.array([r[m][:10] for r, m in zip(s_all, keep, strict=True)])
    scores, ids = search(MaskedIndex(index, gone), q, 10)
    assert np.array_equal(ids, want_i) and np.array_equal(scores, want_s)
    many = np.arange(0, 3000, 2, dtype=np.int64)
    lots = MaskedIndex(index, many)
    old = mod.WIDER_MAX_DELETED
    try:
        mod.WIDER_MAX_DELETED = 100  # past it: the selector
        s_sel, i_sel = lots.search(q, 10)
    finally:
        mod.WIDER_MAX_DELETED = old
    s_wide, i_wide = lots.search(q, 10)
    assert not np.isin(i_sel, many).any() and not np.isin(i_wide, many).any()
    assert np.array_equal(np.sort(i_sel, 1), np.sort(i_wide, 1))
    np.testing.assert_allclose(s_sel, s_wide, atol=1e-5)
    # an index with tombstones still scans every vector (a helper thread may overlap it)
    assert scans_every_vector(MaskedIndex(index, gone)) and scans_every_vector(index)
    assert overlaps_scan(MaskedIndex(index, gone), 20) == overlaps_scan(index, 20)
    ivf = build_index(x, 100, 42, None, codec=codec_for("fp32", 48))
    assert not scans_every_vector(MaskedIndex(ivf, gone))
