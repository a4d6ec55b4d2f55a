"""An untrusted index folder reaches no traceback (issue 28, item 11, and the low item on an
emptied manifest checksum): a manifest that is a FIFO or a folder, unsealed fields of the wrong
type, and resealed tables or arrays that lack columns or hold ids out of range are each one
clear error on open (or, for the BM25 copy, a rebuild), never an exception at query time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpurag import Index
from gpurag.cli import main
from gpurag.errors import IndexFormatError
from gpurag.store import layout
from gpurag.store import manifest as manifest_mod

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample" / "corpus.jsonl"
QUESTION = "Who founded Kestrel Dynamics?"


@pytest.fixture(scope="module")
def graph_index(graph_index_path) -> Path:
    """The session's graph index of the sample corpus (tests/conftest.py); tests copy it."""
    return graph_index_path


@pytest.fixture
def copy(graph_index, tmp_path) -> Path:
    return Path(shutil.copytree(graph_index, tmp_path / "index"))


def _manifest(index: Path) -> dict:
    return json.loads((index / layout.MANIFEST).read_text(encoding="utf-8"))


def _write_manifest(index: Path, data: dict, reseal: bool = True) -> None:
    if reseal:
        data["checksum"] = manifest_mod.seal(data)
    (index / layout.MANIFEST).write_text(json.dumps(data), encoding="utf-8")


def _reseal(index: Path, rel: str) -> None:
    data = _manifest(index)
    data["files"][rel] = manifest_mod.file_record(index / rel)
    _write_manifest(index, data)


def _one_line(capsys, argv: list, *needles: str) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


COMMANDS = [["info", "{i}"], ["query", "{i}", QUESTION], ["export", "{i}", "-o", "{t}/g.graphml"],
            ["insert", "{i}", str(SAMPLE)], ["delete", "{i}", "--doc-ids", "p03"]]


def _argv(cmd: list[str], index: Path, tmp: Path) -> list[str]:
    return [c.format(i=index, t=tmp) for c in cmd]


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_manifest_that_is_a_fifo(copy, tmp_path, cmd):
    (copy / layout.MANIFEST).unlink()
    os.mkfifo(copy / layout.MANIFEST)
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPURAG_PROGRESS": "0"}
    try:  # a subprocess: the old code hung on reading the FIFO
        res = subprocess.run([sys.executable, "-m", "gpurag", *_argv(cmd, copy, tmp_path)],
                             capture_output=True, text=True, env=env, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("hung on a FIFO manifest")
    err = res.stderr.strip()
    assert res.returncode == 2 and "Traceback" not in err, err
    assert f"{copy} is not a gpurag index: its manifest.json is not a regular file" in err


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_manifest_that_is_a_folder(copy, tmp_path, capsys, cmd):
    (copy / layout.MANIFEST).unlink()
    (copy / layout.MANIFEST).mkdir()
    _one_line(capsys, _argv(cmd, copy, tmp_path), "is not a regular file")


def test_serve_refuses_a_fifo_manifest(copy):
    pytest.importorskip("fastapi")
    from gpurag.serve.holder import IndexHolder

    (copy / layout.MANIFEST).unlink()
    os.mkfifo(copy / layout.MANIFEST)
    with pytest.raises(IndexFormatError, match="not a regular file"):
        IndexHolder(copy)


@pytest.mark.parametrize("field,value", [("counts", "many"), ("counts", {"chunks": "x"}),
                                         ("components", [1, 2]), ("extra", 5),
                                         ("extra", {"version": "two"}),
                                         ("extra", {"timings_s": "slow"}),
                                         ("created", 7)])
@pytest.mark.parametrize("cmd", [COMMANDS[0], COMMANDS[3], COMMANDS[4]],
                         ids=["info", "insert", "delete"])
def test_unsealed_fields_of_the_wrong_type(copy, tmp_path, capsys, field, value, cmd):
    data = _manifest(copy)
    data[field] = value  # not sealed: the checksum still matches
    _write_manifest(copy, data, reseal=False)
    _one_line(capsys, _argv(cmd, copy, tmp_path), "corrupt manifest", repr(field)[1:-1])


def test_an_emptied_checksum_is_refused(copy, capsys):
    data = _manifest(copy)
    data["checksum"] = ""
    data["config"]["chunk_tokens"] = 17  # what the emptied checksum would let through
    _write_manifest(copy, data, reseal=False)
    _one_line(capsys, ["info", copy], "no checksum")


def test_chunks_table_without_text(copy, capsys):
    table = pq.read_table(copy / layout.CHUNKS).drop(["text"])
    pq.write_table(table, copy / layout.CHUNKS)
    _reseal(copy, layout.CHUNKS)
    _one_line(capsys, ["query", copy, QUESTION], "chunks.parquet", "no text column")


@pytest.mark.parametrize("rel,column", [(layout.ALIASES, "entity_id"),
                                        (layout.MENTIONS, "entity"),
                                        (layout.MENTIONS, "chunk"),
                                        (layout.RELATIONS, "tail_entity"),
                                        (layout.COMMUNITIES, "node")])
def test_ids_out_of_range(copy, capsys, rel, column):
    table = pq.read_table(copy / rel)
    ids = table.column(column).to_numpy().copy()
    ids[-1] = 10**6
    table = table.set_column(table.schema.get_field_index(column), column,
                             pa.array(ids, table.schema.field(column).type))
    pq.write_table(table, copy / rel)
    _reseal(copy, rel)
    _one_line(capsys, ["query", copy, QUESTION], rel, column)


def test_export_with_a_short_entities_table(copy, tmp_path, capsys):
    table = pq.read_table(copy / layout.ENTITIES)
    pq.write_table(table.slice(0, table.num_rows - 5), copy / layout.ENTITIES)
    _reseal(copy, layout.ENTITIES)
    _one_line(capsys, ["export", copy, "-o", tmp_path / "g.graphml"], "inconsistent")


def test_resealed_lexical_ids_out_of_range_are_rebuilt_not_a_crash(graph_index, copy, caplog):
    rel = f"{layout.LEXICAL_DIR}/indices.csc.index.npy"
    ids = np.load(copy / rel)
    ids[:] = 10**6
    np.save(copy / rel, ids)
    _reseal(copy, rel)
    with Index.open(graph_index) as good, Index.open(copy) as bad:
        want = [p.chunk_id for p in good.query(QUESTION).passages]
        got = [p.chunk_id for p in bad.query(QUESTION).passages]
    assert got == want
    assert "BM25 copy" in caplog.text and "outside" in caplog.text


@pytest.mark.parametrize("bad", [[3, 1], [0, 0], [-1], [10**6], "float"],
                         ids=["unsorted", "repeated", "negative", "out-of-range", "float"])
def test_resealed_tombstones_that_are_not_chunk_ids(copy, bad):
    """A tombstone array (a local delete's ``arrays/deleted_chunks.npy``) resealed with ids
    that are not sorted distinct chunk rows is one IndexFormatError on open, naming it."""
    values = np.zeros(2, np.float64) if bad == "float" else np.asarray(bad, np.int64)
    np.save(copy / layout.DELETED_CHUNKS, values, allow_pickle=False)
    _reseal(copy, layout.DELETED_CHUNKS)
    with pytest.raises(IndexFormatError, match=r"deleted_chunks|outside"):
        Index.open(copy)
