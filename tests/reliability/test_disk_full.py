"""A full disk never commits a broken index (issue 28, items 1 and 9).

The disk-full cases run on a small tmpfs (mounting needs root; they skip cleanly elsewhere) that
is filled up only while ``passages.faiss`` is written, leaving room for everything but the last
buffered bytes: exactly where ``faiss.write_index`` only prints its close error. The commit's
read-back is also tested without a tmpfs, on files cut short by hand (a write that failed
without raising).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpurag import Index
from gpurag import cli as cli_mod
from gpurag.config import IndexConfig
from gpurag.errors import GpuragError, WriteError
from gpurag.pipeline import build as build_mod
from gpurag.store import IndexWriter, layout
from tests.conftest import copy_index

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample" / "corpus.jsonl"
QUESTION = "Who founded Kestrel Dynamics?"
PAGE = 4096
DENSE = IndexConfig(graph=False)


@pytest.fixture
def tmpfs(tmp_path) -> Path:
    """A 4 MiB tmpfs, unmounted afterwards; skipped where mounting is not allowed."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@contextlib.contextmanager
def _full_disk(mnt: Path, leave: int):
    """Fill ``mnt`` until ``leave`` bytes (whole pages) are free; free it all afterwards."""
    filler = mnt / f"filler-{uuid.uuid4().hex}"
    with open(filler, "wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * PAGE)
    size = filler.stat().st_size // PAGE * PAGE
    os.truncate(filler, max(0, size - leave))
    assert _free(mnt) == leave, (_free(mnt), leave)
    try:
        yield
    finally:
        filler.unlink()


def _filling_save(mnt: Path, state: dict):
    """``save_index`` that fills the disk while the passage index is written, leaving room
    for all but its last partial page."""
    real = build_mod.save_index

    def save(index, path):
        import faiss

        size = len(faiss.serialize_index(index))
        assert size % PAGE, "the index must end in a partial page"
        with _full_disk(mnt, size // PAGE * PAGE):
            state["calls"] = state.get("calls", 0) + 1
            real(index, path)

    return save


def _smaller_corpus(tmp_path: Path) -> Path:
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    out = tmp_path / "v2.jsonl"
    out.write_text("\n".join(lines[: len(lines) // 2]) + "\n", encoding="utf-8")
    return out


def _answer(index_path: Path) -> list[str]:
    with Index.open(index_path) as index:
        return [p.chunk_id for p in index.query(QUESTION, k=3, mode="dense").passages]


def test_full_disk_during_faiss_write_keeps_the_previous_version(tmpfs, tmp_path, monkeypatch,
                                                                 sample_index_path):
    out = copy_index(sample_index_path, tmpfs / "index")  # the sample corpus, dense
    before = _answer(out)
    manifest = (out / layout.MANIFEST).read_bytes()

    state: dict = {}
    monkeypatch.setattr(build_mod, "save_index", _filling_save(tmpfs, state))
    with pytest.raises((OSError, GpuragError)) as err:
        Index.build(_smaller_corpus(tmp_path), out, config=DENSE, show_progress=False)
    assert state["calls"] == 1
    assert "passages.faiss" in str(err.value) or "No space" in str(err.value)

    # The previous version is in place, untouched, and answers as before.
    assert (out / layout.MANIFEST).read_bytes() == manifest
    with Index.open(out, verify=True):
        pass
    assert _answer(out) == before
    assert not layout.sibling(out, layout.TMP_SUFFIX).exists()


def test_full_disk_is_one_line_on_the_command_line(tmpfs, tmp_path, monkeypatch, capsys):
    out = tmpfs / "index"
    monkeypatch.setattr(build_mod, "save_index", _filling_save(tmpfs, {}))
    rc = cli_mod.main(["-q", "index", str(SAMPLE), "-o", str(out), "--no-graph"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith("gpurag: error: no space left on the device writing ")
    assert "passages.faiss" in err and "MiB free there" in err
    assert not out.exists()


def test_full_disk_before_any_work_is_one_line(tmpfs, capsys):
    """The disk is already full when the build starts (work folder, first part files)."""
    with _full_disk(tmpfs, 0):
        rc = cli_mod.main(["-q", "index", str(SAMPLE), "-o", str(tmpfs / "index"),
                           "--no-graph"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"gpurag: error: no space left on the device writing {tmpfs}/")


def test_full_disk_in_insert_is_one_line(tmpfs, tmp_path, capsys):
    out = tmpfs / "index"
    Index.build(_smaller_corpus(tmp_path), out, config=DENSE, show_progress=False).close()
    manifest = (out / layout.MANIFEST).read_bytes()
    with _full_disk(tmpfs, 0):
        rc = cli_mod.main(["-q", "insert", str(out), str(SAMPLE)])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"gpurag: error: no space left on the device writing {tmpfs}/")
    assert (out / layout.MANIFEST).read_bytes() == manifest


def test_full_disk_in_memory_add_is_one_line(tmpfs, capsys):
    mem = tmpfs / "memory"
    assert cli_mod.main(["memory", "add", str(mem), "first trace", "--session", "s"]) == 0
    capsys.readouterr()
    with _full_disk(tmpfs, 0):
        rc = cli_mod.main(["memory", "add", str(mem), "x" * 20000, "--session", "s"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "no space left on the device" in err


# Without a tmpfs: files cut short as a quietly failed write would leave them.

def _writer_with(tmp_path: Path) -> IndexWriter:
    import faiss

    target = tmp_path / "index"
    w = IndexWriter(target)
    w.write_table(layout.CHUNKS, pd.DataFrame({"chunk_id": ["a", "b"], "text": ["x", "y"]}))
    index = faiss.IndexFlatIP(8)
    index.add(np.eye(2, 8, dtype=np.float32))
    from gpurag.vectors import save_index

    save_index(index, w.path(layout.PASSAGES_FAISS))
    return w


@pytest.mark.parametrize("rel", [layout.PASSAGES_FAISS, layout.CHUNKS])
@pytest.mark.parametrize("keep", [0, 0.5])
def test_commit_refuses_a_short_file(tmp_path, rel, keep):
    w = _writer_with(tmp_path)
    path = w.tmp / rel
    os.truncate(path, int(path.stat().st_size * keep))
    with pytest.raises(WriteError, match="did not read back"):
        w.commit(config=dataclasses.asdict(DENSE), counts={}, components={})
    w.abort()
    assert not w.target.exists()


def test_commit_refuses_a_short_array(tmp_path):
    w = _writer_with(tmp_path)
    w.write_array("arrays/extra.npy", np.arange(1000, dtype=np.int64))
    path = w.tmp / "arrays/extra.npy"
    os.truncate(path, path.stat().st_size - 8)
    with pytest.raises(WriteError, match=r"arrays/extra\.npy"):
        w.commit(config=dataclasses.asdict(DENSE), counts={}, components={})
    w.abort()


def test_commit_accepts_whole_files(tmp_path):
    w = _writer_with(tmp_path)
    w.write_array("arrays/extra.npy", np.arange(10, dtype=np.int64))
    target = w.commit(config=dataclasses.asdict(DENSE), counts={}, components={})
    assert json.loads((target / layout.MANIFEST).read_text())["files"]
