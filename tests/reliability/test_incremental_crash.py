"""A killed insert (SIGKILL, a real subprocess) leaves the previous version readable, and a rerun
resumes and completes; a second insert while one runs is refused by the write lock (issue 13).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpurag import Index
from gpurag.errors import IndexBusyError
from gpurag.pipeline.chunk_embed import embed_text
from gpurag.runtime import Runtime
from gpurag.store import layout
from tests.conftest import read_jsonl, write_jsonl

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample" / "corpus.jsonl"


@pytest.fixture(autouse=True)
def _no_embed_cache(monkeypatch):
    monkeypatch.delenv("GPURAG_EMBED_CACHE", raising=False)




def _start_insert(index: Path, source: Path) -> subprocess.Popen:
    env = {**os.environ, "GPURAG_PROGRESS": "0", "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "gpurag", "-q", "insert", str(index),
                             str(source)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _kill_when(cond, proc: subprocess.Popen, what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"the update ended before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def _assert_previous_version(index: Path, chunks: int, checksum: str) -> None:
    with Index.open(index) as old:
        assert old.manifest.checksum == checksum and len(old.chunks) == chunks
        assert old.query("Who founded Kestrel Dynamics?").passages


def test_killed_insert_keeps_the_old_version_and_a_rerun_resumes(tmp_path, monkeypatch):
    records = read_jsonl(SAMPLE)
    index = tmp_path / "idx"
    # small ingest batches: the insert checkpoints every two document parts
    base = Index.build(write_jsonl(tmp_path / "a.jsonl", records[:20]), index, show_progress=False,
                       ingest_batch_chunks=4)
    n_old, checksum = len(base.chunks), base.manifest.checksum
    base.close()
    new = [{**r, "id": f"{r['id']}-{i}", "text": f"Copy {i} of the record. {r['text']}"}
           for i in range(4) for r in records[20:]]
    source = write_jsonl(tmp_path / "b.jsonl", new)
    work = layout.sibling(index.resolve(), layout.WORK_SUFFIX)
    tmp = layout.sibling(index.resolve(), layout.TMP_SUFFIX)

    # 1. killed during chunk+embed, after two checkpoints; meanwhile a second insert is refused
    proc = _start_insert(index, source)
    try:
        deadline = time.monotonic() + 600
        while not (work / "state.json").exists() and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.005)
        with pytest.raises(IndexBusyError, match="another gpurag build is writing"):
            Index.open(index).insert(source)
    finally:
        _kill_when(lambda: (work / "chunks" / "part-00001.parquet").exists(), proc,
                   "the second chunk checkpoint")
    _assert_previous_version(index, n_old, checksum)

    # 2. killed while the new version is being written beside the index
    proc = _start_insert(index, source)
    _kill_when(lambda: (tmp / layout.CHUNKS).exists(), proc, "the new version's first table")
    _assert_previous_version(index, n_old, checksum)
    state = json.loads((work / "state.json").read_text(encoding="utf-8"))
    assert state["chunk_embed"]["done"]

    # 3. a rerun resumes (no chunk embedded again) and completes
    runtime = Runtime.create(device="cpu", progress=False)
    embedder = runtime.embedder_for(None)
    encoded: list[str] = []
    inner = embedder.encode

    def counting(texts, batch_size=64):
        encoded.extend(texts)
        return inner(texts, batch_size=batch_size)

    monkeypatch.setattr(embedder, "encode", counting)
    real_tokens = embedder.encode_tokens

    def counting_tokens(flat, lengths, batch_size=64):  # the new chunks, by the chunker's ids
        encoded.append(f"{len(lengths)} passages by token ids")
        return real_tokens(flat, lengths, batch_size=batch_size)

    monkeypatch.setattr(embedder, "encode_tokens", counting_tokens)
    grown = Index.open(index, runtime=runtime).insert(source, show_progress=False)
    chunk_texts = {embed_text(r["title"], r["text"]) for r in new}
    # only names and facts may be embedded again (a local insert embeds just the names it has
    # not stored, which can be none); never a chunk
    assert not chunk_texts & set(encoded)
    assert not [e for e in encoded if e.endswith("passages by token ids")]
    assert grown.manifest.extra["version"] == 2
    assert grown.manifest.extra["parent"]["checksum"] == checksum
    assert len(grown.chunks) == n_old + len(new)
    assert list(dict.fromkeys(grown.chunks["doc_id"])) == \
        [r["id"] for r in records[:20]] + [r["id"] for r in new]
    assert not work.exists() and not tmp.exists()


def test_killed_compact_keeps_the_local_version_and_a_rerun_completes(tmp_path):
    """kill -9 while ``gpurag compact`` writes the new version: the local version stays the
    readable one; compacting again gives the exact version (issue 34)."""
    records = read_jsonl(SAMPLE)
    index = tmp_path / "idx"
    Index.build(write_jsonl(tmp_path / "a.jsonl", records[:30]), index,
                show_progress=False).close()
    local = Index.open(index).insert(write_jsonl(tmp_path / "b.jsonl", records[30:]),
                                     show_progress=False)
    assert local.manifest.extra["incremental"]["mode"] == "local"
    n, checksum = len(local.chunks), local.manifest.checksum
    local.close()
    tmp = layout.sibling(index.resolve(), layout.TMP_SUFFIX)
    env = {**os.environ, "GPURAG_PROGRESS": "0", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "gpurag", "-q", "compact", str(index)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _kill_when(lambda: (tmp / layout.CHUNKS).exists(), proc, "the compacted version's table")
    _assert_previous_version(index, n, checksum)
    assert Index.open(index).manifest.extra["incremental"]["mode"] == "local"
    done = Index.open(index).compact(show_progress=False)
    assert done.last_update.version == 3 and "incremental" not in done.manifest.extra
    assert len(done.chunks) == n and not tmp.exists()


def test_killed_local_delete_keeps_the_old_version_and_a_rerun_completes(tmp_path):
    """kill -9 while a local ``gpurag delete`` writes the new version: the previous version
    stays the readable one, nothing is left beside it after a rerun (issue 34)."""
    records = read_jsonl(SAMPLE)
    index = tmp_path / "idx"
    base = Index.build(write_jsonl(tmp_path / "a.jsonl", records), index, show_progress=False)
    n, checksum = len(base.chunks), base.manifest.checksum
    base.close()
    gone = [r["id"] for r in records[5:9]]
    tmp = layout.sibling(index.resolve(), layout.TMP_SUFFIX)
    env = {**os.environ, "GPURAG_PROGRESS": "0", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "gpurag", "-q", "delete", str(index),
                             "--doc-ids", *gone], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    # killed once the new version holds its tombstones (and its links to the kept files)
    _kill_when(lambda: (tmp / layout.DELETED_CHUNKS).exists(), proc, "the new tombstones")
    _assert_previous_version(index, n, checksum)
    done = Index.open(index).delete(gone, show_progress=False)
    assert done.last_update.version == 2
    assert done.manifest.extra["incremental"]["mode"] == "local"
    # ids kept: the removed chunks are tombstoned rows, blank to every reader
    assert len(done.chunks) == n and done.manifest.counts["chunks"] == n - 4
    assert len(done.dir.deleted_chunks()) == 4 and not set(gone) & set(done.chunks["doc_id"])
    assert done.query("Who founded Kestrel Dynamics?").passages and not tmp.exists()


@pytest.mark.parametrize("part", [layout.CHUNKS, layout.PASSAGES_FAISS])
def test_killed_insert_writing_parts_keeps_every_file_of_the_old_version(tmp_path, part):
    """kill -9 while a local insert writes its parts (its new version links the stored files
    and absorbs the previous insert's part; a table's or a FAISS index's): the previous
    version verifies byte for byte (sha256 of every file: nothing was written through a
    link), and a rerun commits a version that verifies too (issue 34)."""
    from gpurag.store.parts import part_rel

    records = read_jsonl(SAMPLE)
    index = tmp_path / "idx"
    Index.build(write_jsonl(tmp_path / "a.jsonl", records[:30]), index,
                show_progress=False).close()
    Index.open(index).insert(write_jsonl(tmp_path / "b.jsonl", records[30:40]),
                             show_progress=False).close()
    with Index.open(index, verify=True) as first:
        assert part_rel(layout.CHUNKS, 1) in first.manifest.files
        n, checksum = len(first.chunks), first.manifest.checksum
    source = write_jsonl(tmp_path / "c.jsonl", records[40:])
    tmp = layout.sibling(index.resolve(), layout.TMP_SUFFIX)
    proc = _start_insert(index, source)
    _kill_when(lambda: (tmp / part_rel(part, 2)).exists(), proc, f"the new version's {part} part")
    assert (tmp / layout.CHUNKS).stat().st_ino == (index / layout.CHUNKS).stat().st_ino
    with Index.open(index, verify=True) as old:
        assert old.manifest.checksum == checksum and len(old.chunks) == n
        assert old.query("Who founded Kestrel Dynamics?").passages
    grown = Index.open(index).insert(source, show_progress=False)
    assert grown.manifest.extra["version"] == 3 and len(grown.chunks) == n + len(records) - 40
    grown.close()
    with Index.open(index, verify=True) as done:
        for rel in (layout.CHUNKS, layout.PASSAGES_FAISS):  # one row a chunk: part 1 absorbed
            assert part_rel(rel, 2) in done.manifest.files, rel
            assert part_rel(rel, 1) not in done.manifest.files, rel
        assert done.query("Who founded Kestrel Dynamics?").passages
    assert not tmp.exists()


_DELTAS = ("import sys; from gpurag.pipeline import incremental_local as m; "
           "from gpurag.pipeline import incremental_lexical as x; "
           "m.DELTA_FOLD_FRACTION = 100.0; m.lexical_growth = lambda cfg: 100.0; "
           "x.AVGDL_DRIFT = 100.0; "
           "from gpurag.cli import main; sys.exit(main(sys.argv[1:]))")


@pytest.mark.parametrize("part", ["graph/delta.npy", "lexical/delta.npy"])
def test_killed_insert_writing_graph_or_bm25_deltas_keeps_the_old_version(tmp_path, part,
                                                                          monkeypatch):
    """kill -9 while a local insert writes its graph or BM25 delta part (over a version that
    has one: the stored CSR and BM25 files linked, the previous part absorbed): the previous
    version verifies byte for byte and reads its merged graph, a rerun commits a version
    that verifies and reads the graph of both inserts (gpurag/graph/delta.py)."""
    from gpurag.graph import csr as csr_mod
    from gpurag.pipeline import incremental_lexical
    from gpurag.pipeline import incremental_local as local_mod
    from gpurag.store.parts import part_rel

    monkeypatch.setattr(local_mod, "DELTA_FOLD_FRACTION", 100.0)
    monkeypatch.setattr(local_mod, "lexical_growth", lambda cfg: 100.0)
    monkeypatch.setattr(incremental_lexical, "AVGDL_DRIFT", 100.0)  # these lengths vary
    records = read_jsonl(SAMPLE)
    index = tmp_path / "idx"
    Index.build(write_jsonl(tmp_path / "a.jsonl", records[:30]), index,
                show_progress=False).close()
    Index.open(index).insert(write_jsonl(tmp_path / "b.jsonl", records[30:40]),
                             show_progress=False).close()
    with Index.open(index, verify=True) as first:
        assert {part_rel("graph/delta.npy", 1), part_rel("lexical/delta.npy", 1)} <= set(
            first.manifest.files)
        n, checksum = len(first.chunks), first.manifest.checksum
        edges = csr_mod.load(first.dir.file(layout.GRAPH_DIR)).n_edges
    source = write_jsonl(tmp_path / "c.jsonl", records[40:])
    tmp = layout.sibling(index.resolve(), layout.TMP_SUFFIX)
    env = {**os.environ, "GPURAG_PROGRESS": "0", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", _DELTAS, "-q", "insert", str(index),
                             str(source)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _kill_when(lambda: (tmp / part_rel(part, 2)).exists(), proc, f"the new version's {part} part")
    linked = layout.GRAPH_WEIGHTS if part.startswith("graph") else layout.LEXICAL_FILES[2]
    assert (tmp / linked).stat().st_ino == (index / linked).stat().st_ino
    with Index.open(index, verify=True) as old:
        assert old.manifest.checksum == checksum and len(old.chunks) == n
        assert csr_mod.load(old.dir.file(layout.GRAPH_DIR)).n_edges == edges
        assert old.query("Who founded Kestrel Dynamics?").passages
    grown = Index.open(index).insert(source, show_progress=False)
    assert len(grown.chunks) == n + len(records) - 40
    grown.close()
    with Index.open(index, verify=True) as done:
        assert part_rel(part, 2) in done.manifest.files
        graph = csr_mod.load(done.dir.file(layout.GRAPH_DIR))
        assert graph.n_nodes == len(done.dir.table(layout.ENTITIES)) + len(done.chunks)
        assert graph.n_edges > edges
        assert done.query("Who founded Kestrel Dynamics?").passages
    assert not tmp.exists()
