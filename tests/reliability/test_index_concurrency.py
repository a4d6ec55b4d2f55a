"""Concurrent writers and readers of one index path (issue 17, items 1 and 7).

A second build of the same output is refused while the first runs, and the first commits a
complete index; an opened index stays pinned to its version while another process rebuilds the
path again and again, and fresh opens during those commits never fail or mix versions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpurag import Index
from gpurag.errors import IndexBusyError
from gpurag.store import WriteLock, layout
from tests.conftest import read_jsonl, write_jsonl

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample" / "corpus.jsonl"
QUESTIONS = ["Who founded Kestrel Dynamics?", "Where is the company headquartered?",
             "What did the research team discover?"]




def _env() -> dict[str, str]:
    return {**os.environ, "GPURAG_PROGRESS": "0", "PYTHONPATH": str(REPO)}


def _wait_for(cond, proc: subprocess.Popen, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"process ended before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# -- item 1: one writer per output path --------------------------------------------------------
_SECOND = """
import sys, time, pathlib
import gpurag.cli, gpurag.pipeline.build  # imported before the go signal: no start-up delay
flag = pathlib.Path(sys.argv[1])
while not flag.exists():
    time.sleep(0.01)
sys.exit(gpurag.cli.main(sys.argv[2:]))
"""


def test_second_build_of_the_same_output_is_refused(tmp_path):
    records = read_jsonl(SAMPLE)
    twice = records + [{**r, "id": r["id"] + "-b", "text": "Second copy. " + r["text"]}
                       for r in records]  # a longer first build
    src = write_jsonl(tmp_path / "src" / "docs.jsonl", twice)
    out = tmp_path / "same.index"
    flag = tmp_path / "go"
    second = subprocess.Popen([sys.executable, "-c", _SECOND, flag, "index", src, "-o", out],
                              env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    first = subprocess.Popen([sys.executable, "-m", "gpurag", "index", src, "-o", out],
                             env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    _wait_for(layout.sibling(out, layout.WORK_SUFFIX).exists, first, "the first build started")
    flag.touch()
    out2, err2 = second.communicate(timeout=300)
    first_running = first.poll() is None
    out1, err1 = first.communicate(timeout=600)
    assert first_running, "the first build must still be running when the second one ends"
    assert second.returncode == 2, (out2, err2)
    assert "another gpurag build is writing" in err2 and str(out) in err2
    assert "pid" in err2
    assert first.returncode == 0, err1
    assert f"index written to {out}" in out1

    index = Index.open(out, verify=True)
    assert set(layout.required_files(index.manifest.config)) <= set(index.manifest.files)
    assert set(index.chunks["doc_id"]) == {r["id"] for r in twice}
    assert index.query(QUESTIONS[0], k=3, mode="graph").passages
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go", "same.index", "src"], \
        "no lock, work or temporary folder left"


@pytest.mark.usefixtures("shared_embeddings")  # in-process builds, no race to win
def test_build_refused_while_the_lock_is_held(tmp_path):
    src = write_jsonl(tmp_path / "src" / "docs.jsonl", read_jsonl(SAMPLE)[:4])
    out = tmp_path / "index"
    with WriteLock(out):
        with pytest.raises(IndexBusyError, match="another gpurag build is writing"):
            Index.build(src, out, graph=False, show_progress=False)
        assert not layout.sibling(out, layout.WORK_SUFFIX).exists()
    assert not layout.sibling(out, layout.LOCK_SUFFIX).exists()
    Index.build(src, out, graph=False, show_progress=False).close()
    assert sorted(os.listdir(tmp_path)) == ["index", "src"]


# -- item 7: an opened index is pinned to its version ------------------------------------------
@pytest.mark.usefixtures("shared_embeddings")  # in-process builds, no race to win
def test_index_held_across_an_in_place_rebuild(tmp_path):
    records = read_jsonl(SAMPLE)
    src_a = write_jsonl(tmp_path / "a" / "docs.jsonl", records[:12])
    src_b = write_jsonl(tmp_path / "b" / "docs.jsonl", records[12:])
    out = tmp_path / "index"
    Index.build(src_a, out, show_progress=False).close()
    ref = Index.open(Path(shutil.copytree(out, tmp_path / "copy-a")))
    held = Index.open(out)  # the graph part is loaded only on first use, after the rebuild
    Index.build(src_b, out, show_progress=False).close()
    a_docs = {r["id"] for r in records[:12]}
    got = held.query_batch(QUESTIONS, k=5, mode="graph")
    want = ref.query_batch(QUESTIONS, k=5, mode="graph")
    for g, w in zip(got, want, strict=True):
        assert [p.chunk_id for p in g.passages] == [p.chunk_id for p in w.passages]
        assert {p.doc_id for p in g.passages} <= a_docs
    assert set(Index.open(out).chunks["doc_id"]) == {r["id"] for r in records[12:]}


_REBUILDER = """
import sys
from gpurag import Index
out, sources, rounds = sys.argv[1], sys.argv[2:4], int(sys.argv[4])
for i in range(rounds):
    Index.build(sources[(i + 1) % 2], out, show_progress=False).close()
"""


def test_readers_during_repeated_rebuilds_never_fail_or_mix(tmp_path):
    records = read_jsonl(SAMPLE)
    docs = [records[:10], records[10:20]]
    srcs = [write_jsonl(tmp_path / f"s{i}" / "docs.jsonl", d) for i, d in enumerate(docs)]
    versions = [frozenset(r["id"] for r in d) for d in docs]
    out = tmp_path / "index"
    Index.build(srcs[0], out, show_progress=False).close()
    ref = Index.open(Path(shutil.copytree(out, tmp_path / "copy")))
    held_want = [[p.chunk_id for p in r.passages]
                 for r in ref.query_batch(QUESTIONS, k=4, mode="graph")]
    held = Index.open(out)  # queried (its graph loaded) only after the path was rebuilt

    writer = subprocess.Popen([sys.executable, "-c", _REBUILDER, out, *srcs, "4"], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errors: list[str] = []
    seen: list[int] = []
    opens = held_checks = 0
    while writer.poll() is None or opens < 3:
        try:
            with Index.open(out) as index:
                have = frozenset(index.chunks["doc_id"])
                assert have in versions, "an opened index holds one version's chunks"
                for result in index.query_batch(QUESTIONS, k=4, mode="graph"):
                    assert {p.doc_id for p in result.passages} <= have
                if not seen or seen[-1] != versions.index(have):
                    seen.append(versions.index(have))
            if len(seen) >= 2:
                got = [[p.chunk_id for p in r.passages]
                       for r in held.query_batch(QUESTIONS, k=4, mode="graph")]
                assert got == held_want, "a held index keeps answering from its own version"
                held_checks += 1
        except Exception as exc:  # every failure is collected, the loop goes on
            errors.append(f"{type(exc).__name__}: {exc}")
        opens += 1
    _, err = writer.communicate()
    assert writer.returncode == 0, err
    assert errors == [], f"{len(errors)} of {opens} opens failed: {errors[:3]}"
    assert len(seen) >= 3, f"the readers must see the versions change (saw {seen})"
    assert held_checks > 0


@pytest.mark.usefixtures("shared_embeddings")  # in-process builds, no race to win
def test_commit_without_atomic_exchange(tmp_path, monkeypatch):
    """Where the kernel has no directory exchange, two renames (recovered on open) still work."""
    import gpurag.store.writer as writer_mod

    monkeypatch.setattr(writer_mod, "_exchange", lambda a, b: False)
    records = read_jsonl(SAMPLE)
    src_a = write_jsonl(tmp_path / "a" / "docs.jsonl", records[:5])
    src_b = write_jsonl(tmp_path / "b" / "docs.jsonl", records[5:9])
    out = tmp_path / "index"
    held = Index.build(src_a, out, graph=False, show_progress=False)
    Index.build(src_b, out, graph=False, show_progress=False).close()
    assert set(held.chunks["doc_id"]) == {r["id"] for r in records[:5]}
    assert held.query(records[0]["text"], k=1, mode="dense").passages[0].doc_id == records[0]["id"]
    assert set(Index.open(out).chunks["doc_id"]) == {r["id"] for r in records[5:9]}
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "index"]
