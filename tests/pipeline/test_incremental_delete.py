"""The array parts of a local delete (issue 34): vectors removed or blanked in every FAISS kind
a build writes, and the graph without the removed passages and relation weights."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from gpurag.config import IndexConfig
from gpurag.graph.csr import build_csr
from gpurag.pipeline.incremental_delete import blank_vectors, shrunk_graph, shrunk_index
from gpurag.vectors import build_index
from gpurag.vectors.codec import codec_for, decode_all


def _vectors(n: int, dim: int = 16) -> np.ndarray:
    x = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    return codec_for("int8", dim).round_trip(x / np.linalg.norm(x, axis=1, keepdims=True))


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_shrunk_index_drops_rows_and_renumbers(kind):
    x = _vectors(300)
    cfg = IndexConfig(ivf_threshold=100 if kind == "ivf" else 10_000)
    index = build_index(x, cfg.ivf_threshold, cfg.seed, None, codec=codec_for("int8", 16))
    drop = np.array([0, 7, 150, 299])
    rebuilt: list[str] = []
    out = shrunk_index(index, drop, "p", cfg, False, rebuilt)
    keep = np.setdiff1d(np.arange(300), drop)
    assert out.ntotal == len(keep) and rebuilt == []
    assert np.array_equal(decode_all(out), x[keep])
    # a size below the IVF threshold is rebuilt flat, as a build would write it
    small = shrunk_index(build_index(x[:110], 100, 42, None, codec=codec_for("int8", 16)),
                         np.arange(20), "p", IndexConfig(ivf_threshold=100), False, rebuilt)
    assert rebuilt == ["p"] and np.array_equal(decode_all(small), x[20:110])


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_blank_vectors_zeroes_rows_in_place(kind):
    x = _vectors(200)
    hnsw = 50 if kind == "hnsw" else None
    index = build_index(x, 100 if kind == "ivf" else 10_000, 42, hnsw,
                        codec=codec_for("int8", 16))
    rows = np.array([3, 50, 199])
    blank_vectors(index, rows)
    got = decode_all(index)
    assert index.ntotal == 200 and not got[rows].any()
    others = np.setdiff1d(np.arange(200), rows)
    assert np.array_equal(got[others], x[others])


def test_shrunk_graph_takes_out_passages_and_relation_weights():
    # entities 0-2, passages 3-5 (passage 1 = node 4 removed); entity 2 blanked
    src = np.array([0, 0, 1, 0, 1, 2, 1])
    dst = np.array([1, 2, 2, 3, 4, 4, 5])
    w = np.array([3.0, 1.0, 0.5, 1.0, 1.0, 1.0, 2.0])
    g = build_csr(src, dst, w, 6)
    removed = pd.DataFrame({"head_entity": [0, 0], "tail_entity": [1, 2], "weight": [2.0, 1.0]})
    out = shrunk_graph(g, 3, np.array([False, True, False]), np.array([False, False, True]),
                       removed)
    want = build_csr(np.array([0, 0, 1]), np.array([1, 3, 4]), np.array([1.0, 1.0, 2.0]), 5)
    assert np.array_equal(out.indptr, want.indptr)
    assert np.array_equal(out.indices, want.indices)
    assert np.allclose(out.weights, want.weights)


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_shrunk_index_of_a_parted_index_holds_the_kept_rows_of_base_and_parts(kind):
    """A local delete hands the stored index with its parts (local inserts' vectors) to
    ``shrunk_index`` as they are; over an IVF base the parts are not assigned to its lists
    first (the kept vectors are added again anyway): base and part rows kept, in order."""
    from gpurag.vectors.parted import PartedIndex, delta_index

    x = _vectors(340)
    codec = codec_for("int8", 16)
    cfg = IndexConfig(ivf_threshold=100 if kind == "ivf" else 10_000)
    base = build_index(x[:300], cfg.ivf_threshold, cfg.seed, None, codec=codec)
    parted = PartedIndex(base, [delta_index(x[300:320], codec), delta_index(x[320:], codec)])
    drop = np.array([0, 150, 305, 339])
    rebuilt: list[str] = []
    out = shrunk_index(parted, drop, "p", cfg, False, rebuilt)
    keep = np.setdiff1d(np.arange(340), drop)
    assert not isinstance(out, PartedIndex) and out.ntotal == len(keep) and rebuilt == []
    assert type(out) is type(base)
    assert np.array_equal(decode_all(out), x[keep])


def test_renumbered_table_writes_what_the_pandas_path_wrote(tmp_path):
    """The kept rows filtered and renumbered in Arrow are the bytes the old pandas round trip
    wrote (the stored schema and its pandas metadata kept), the removed rows a frame."""
    import pyarrow.parquet as pq

    from gpurag.pipeline.incremental_delete import renumbered_table
    from gpurag.store.writer import IndexWriter

    frame = pd.DataFrame({"chunk": np.array([0, 0, 1, 2, 3, 3, 4], np.int32),
                          "name": pd.array(list("abcdefg"), dtype="string[pyarrow]"),
                          "entity": np.arange(7, dtype=np.int64)})
    src = tmp_path / "src.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), src, compression="zstd")
    drop = np.array([False, True, False, True, False])
    new_pos = np.where(~drop, np.cumsum(~drop) - 1, -1)
    kept, gone = renumbered_table(pq.read_table(src), drop, new_pos)
    stored = pq.read_table(src).to_pandas()
    chunk = stored["chunk"].to_numpy(np.int64)
    want = (stored[~drop[chunk]].assign(chunk=new_pos[chunk[~drop[chunk]]])
            .astype(stored.dtypes.to_dict()).reset_index(drop=True))
    assert gone["name"].tolist() == ["c", "e", "f"]
    w = IndexWriter.__new__(IndexWriter)  # write_table only needs path()
    w.path = lambda rel: tmp_path / rel  # type: ignore[method-assign]
    IndexWriter.write_table(w, "a.parquet", kept)
    IndexWriter.write_table(w, "b.parquet", want)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert kept.column("chunk").to_pylist() == [0, 0, 1, 2]
