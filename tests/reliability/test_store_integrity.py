"""Index integrity (issue 17, items 1, 2, 6, 10): every damaged, malformed, incomplete or crafted
index file is a clear error on open or load, never a different ranking, a traceback or a crash.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpurag import Index
from gpurag.errors import ConfigError, IndexFormatError
from gpurag.store import IndexWriter, layout, open_index_dir
from gpurag.store import manifest as manifest_mod

# Builds of texts embedded before in the session read their vectors back.
pytestmark = pytest.mark.usefixtures("shared_embeddings")

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample" / "corpus.jsonl"
QUESTION = "Who founded Kestrel Dynamics?"
EVERY_FILE = (*layout.REQUIRED_DENSE, *layout.REQUIRED_GRAPH, *layout.LEXICAL_FILES,
              *(f for f in layout.EXTRACT_FILES if f != layout.EXTRACT_DESCRIPTIONS))


@pytest.fixture(scope="module")
def graph_index(graph_index_path) -> Path:
    """The session's graph index of the sample corpus (tests/conftest.py); tests copy it."""
    return graph_index_path


@pytest.fixture
def copy(graph_index, tmp_path) -> Path:
    return Path(shutil.copytree(graph_index, tmp_path / "index"))


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x5A]))


def _reseal(index: Path, *rels: str) -> None:
    """Rewrite the manifest records of ``rels`` as a forger would (so checksums pass)."""
    mpath = index / layout.MANIFEST
    data = json.loads(mpath.read_text(encoding="utf-8"))
    for rel in rels:
        if (index / rel).exists():
            data["files"][rel] = manifest_mod.file_record(index / rel)
        else:
            data["files"].pop(rel, None)
    _write_sealed(mpath, data)


def _write_sealed(mpath: Path, data: dict) -> None:
    data["checksum"] = manifest_mod.seal(data)
    mpath.write_text(json.dumps(data), encoding="utf-8")


def _cli(*args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPURAG_PROGRESS": "0", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "gpurag", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=300)


# -- item 6: a flipped byte anywhere is an error on a plain open -------------------------------
def test_flip_matrix_covers_every_file(graph_index):
    files = set(json.loads((graph_index / layout.MANIFEST).read_text())["files"])
    assert files >= set(EVERY_FILE)
    assert files <= set(EVERY_FILE), "a new index file must join the flipped-byte matrix"


@pytest.mark.parametrize("where", ["head", "middle", "tail"])
@pytest.mark.parametrize("rel", EVERY_FILE)
def test_flipped_byte_is_an_error_on_open(copy, rel, where):
    target = copy / rel
    size = target.stat().st_size
    _flip(target, {"head": 12, "middle": size // 2, "tail": size - 2}[where])
    with pytest.raises(IndexFormatError) as info:
        index = Index.open(copy)
        index.query_batch([QUESTION], k=3, mode="graph")
    assert rel in str(info.value)


def _answers(index_path: Path) -> list[list[str]]:
    with Index.open(index_path) as index:
        return [[p.chunk_id for p in r.passages] for r in index.query_batch(
            [QUESTION, "Where is the headquarters?"], k=5, mode="graph")]


@pytest.mark.parametrize("step", [7, 13])
def test_flipped_manifest_byte_is_an_error_or_changes_nothing(graph_index, tmp_path, step):
    """The manifest seals what decides reading (config, files); a flip elsewhere (counts,
    timings, notes) may pass, but never changes an answer."""
    want = _answers(graph_index)
    size = (graph_index / layout.MANIFEST).stat().st_size
    caught = 0
    for i, offset in enumerate(range(3, size, max(1, size // step))):
        copy = Path(shutil.copytree(graph_index, tmp_path / f"c{i}"))
        _flip(copy / layout.MANIFEST, offset)
        try:
            got = _answers(copy)
        except IndexFormatError as exc:
            assert "manifest" in str(exc)
            caught += 1
            continue
        assert got == want, f"a flip at byte {offset} of the manifest changed the answers"
    assert caught > 0


def test_large_files_are_checked_by_block_crc(tmp_path, monkeypatch):
    """Files past the size threshold are checked block by block, every byte of them."""
    monkeypatch.setattr(manifest_mod, "LARGE_FILE_BYTES", 4096)
    monkeypatch.setattr(manifest_mod, "CRC_BLOCK", 8192)
    out = tmp_path / "index"
    Index.build(SAMPLE, out, graph=False, show_progress=False).close()
    record = json.loads((out / layout.MANIFEST).read_text())["files"][layout.PASSAGES_FAISS]
    assert record["crc32"]["block"] == 8192 and len(record["crc32"]["sums"]) > 2
    Index.open(out).close()
    _flip(out / layout.PASSAGES_FAISS, record["bytes"] - 100)  # inside the last block
    with pytest.raises(IndexFormatError, match=r"checksum mismatch in vectors/passages\.faiss"):
        Index.open(out)
    with pytest.raises(IndexFormatError, match="checksum"):
        Index.open(out, verify=True)


def test_query_verify_flag(copy):
    proc = _cli("query", copy, QUESTION, "--verify", "--json", "-k", "2")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)[0]["passages"]) == 2


# -- item 2: malformed graph arrays are a clear error, never a crash --------------------------
def _out_of_range(index: Path) -> None:
    arr = np.load(index / layout.GRAPH_INDICES)
    arr[len(arr) // 2] = 10_000_000
    np.save(index / layout.GRAPH_INDICES, arr)


def _indptr_not_monotone(index: Path) -> None:
    arr = np.load(index / layout.GRAPH_INDPTR)
    arr[len(arr) // 2] = arr[-1] + 5
    np.save(index / layout.GRAPH_INDPTR, arr)


def _indices_wrong_dtype(index: Path) -> None:
    arr = np.load(index / layout.GRAPH_INDICES)
    np.save(index / layout.GRAPH_INDICES, arr.astype(np.float32))


def _weights_nan(index: Path) -> None:
    arr = np.load(index / layout.GRAPH_WEIGHTS)
    arr[3] = np.nan
    np.save(index / layout.GRAPH_WEIGHTS, arr)


def _header_garbage(index: Path) -> None:
    _flip(index / layout.GRAPH_INDPTR, 9)  # inside the .npy header


def _fact_entity_out_of_range(index: Path) -> None:
    arr = np.load(index / layout.FACT_ENTITY_INDICES)
    arr[0] = 99_999
    np.save(index / layout.FACT_ENTITY_INDICES, arr)


def _name_entity_out_of_range(index: Path) -> None:
    names = pd.read_parquet(index / layout.NAMES)
    names.loc[0, "entity"] = 99_999
    names.to_parquet(index / layout.NAMES, index=False)


@pytest.mark.parametrize("damage, rel", [
    (_out_of_range, layout.GRAPH_INDICES),
    (_indptr_not_monotone, layout.GRAPH_INDPTR),
    (_indices_wrong_dtype, layout.GRAPH_INDICES),
    (_weights_nan, layout.GRAPH_WEIGHTS),
    (_header_garbage, layout.GRAPH_INDPTR),
    (_fact_entity_out_of_range, layout.FACT_ENTITY_INDICES),
    (_name_entity_out_of_range, layout.NAMES),
])
def test_malformed_graph_array_with_resealed_manifest(copy, damage, rel):
    damage(copy)
    _reseal(copy, rel)
    open_index_dir(copy, verify=True).close()  # the forged checksums pass
    proc = _cli("query", copy, QUESTION, "--mode", "graph")
    assert proc.returncode > 0, f"killed by signal {-proc.returncode}" if proc.returncode < 0 \
        else "a malformed graph must not give an answer"
    assert rel in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# -- item 1: the committed file set is checked against the layout -----------------------------
def test_missing_required_file_with_resealed_manifest(copy):
    (copy / layout.GRAPH_WEIGHTS).unlink()
    _reseal(copy, layout.GRAPH_WEIGHTS)
    with pytest.raises(IndexFormatError, match=r"incomplete: graph/weights\.npy is missing"):
        Index.open(copy)


def test_commit_refuses_an_incomplete_layout(tmp_path):
    out = tmp_path / "index"
    writer = IndexWriter(out)
    writer.write_array(layout.FACT_ENTITY_INDPTR, np.zeros(2, np.int64))
    with pytest.raises(IndexFormatError, match=r"tables/chunks\.parquet is missing"):
        writer.commit(config={"graph": False}, counts={}, components={})
    writer.abort()
    assert not out.exists()
    assert os.listdir(tmp_path) == [], "no lock, tmp or index left behind"


# -- item 10: an index directory is untrusted input --------------------------------------------
def _set_embedder(index: Path, spec: str) -> None:
    mpath = index / layout.MANIFEST
    data = json.loads(mpath.read_text(encoding="utf-8"))
    data["config"]["embedder"] = spec
    _write_sealed(mpath, data)


def test_manifest_cannot_choose_the_model_file(copy):
    from gpurag.embed.onnx_minilm import default_model_path

    model = default_model_path()  # a real model file, which the old code loads
    spec = f"onnx:{model}"
    _set_embedder(copy, spec)
    index = Index.open(copy)
    with pytest.raises(ConfigError, match="pass it yourself") as info:
        index.query(QUESTION, k=2, mode="dense")
    assert spec in str(info.value) and "--embedder" in str(info.value)
    proc = _cli("query", copy, QUESTION, "--mode", "dense")
    assert proc.returncode == 2 and "--embedder" in proc.stderr, proc.stderr
    # Passed explicitly by the user, it is used.
    trusted = Index.open(copy, embedder=spec)
    assert len(trusted.query(QUESTION, k=2, mode="dense").passages) == 2
    proc = _cli("query", copy, QUESTION, "--mode", "dense", "--embedder", spec)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("key", ["../outside.parquet", "/etc/hostname", "tables/../../x.npy",
                                 "./tables/chunks.parquet"])
def test_manifest_paths_stay_inside_the_index(copy, key):
    outside = copy.parent / "outside.parquet"
    shutil.copy(copy / layout.CHUNKS, outside)
    mpath = copy / layout.MANIFEST
    data = json.loads(mpath.read_text(encoding="utf-8"))
    data["files"][key] = manifest_mod.file_record(outside)
    _write_sealed(mpath, data)
    with pytest.raises(IndexFormatError, match="not a path inside the index"):
        Index.open(copy)


@pytest.mark.parametrize("rel", [layout.CHUNKS, "tables"])
def test_symlinks_out_of_the_index_are_refused(copy, tmp_path, rel):
    elsewhere = tmp_path / "elsewhere"
    shutil.move(copy / rel, elsewhere)
    os.symlink(elsewhere, copy / rel)
    with pytest.raises(IndexFormatError, match="symlinks are not followed"):
        Index.open(copy)


def test_rebuild_keeps_files_it_did_not_write(index_copy):
    out = index_copy  # the sample corpus, dense
    note = out / "tables" / "my-notes.txt"
    note.write_text("keep me", encoding="utf-8")
    with pytest.raises(IndexFormatError, match=r"did not write.*tables/my-notes\.txt"):
        Index.build(SAMPLE, out, graph=False, show_progress=False, chunk_tokens=96)
    assert note.read_text(encoding="utf-8") == "keep me"
    assert Index.open(out).config.chunk_tokens != 96, "the old index is untouched"
    note.unlink()
    assert Index.build(SAMPLE, out, graph=False, show_progress=False,
                       chunk_tokens=96).config.chunk_tokens == 96


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_format_is_refused_with_a_rebuild_hint(copy, version):
    """Formats 1 and 2 stored vectors twice in float32; they are rebuilt, not misread."""
    mpath = copy / layout.MANIFEST
    data = json.loads(mpath.read_text(encoding="utf-8"))
    data["format_version"] = version
    mpath.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(IndexFormatError, match=rf"format version {version}.*rebuild it"):
        Index.open(copy)


def test_rebuild_over_a_corrupt_index(index_copy):
    """A corrupt index is rebuilt in place, but files that are not gpurag's still stop it."""
    out = index_copy  # the sample corpus, dense
    (out / layout.MANIFEST).write_text("{", encoding="utf-8")
    (out / "thesis.tex").write_text("mine", encoding="utf-8")
    with pytest.raises(IndexFormatError, match=r"did not write \(thesis\.tex\)"):
        Index.build(SAMPLE, out, graph=False, show_progress=False)
    (out / "thesis.tex").unlink()
    with Index.build(SAMPLE, out, graph=False, show_progress=False) as index:
        assert len(index.chunks) > 0


def test_a_fifo_in_place_of_a_file_is_an_error(copy):
    (copy / layout.CHUNKS).unlink()
    os.mkfifo(copy / layout.CHUNKS)
    with pytest.raises(IndexFormatError, match=r"tables/chunks\.parquet is not a regular file"):
        Index.open(copy)
