"""Extraction alongside chunk+embed (pipeline/extract_ahead.py): the same index, byte for
byte, as extracting after stage 1; a build that dies in stage 1 resumes to that index too."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import gpurag.pipeline.extract_ahead as extract_ahead
import gpurag.pipeline.extract_pool as extract_pool
import gpurag.pipeline.graph_stage as graph_stage
from gpurag import Index
from tests.pipeline.test_build import BoomError, _count_encodes

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample" / "corpus.jsonl"
# small checkpoints and extraction batches: many of each on part of the sample corpus
OPTS = dict(show_progress=False, ingest_batch_chunks=4)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:16]))
    return path


def files(index: Path) -> dict[str, str]:
    return {p.relative_to(index).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(index.rglob("*")) if p.is_file() and p.name != "manifest.json"}


def timings(index: Path) -> dict:
    return json.loads((index / "manifest.json").read_text())["extra"]["timings_s"]


def small_batches(m: pytest.MonkeyPatch) -> None:
    m.setattr(graph_stage, "EXTRACT_BATCH", 4)
    m.setattr(extract_pool, "MIN_BATCHES_FOR_POOL", 1)
    m.setattr(extract_ahead, "MIN_BATCHES_FOR_POOL", 1)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, corpus) -> Path:
    out = tmp_path_factory.mktemp("ref") / "index"
    with pytest.MonkeyPatch.context() as m:
        small_batches(m)
        m.setenv("GPURAG_EXTRACT_WORKERS", "1")  # extraction after stage 1, in process
        Index.build(corpus, out, **OPTS).close()
    assert "extract_ahead_wait_s" not in timings(out)
    return out


@pytest.fixture
def ahead(monkeypatch) -> list[int]:
    """Two extraction workers alongside stage 1; the rows of each batch they were given."""
    small_batches(monkeypatch)
    monkeypatch.setenv("GPURAG_EXTRACT_WORKERS", "2")
    submitted: list[int] = []
    real = extract_ahead.ExtractAhead._submit
    monkeypatch.setattr(extract_ahead.ExtractAhead, "_submit", lambda self, rows: (
        submitted.append(rows), real(self, rows))[1])
    return submitted


def test_overlapped_extraction_gives_the_same_index(tmp_path, reference, corpus, ahead):
    out = tmp_path / "ahead" / "index"
    index = Index.build(corpus, out, **OPTS)
    assert "extract_ahead_wait_s" in timings(out)
    assert sum(ahead) == len(index.chunks) and max(ahead) == 4  # every row, in batches
    index.close()
    assert files(out) == files(reference)


def test_death_in_stage_1_with_extraction_in_flight_resumes_to_the_same_index(
        tmp_path, monkeypatch, reference, corpus, ahead):
    out = tmp_path / "crash" / "index"
    with monkeypatch.context() as m:
        _count_encodes(m, fail_after=3)
        with pytest.raises(BoomError):
            Index.build(corpus, out, **OPTS)
    state = json.loads((out.parent / ".index.work" / "state.json").read_text())
    assert state["chunk_embed"]["parts"] == 3 and not state["chunk_embed"]["done"]
    extracted = state.get("extract", {"done_rows": 0})["done_rows"]
    assert extracted % 4 == 0  # whole batches only, in order
    Index.build(corpus, out, **OPTS).close()
    assert files(out) == files(reference)


KILLED_BUILD = r"""
import sys
import gpurag.pipeline.extract_ahead as extract_ahead
import gpurag.pipeline.extract_pool as extract_pool
import gpurag.pipeline.graph_stage as graph_stage
from gpurag import Index

if __name__ == "__main__":
    graph_stage.EXTRACT_BATCH = 4
    extract_pool.MIN_BATCHES_FOR_POOL = extract_ahead.MIN_BATCHES_FOR_POOL = 1
    Index.build(sys.argv[1], sys.argv[2], show_progress=False, ingest_batch_chunks=4)
"""


def test_kill_9_with_extraction_checkpoints_written_in_stage_1_resumes(
        tmp_path, monkeypatch, reference, corpus, ahead):
    import os
    import subprocess
    import sys

    from tests.reliability.test_incremental_crash import _kill_when

    out = tmp_path / "killed" / "index"
    script = tmp_path / "build.py"  # a guarded main module: it may spawn extraction workers
    script.write_text(KILLED_BUILD)
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPURAG_PROGRESS": "0",
           "GPURAG_EXTRACT_WORKERS": "2"}
    proc = subprocess.Popen([sys.executable, str(script), str(corpus), str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    work = out.parent / ".index.work"
    _kill_when(lambda: (work / "extract" / "mentions-00001.parquet").exists(), proc,
               "an extraction checkpoint")
    Index.build(corpus, out, **OPTS).close()
    assert files(out) == files(reference)


def _children(pid: int) -> list[int]:
    """The live (not zombie) processes whose parent is ``pid`` (Linux /proc)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _left_behind(kids: list[int], timeout: float = 60) -> list[int]:
    """Those of ``kids`` still alive after up to ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while any(map(_alive, kids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [k for k in kids if _alive(k)]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_extraction_workers_end_with_a_killed_build(tmp_path, corpus, sig):
    """Each worker (and the resource tracker) exits once the build is killed: a worker left
    waiting on its call queue would sleep forever, holding its memory."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "orphans" / "index"
    script = tmp_path / "build.py"
    script.write_text(KILLED_BUILD)
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPURAG_PROGRESS": "0",
           "GPURAG_EXTRACT_WORKERS": "2"}
    proc = subprocess.Popen([sys.executable, str(script), str(corpus), str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = out.parent / ".index.work" / "extract" / "mentions-00000.parquet"
    deadline = time.monotonic() + 300
    kids: list[int] = []
    while len(kids) < 3:  # the resource tracker and both workers
        assert proc.poll() is None, "the build ended before its workers started"
        assert time.monotonic() < deadline, "timed out waiting for the extraction workers"
        time.sleep(0.01)
        kids = _children(proc.pid) if first.exists() else []
    try:
        os.kill(proc.pid, getattr(signal, sig))
        proc.wait(timeout=60)
        assert not _left_behind(kids), f"left behind after {sig}"
    finally:
        for k in kids:
            if _alive(k):
                os.kill(k, signal.SIGKILL)


CLI_BUILD = r"""
import sys
import gpurag.pipeline.extract_ahead as extract_ahead
import gpurag.pipeline.extract_pool as extract_pool
import gpurag.pipeline.graph_stage as graph_stage
from gpurag.cli import main

if __name__ == "__main__":
    graph_stage.EXTRACT_BATCH = 4
    extract_pool.MIN_BATCHES_FOR_POOL = extract_ahead.MIN_BATCHES_FOR_POOL = 1
    sys.exit(main(["--quiet", "index", sys.argv[1], "-o", sys.argv[2]]))
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_stops_gpurag_index_as_ctrl_c_does(tmp_path, corpus):
    """``kill PID`` of ``gpurag index``: the workers stop, the work is kept, and the command
    says that a rerun resumes (exit status 130, as for Ctrl-C)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "term" / "index"
    script = tmp_path / "cli_build.py"
    script.write_text(CLI_BUILD)
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPURAG_PROGRESS": "0",
           "GPURAG_EXTRACT_WORKERS": "2"}
    proc = subprocess.Popen([sys.executable, str(script), str(corpus), str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    work = out.parent / ".index.work"
    deadline = time.monotonic() + 300
    while not (work / "extract" / "mentions-00000.parquet").exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "timed out waiting for an extraction checkpoint"
        time.sleep(0.01)
    kids = _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted (a rerun of the same index command resumes)" in err
    assert (work / "state.json").exists() and not out.exists()
    assert not _left_behind(kids)
