"""The command line end to end, as a user runs it: ``python -m gpurag ...``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, SAMPLE_CORPUS, write_jsonl


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPURAG_")}
    env.update({"GPURAG_PROGRESS": "0", "PYTHONUNBUFFERED": "1"}, **extra)
    return env


def gpurag(*args: str, cwd=None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpurag", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd or REPO, env=_env(**env), timeout=300)


def _assert_one_line_error(code: int, stderr: str, *needles: str) -> None:
    assert code == 2, stderr
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("gpurag: error: ")
    for needle in needles:
        assert needle in lines[0]


def main_in_process(capsys, *args) -> tuple[int, str, str]:
    """Run ``gpurag.cli.main`` here (same error handling as the console script, no startup)."""
    from gpurag.cli import main

    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def cli_index(tmp_path_factory, sample_records):
    root = tmp_path_factory.mktemp("cli")
    src = write_jsonl(root / "src" / "docs.jsonl", sample_records[:15])
    out = root / "index"
    proc = gpurag("index", src, "-o", out, "--no-graph")
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_index_command(cli_index):
    out, proc = cli_index
    assert (out / "manifest.json").is_file()
    assert f"index written to {out}" in proc.stdout
    assert "documents: 15" in proc.stdout
    assert proc.stderr.strip() == "", "no progress bars or warnings with GPURAG_PROGRESS=0"


def test_query_json(cli_index, sample_records):
    out, _ = cli_index
    by_id = {r["id"]: r for r in sample_records[:15]}
    question = sample_records[3]["text"]
    proc = gpurag("query", out, question, "--json", "-k", "3")
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert isinstance(results, list) and len(results) == 1
    res = results[0]
    assert res["question"] == question and res["mode"] == "dense"
    assert [p["rank"] for p in res["passages"]] == [1, 2, 3]
    assert res["passages"][0]["doc_id"] == sample_records[3]["id"]
    for p in res["passages"]:
        assert p["text"] == by_id[p["doc_id"]]["text"][p["char_start"]:p["char_end"]]


def test_info_json_with_index(cli_index):
    from gpurag import Index

    out, _ = cli_index
    proc = gpurag("info", out, "--json", "--verify")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    idx = report["index"]
    assert idx["counts"] == Index.open(out).manifest.counts
    assert idx["counts"]["documents"] == 15
    assert idx["verified_checksums"] is True
    assert {"embed", "vectors", "device"} <= set(idx["built_with"])
    env = report["environment"]
    assert env["device"] in ("cpu", "cuda")
    assert {"embed", "vectors", "ppr", "leiden"} <= set(env["components"])


def test_info_without_index():
    proc = gpurag("info")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gpurag ")
    assert "device:" in proc.stdout and "components:" in proc.stdout
    assert "index:" not in proc.stdout


def test_bad_index_path_is_one_line_error_subprocess(tmp_path):
    proc = gpurag("query", tmp_path / "no-index-here", "a question")
    _assert_one_line_error(proc.returncode, proc.stderr, "no-index-here")


@pytest.mark.parametrize("command", ["query", "info", "info-verify"])
def test_bad_index_path_is_one_line_error(tmp_path, capsys, command):
    bad = tmp_path / "no-index-here"
    args = {"query": ["query", bad, "a question"], "info": ["info", bad],
            "info-verify": ["info", bad, "--verify", "--json"]}[command]
    code, out, err = main_in_process(capsys, *args)
    _assert_one_line_error(code, err, "no-index-here")
    assert out == ""


def test_corrupt_index_is_one_line_error(index_copy, capsys):
    (index_copy / "manifest.json").write_text("{", encoding="utf-8")
    code, _, err = main_in_process(capsys, "query", index_copy, "q")
    _assert_one_line_error(code, err, "corrupt manifest")


def test_missing_source_is_one_line_error(tmp_path, capsys):
    code, _, err = main_in_process(capsys, "index", tmp_path / "nothing", "-o", tmp_path / "x")
    _assert_one_line_error(code, err, "input not found", "nothing")


def test_bad_device_is_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GPURAG_DEVICE", "gpu")
    code, _, err = main_in_process(capsys, "index", SAMPLE_CORPUS, "-o", tmp_path / "x",
                                   "--no-graph")
    _assert_one_line_error(code, err, "GPURAG_DEVICE")
    assert not (tmp_path / "x").exists()


def test_config_file_with_unknown_key_is_one_line_error(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[index]\nchunk_tokenz = 3\n", encoding="utf-8")
    code, _, err = main_in_process(capsys, "index", SAMPLE_CORPUS, "-o", tmp_path / "x",
                                   "--config", cfg)
    _assert_one_line_error(code, err, str(cfg), "chunk_tokenz")


def test_query_without_question_is_one_line_error(sample_index_path, capsys):
    code, _, err = main_in_process(capsys, "query", sample_index_path)
    _assert_one_line_error(code, err, "give a question")


def test_query_text_output(sample_index_path, capsys, sample_questions):
    q = sample_questions[0]["question"]
    code, out, _ = main_in_process(capsys, "query", sample_index_path, q, "-k", "2")
    assert code == 0
    assert out.startswith(f"Q: {q}   [dense]")
    assert " 1. " in out and " 2. " in out and " 3. " not in out


def test_demo(tmp_path, sample_questions):
    out = tmp_path / "demo-index"
    proc = gpurag("demo", "--out", out)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for q in sample_questions:
        assert q["question"] in text
    last = [line for line in text.splitlines() if line.strip()]
    summary = next(line for line in reversed(last)
                   if line.startswith("questions with every gold passage"))
    assert f"/{len(sample_questions)}" in summary
    assert ", bridge): " in text and "]-> #2" in text  # evidence chains, labelled by rank
    assert (out / "manifest.json").is_file()
