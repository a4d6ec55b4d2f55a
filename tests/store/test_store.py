"""The index directory: round trip, manifest contents, verification and format errors."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

import gpurag
from gpurag import Index, IndexConfig
from gpurag.config import build_plan
from gpurag.errors import IndexFormatError
from gpurag.pipeline.chunk_embed import embed_text
from gpurag.store.manifest import FORMAT_NAME, FORMAT_VERSION, MANIFEST, sha256_file
from gpurag.vectors.codec import VectorCodec


def test_round_trip_passages_match_corpus(sample_index, sample_by_id):
    index = Index.open(sample_index.path)
    assert len(index.chunks) == len(sample_index.chunks)
    for doc_id in ("p01", "p13", sorted(sample_by_id)[-1]):
        record = sample_by_id[doc_id]
        result = index.query(record["text"], k=3, mode="dense")
        top = result.passages[0]
        assert top.doc_id == doc_id, "a passage's own text must retrieve it first"
        assert top.score > 0.95
        for p in result.passages:
            src = sample_by_id[p.doc_id]
            assert p.title == src["title"]
            assert p.text == src["text"][p.char_start:p.char_end]


def test_every_document_is_in_the_index(sample_index, sample_by_id):
    chunks = sample_index.chunks
    assert set(chunks["doc_id"]) == set(sample_by_id)
    for row in chunks.itertuples():
        assert row.text == sample_by_id[row.doc_id]["text"][row.char_start:row.char_end]
    emb = sample_index.passage_vectors()
    assert emb.shape == (len(chunks), 384)
    assert sample_index.passage_index.ntotal == len(chunks)


def test_manifest_contents(sample_index, sample_records):
    path = sample_index.path
    data = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    assert data["format"] == FORMAT_NAME
    assert data["format_version"] == FORMAT_VERSION
    assert data["gpurag_version"] == gpurag.__version__
    # the build plan: the user's settings and the build profile's constants
    assert data["config"] == dataclasses.asdict(build_plan(IndexConfig(graph=False)))
    assert data["counts"]["documents"] == len(sample_records)
    assert data["counts"]["chunks"] == len(sample_index.chunks)
    assert data["components"].get("embed") and data["components"].get("vectors")
    on_disk = {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()} - {MANIFEST}
    assert set(data["files"]) == on_disk
    assert {"tables/chunks.parquet", "vectors/passages.faiss"} <= on_disk
    assert not any(rel.endswith(".npy") for rel in on_disk)  # vectors stored once, as FAISS
    for rel, meta in data["files"].items():
        assert meta["bytes"] == (path / rel).stat().st_size
        assert meta["sha256"] == sha256_file(path / rel)
    assert data["extra"]["ingest"]["documents"] == len(sample_records)


def test_info_matches_manifest(sample_index):
    info = sample_index.info()
    assert info["format_version"] == FORMAT_VERSION
    assert info["counts"] == sample_index.manifest.counts
    assert info["path"] == str(sample_index.path)


def test_verify_passes_on_intact_index(sample_index_path):
    index = Index.open(sample_index_path, verify=True)
    assert len(index.chunks) > 0


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("rel", ["tables/chunks.parquet", "vectors/passages.faiss"])
def test_flipped_byte_caught_by_verify(index_copy, rel):
    target = index_copy / rel
    size = target.stat().st_size
    _flip_byte(target, size // 2)
    assert target.stat().st_size == size
    with pytest.raises(IndexFormatError, match="checksum") as info:
        Index.open(index_copy, verify=True)
    assert rel in str(info.value)


@pytest.mark.parametrize("rel", ["tables/chunks.parquet", "vectors/passages.faiss"])
def test_truncated_file_caught_by_plain_open(index_copy, rel):
    target = index_copy / rel
    with open(target, "r+b") as fh:
        fh.truncate(target.stat().st_size - 7)
    with pytest.raises(IndexFormatError, match="bytes") as info:
        Index.open(index_copy)
    assert rel in str(info.value)


def test_missing_data_file(index_copy):
    (index_copy / "vectors" / "passages.faiss").unlink()
    with pytest.raises(IndexFormatError, match="missing") as info:
        Index.open(index_copy)
    assert "passages.faiss" in str(info.value)


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 0, None, "1"])
def test_wrong_format_version(index_copy, version):
    mpath = index_copy / MANIFEST
    data = json.loads(mpath.read_text(encoding="utf-8"))
    data["format_version"] = version
    mpath.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(IndexFormatError, match="format version") as info:
        Index.open(index_copy)
    assert str(version) in str(info.value)
    assert str(FORMAT_VERSION) in str(info.value)


def test_not_a_gpurag_manifest(index_copy):
    mpath = index_copy / MANIFEST
    data = json.loads(mpath.read_text(encoding="utf-8"))
    data["format"] = "something-else"
    mpath.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(IndexFormatError, match="not a gpurag index manifest"):
        Index.open(index_copy)


def test_corrupt_manifest_json(index_copy):
    (index_copy / MANIFEST).write_text("{not json", encoding="utf-8")
    with pytest.raises(IndexFormatError, match="corrupt manifest"):
        Index.open(index_copy)


def test_missing_manifest(index_copy):
    (index_copy / MANIFEST).unlink()
    with pytest.raises(IndexFormatError, match=r"manifest\.json is missing"):
        Index.open(index_copy)


def test_not_a_directory(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x", encoding="utf-8")
    with pytest.raises(IndexFormatError, match="not a directory"):
        Index.open(f)


def test_missing_path(tmp_path):
    with pytest.raises(IndexFormatError) as info:
        Index.open(tmp_path / "no-such-index")
    assert "no-such-index" in str(info.value)


def test_vectors_survive_round_trip(sample_index, embedder):
    emb = sample_index.passage_vectors()
    rows = [0, len(emb) // 2, len(emb) - 1]
    sub = sample_index.chunks.iloc[rows]
    fresh = embedder.encode([embed_text(t, x)
                             for t, x in zip(sub["title"], sub["text"], strict=True)])
    codec = VectorCodec(sample_index.config.vector_precision, emb.shape[1])
    step = 2 * codec.int8_range / 255  # one int8 code: batch shapes move floats by ~1e-7
    np.testing.assert_allclose(emb[rows], codec.round_trip(fresh), atol=step + 1e-6)
    assert np.abs(emb[rows] - fresh).max() > 0  # stored as int8 codes, not as computed


def test_opening_never_writes(index_copy):
    """Opening never writes into the index (read-only media, shared folders)."""
    before = {p: p.stat().st_mtime_ns for p in index_copy.rglob("*")}
    for p in index_copy.rglob("*"):
        if p.is_file():
            p.chmod(0o444)
    try:
        Index.open(index_copy, verify=True).query("anything", k=2, mode="dense")
    finally:
        for p in index_copy.rglob("*"):
            if p.is_file():
                p.chmod(0o644)
    assert {p: p.stat().st_mtime_ns for p in index_copy.rglob("*")} == before
    assert sorted(os.listdir(index_copy.parent)) == ["index"]
