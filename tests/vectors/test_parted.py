"""A FAISS index in parts (issue 34): a local insert's new vectors in a part of their own,
searched with the stored index as one index (the same hits as the vectors added to it)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpurag.store import IndexWriter, layout, open_index_dir
from gpurag.store.parts import part_rel
from gpurag.vectors import build_index, save_index, search
from gpurag.vectors.codec import codec_for, decode_all
from gpurag.vectors.parted import PartedIndex, delta_index

DIM = 32


def _unit(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_flat_parts_search_as_the_vectors_added_to_one_index(precision):
    codec = codec_for(precision, DIM)
    x = codec.round_trip(_unit(300, 0))
    whole = build_index(x, 10_000, codec=codec)
    parted = PartedIndex(build_index(x[:200], 10_000, codec=codec),
                         [delta_index(x[200:260], codec), delta_index(x[260:], codec)])
    q = _unit(40, 1)
    want_s, want_i = search(whole, q, 10)
    got_s, got_i = search(parted, q, 10)
    assert parted.ntotal == 300 and np.array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_s, want_s)  # int8/fp16: bit for bit (fp32: BLAS order)
    assert np.array_equal(decode_all(parted), decode_all(whole))
    rows = np.array([299, 0, 205, 199, 260])
    assert np.array_equal(decode_all(parted, rows), decode_all(whole, rows))


def test_an_hnsw_base_with_a_flat_part_finds_the_new_rows_exactly():
    x = _unit(2_000, 2)
    base = build_index(x[:1_900], 10_000, hnsw_threshold=100)
    parted = PartedIndex(base, [delta_index(x[1_900:], None)])
    exact = build_index(x, 10_000)
    q = x[1_900:] + 0.01 * _unit(100, 3)  # each query near one new row
    _, got = search(parted, q, 1)
    _, want = search(exact, q, 1)
    assert np.array_equal(got, want)
    _, got10 = search(parted, _unit(50, 4), 10)
    _, want10 = search(exact, _unit(50, 4), 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got10, want10, strict=True)])
    assert recall >= 0.9


def test_appended_faiss_parts_read_back_as_one_index(tmp_path):
    codec = codec_for("int8", DIM)
    x = codec.round_trip(_unit(100, 5))
    path = tmp_path / "idx"
    w = IndexWriter(path)
    save_index(build_index(x[:60], 10_000, codec=codec), w.path(layout.PASSAGES_FAISS))
    w.write_table(layout.CHUNKS, pd.DataFrame({"chunk_id": ["c"]}))
    w.commit({"graph": False}, {}, {})
    for lo, hi in ((60, 70), (70, 80), (80, 100)):
        d = open_index_dir(path)
        before = (path / layout.PASSAGES_FAISS).stat().st_ino
        w = IndexWriter(path)
        w.keep(d, layout.CHUNKS)
        w.append_faiss(d, layout.PASSAGES_FAISS, x[lo:hi], lambda v: delta_index(v, codec))
        w.commit({"graph": False}, {}, {})
        d.close()
        assert (path / layout.PASSAGES_FAISS).stat().st_ino == before  # the base kept
    d = open_index_dir(path)
    # 10 rows, then 10 more absorbing them (20), then 20 absorbing those: one part of 40
    assert [r for r in d.manifest.files if ".part" in r] == [part_rel(layout.PASSAGES_FAISS, 3)]
    index = d.faiss(layout.PASSAGES_FAISS)
    assert index.ntotal == 100
    assert np.array_equal(decode_all(index), decode_all(build_index(x, 10_000, codec=codec)))
    d.close()


def test_a_device_searcher_over_parts_finds_what_the_whole_index_does():
    """The device path decodes the index through ``reconstruct_n`` (a parted index is no FAISS
    object: the IVF probe must not fail on it); torch on the CPU runs the same code."""
    pytest.importorskip("torch")
    from gpurag.backends.searcher import searcher_for_index

    codec = codec_for("int8", DIM)
    x = codec.round_trip(_unit(300, 6))
    parted = PartedIndex(build_index(x[:250], 10_000, codec=codec), [delta_index(x[250:], codec)])
    q = _unit(20, 7)
    _, got = searcher_for_index(parted, "cpu", backend="torch").search(q, 5)
    _, want = search(build_index(x, 10_000, codec=codec), q, 5)
    assert np.array_equal(np.asarray(got), want)
