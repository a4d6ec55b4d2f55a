"""One clear line instead of a traceback wherever a bad path, setting or file reaches the
command line (issue 28, item 10, and the low item on /dev/shm view paths in errors)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpurag.cli import main

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample" / "corpus.jsonl"
QUESTION = "Who founded Kestrel Dynamics?"


@pytest.fixture(scope="module")
def graph_index(graph_index_path) -> Path:
    """The session's graph index of the sample corpus (tests/conftest.py); tests copy it."""
    return graph_index_path


def _one_line(capsys, argv: list[str], *needles: str) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("gpurag: error: "), err
    for needle in needles:
        assert needle in err, err
    assert "/dev/shm" not in err and "gpurag-view-" not in err, err
    return err


def test_index_out_under_proc(capsys):
    _one_line(capsys, ["-q", "index", SAMPLE, "-o", "/proc/gpurag-index", "--no-graph"],
              "/proc/")


def test_index_out_in_a_read_only_folder(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a read-only tmpfs: {res.stderr.strip()}")
    else:
        ro.chmod(0o555)
    try:
        _one_line(capsys, ["-q", "index", SAMPLE, "-o", ro / "index", "--no-graph"], str(ro))
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", "-l", str(ro)], check=False)
        else:
            ro.chmod(0o755)


@pytest.mark.parametrize("fmt,kind", [("graphml", "folder"), ("parquet", "file"),
                                      ("graphml", "proc")])
def test_export_onto_a_wrong_target(graph_index, tmp_path, capsys, fmt, kind):
    if kind == "folder":
        out = tmp_path / "taken"
        out.mkdir()
    elif kind == "file":
        out = tmp_path / "taken.txt"
        out.write_text("not a folder")
    else:
        out = Path("/proc/gpurag-export.graphml")
    _one_line(capsys, ["export", graph_index, "--format", fmt, "-o", out], str(out))
    assert kind != "file" or out.read_text() == "not a folder"


def test_export_of_a_dense_index_names_the_index_not_its_view(sample_index_path, tmp_path,
                                                              capsys):
    out = sample_index_path  # the session's dense sample index
    _one_line(capsys, ["export", out, "-o", tmp_path / "g.graphml"], str(out), "knowledge graph")


def test_corrupt_faiss_file_names_the_index_file(graph_index, tmp_path, capsys):
    import json as _json

    from gpurag.store import layout
    from gpurag.store import manifest as manifest_mod

    copy = Path(shutil.copytree(graph_index, tmp_path / "index"))
    target = copy / layout.FACTS_FAISS
    target.write_bytes(target.read_bytes()[:100])  # then reseal, as a forger would
    mpath = copy / layout.MANIFEST
    data = _json.loads(mpath.read_text())
    data["files"][layout.FACTS_FAISS] = manifest_mod.file_record(target)
    data["checksum"] = manifest_mod.seal(data)
    mpath.write_text(_json.dumps(data))
    _one_line(capsys, ["query", copy, QUESTION], str(copy / layout.FACTS_FAISS))


@pytest.mark.parametrize("where", ["under-a-file", "a-folder-as-db"])
def test_embed_cache_that_cannot_be_written(tmp_path, capsys, monkeypatch, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    cache = blocker / "cache"
    if where == "a-folder-as-db":
        cache = tmp_path / "cache"
        (cache / "embeddings.sqlite").mkdir(parents=True)
    monkeypatch.setenv("GPURAG_EMBED_CACHE", str(cache))
    _one_line(capsys, ["-q", "index", SAMPLE, "-o", tmp_path / "ix", "--no-graph"],
              "GPURAG_EMBED_CACHE")


def test_onnx_embedder_that_is_not_a_model(graph_index, tmp_path, capsys):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model at all")
    _one_line(capsys, ["query", graph_index, QUESTION, "--embedder", f"onnx:{junk}"],
              str(junk), "cannot be loaded")


def test_serve_port_out_of_range(graph_index, capsys):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    _one_line(capsys, ["serve", graph_index, "--port", "70000", "--insecure-no-auth"], "port")


def test_memory_add_file_in_latin1(tmp_path, capsys):
    traces = tmp_path / "traces.jsonl"
    traces.write_bytes(json.dumps({"text": "café"}).encode().replace(b"\\u00e9", b"\xe9")
                       + b"\n")
    assert b"\xe9" in traces.read_bytes()
    _one_line(capsys, ["memory", "add", tmp_path / "mem", "--file", traces],
              f"{traces}:1", "UTF-8")


def test_memory_add_file_nested_too_deeply(tmp_path, capsys):
    traces = tmp_path / "traces.jsonl"
    traces.write_text('{"text": "x", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    _one_line(capsys, ["memory", "add", tmp_path / "mem", "--file", traces],
              f"{traces}:1", "nested too deeply")


@pytest.mark.parametrize("dim", [0, -3])
def test_memory_settings_with_a_bad_dim(tmp_path, capsys, dim):
    mem = tmp_path / "mem"
    assert main(["memory", "add", str(mem), "a first trace", "--session", "s"]) == 0
    capsys.readouterr()
    cfg = next(p for p in mem.iterdir() if p.name == "memory.json")
    meta = json.loads(cfg.read_text())
    meta["dim"] = dim
    cfg.write_text(json.dumps(meta))
    _one_line(capsys, ["memory", "search", mem, "trace"], "dim")


def test_output_into_a_closed_pipe_is_quiet(graph_index, tmp_path):
    questions = tmp_path / "q.txt"
    questions.write_text("\n".join(f"{QUESTION} ({i})" for i in range(300)) + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPURAG_PROGRESS": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "gpurag", "query", str(graph_index),
                             "--questions-file", str(questions), "--json", "--mode", "dense"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout.read(10)
    proc.stdout.close()  # like `| head -c 10`
    err = proc.stderr.read().decode()
    rc = proc.wait()
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert rc == 141
