"""Vector storage: each set stored once as FAISS codes of a fixed, untrained quantizer, a round
trip that is idempotent (so updates recompute what builds compute), and entity search as the
best of each entity's names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpurag.vectors import build_index
from gpurag.vectors.codec import PRECISIONS, VectorCodec, decode_all
from gpurag.vectors.grouped import GroupedIndex, top_groups

# Builds of texts embedded before in the session read their vectors back.
pytestmark = pytest.mark.usefixtures("shared_embeddings")


def unit(rng: np.random.Generator, n: int, d: int = 384) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_stored_vectors_decode_to_the_round_trip_whatever_else_is_indexed(precision, kind):
    rng = np.random.default_rng(1)
    x = unit(rng, 3000)
    codec = VectorCodec(precision, 384)
    kw = {"flat": {}, "hnsw": {"hnsw_threshold": 100}, "ivf": {"ivf_threshold": 100}}[kind]
    index = build_index(x, codec=codec, **kw)
    stored = codec.round_trip(x)
    np.testing.assert_array_equal(decode_all(index), stored)
    np.testing.assert_array_equal(codec.round_trip(stored), stored)  # idempotent
    # The same vectors indexed among others keep their values: no data-dependent range.
    other = build_index(np.vstack([x[:500], 3 * unit(rng, 500) / 4]), codec=codec, **kw)
    np.testing.assert_array_equal(decode_all(other, np.arange(500)), stored[:500])
    if precision != "fp32":
        assert np.abs(stored - x).max() < (2e-3 if precision == "int8" else 1e-3)


def test_int8_codes_are_a_quarter_of_float32(tmp_path):
    from gpurag.vectors import save_index

    x = unit(np.random.default_rng(2), 2000)
    sizes = {}
    for precision in PRECISIONS:
        save_index(build_index(x, codec=VectorCodec(precision, 384)), tmp_path / precision)
        sizes[precision] = (tmp_path / precision).stat().st_size
    assert sizes["int8"] < 0.26 * sizes["fp32"] and sizes["fp16"] < 0.51 * sizes["fp32"]


def test_int8_search_keeps_recall():
    """Real MiniLM vectors (sentences of the sample corpus): int8 codes find what float32
    finds."""
    import json
    import re
    from pathlib import Path

    from gpurag.backends.embed import load_embedder

    corpus = Path(__file__).resolve().parents[2] / "examples" / "sample" / "corpus.jsonl"
    texts = [s for line in corpus.read_text().splitlines() if line.strip()
             for s in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]) if len(s) > 20]
    x = load_embedder("onnx-minilm").encode(texts)
    q, db = x[::10], np.delete(x, np.s_[::10], axis=0)
    exact = build_index(db).search(q, 10)[1]
    for precision, floor in (("int8", 0.97), ("fp16", 0.995)):
        got = build_index(db, codec=VectorCodec(precision, 384)).search(q, 10)[1]
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact, got, strict=True)])
        assert recall >= floor, (precision, recall, len(db))


def test_top_groups_keeps_each_groups_best_row_in_rank_order():
    scores = np.array([[0.9, 0.8, 0.7, 0.6, 0.5], [0.9, 0.1, -1, -1, -1]], np.float32)
    rows = np.array([[3, 0, 4, 1, 2], [2, 4, -1, -1, -1]])
    group_of_row = np.array([7, 7, 5, 7, 9])
    s, g, complete = top_groups(scores, rows, group_of_row, 3)
    np.testing.assert_array_equal(g, [[7, 9, 5], [5, 9, -1]])
    np.testing.assert_allclose(s[0], [0.9, 0.7, 0.5])
    assert s[1, 2] == -np.inf
    assert complete.tolist() == [True, True]


def test_grouped_index_asks_again_when_one_group_fills_the_first_rows():
    rng = np.random.default_rng(4)
    base = unit(rng, 1)
    near = base + 0.01 * unit(rng, 40)  # 40 names of entity 0 right by the query
    far = unit(rng, 60)
    x = np.vstack([near / np.linalg.norm(near, axis=1, keepdims=True), far])
    group = np.concatenate([np.zeros(40, np.int64), 1 + np.arange(60)])
    grouped = GroupedIndex(build_index(x), group, 61)
    s, g = grouped.search(base, 5)
    assert g[0, 0] == 0 and len(set(g[0].tolist())) == 5 and (g[0] >= 0).all()
    exact = (x @ base[0])
    best = np.full(61, -np.inf)
    np.maximum.at(best, group, exact)
    np.testing.assert_array_equal(g[0], np.argsort(-best, kind="stable")[:5])
    np.testing.assert_allclose(s[0], np.sort(best)[::-1][:5], rtol=1e-5)


def test_grouped_index_on_a_torch_searcher_matches_faiss():
    """The entity index on the device path (CPU torch here): same groups, same scores."""
    rng = np.random.default_rng(5)
    x = unit(rng, 800)
    group = rng.integers(0, 300, 800)
    index = build_index(x, codec=VectorCodec("int8", 384))
    host = GroupedIndex(index, group, 300)
    from gpurag.backends.searcher import searcher_for_index

    torch = pytest.importorskip("torch")
    device = GroupedIndex(searcher_for_index(index, "cpu", backend="torch", dtype=torch.float32),
                          group, 300)
    q = unit(rng, 20)
    hs, hg = host.search(q, 8)
    ds, dg = device.search(q, 8)
    np.testing.assert_array_equal(hg, dg)
    np.testing.assert_allclose(hs, ds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_a_build_stores_its_vectors_in_the_chosen_precision(tmp_path, precision):
    """``vector_precision`` (README settings table) reaches the FAISS files of a real build."""
    import faiss

    from gpurag import Index
    from gpurag.pipeline.chunk_embed import embed_text
    from gpurag.store import layout

    sample = Path(__file__).resolve().parents[2] / "examples" / "sample" / "corpus.jsonl"
    with Index.build(sample, tmp_path / "idx", vector_precision=precision,
                     show_progress=False) as index:
        assert index.config.vector_precision == precision
        for rel in (layout.PASSAGES_FAISS, layout.NAMES_FAISS, layout.FACTS_FAISS):
            stored = faiss.read_index(str(index.dir.file(rel)))
            if precision == "fp32":
                assert isinstance(stored, faiss.IndexFlatIP), rel
            else:
                assert isinstance(stored, faiss.IndexScalarQuantizer), rel
                assert stored.sq.qtype == faiss.ScalarQuantizer.QT_fp16, rel
        fresh = index.embedder.encode([embed_text(t, x) for t, x in
                                       zip(index.chunks["title"], index.chunks["text"],
                                           strict=True)])
        np.testing.assert_allclose(index.passage_vectors(),
                                   VectorCodec(precision, 384).round_trip(fresh), atol=1e-3)
        assert index.query("Who founded Kestrel Dynamics?", k=3).passages


@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_round_trip_in_place_reuses_the_array_with_the_same_values(precision):
    """The build rounds its fresh embeddings in place: no second (n, dim) float32 copy."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((70_000, 8)).astype(np.float32)  # more than one decode block
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    codec = VectorCodec(precision, 8)
    expected = codec.round_trip(x)
    assert expected is not x
    got = codec.round_trip(x, in_place=True)
    assert got is x
    np.testing.assert_array_equal(got, expected)
