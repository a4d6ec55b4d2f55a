"""Bad settings and inputs on the command line: one line on stderr, exit code 2, no traceback,
nothing left behind (no ``.work`` folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpurag.cli import main

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample" / "corpus.jsonl"


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, Path]:
    """A corpus of four sample documents and a dense index of it."""
    from gpurag import Index

    root = tmp_path_factory.mktemp("cli-edge")
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:4]
    src = root / "docs.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = root / "built" / "index"
    Index.build(src, out, graph=False, show_progress=False)
    return src, out


def _run(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_error(code: int, err: str, *needles: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("gpurag: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _no_leftovers(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.endswith((".work", ".tmp"))]


INDEX_CASES = [
    ({"GPURAG_QUERY_DAMPING": "0.5"}, [], ("GPURAG_QUERY_DAMPING", "ranking profile")),
    ({"GPURAG_THREADS": "abc"}, [], ("GPURAG_THREADS", "whole number")),
    ({"GPURAG_INDEX_GRAPH": "maybe"}, [], ("GPURAG_INDEX_GRAPH", "graph", "boolean")),
    ({"GPURAG_QUERY_PROFILE": "tuned"}, [], ("GPURAG_QUERY_PROFILE", "default")),
    ({"GPURAG_QUERY_SEED_PASSAGES": "20"}, [], ("GPURAG_QUERY_SEED_PASSAGES", "profile")),
    ({"GPURAG_QUERY_KK": "3"}, [], ("GPURAG_QUERY_KK",)),
    ({"GPURAG_QUERY_PPR_TOL": "-1e-4"}, [], ("GPURAG_QUERY_PPR_TOL", "ppr_tol")),
    ({}, ["--chunk-tokens", "-1"], ("--chunk-tokens=-1", "chunk_tokens", ">= 1")),
    ({}, ["--chunk-tokens", "16"], ("chunk_overlap=32", "chunk_tokens=16")),
    ({}, ["--chunk-tokens", "600"], ("chunk_tokens=600", "does not fit")),
    ({}, ["--extractor", "bogus"], ("--extractor='bogus'", "one of")),
]


@pytest.mark.parametrize("env,flags,needles", INDEX_CASES,
                         ids=[" ".join([*c[0], *c[1]]) for c in INDEX_CASES])
def test_bad_setting_fails_index_cleanly(capsys, monkeypatch, tmp_path, small, env, flags,
                                         needles):
    src, _ = small
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "new.index"
    code, _, err = _run(capsys, "index", src, "-o", out, *flags)
    _one_line_error(code, err, *needles)
    assert not out.exists()
    _no_leftovers(tmp_path)


def test_bad_setting_in_config_file_names_file_and_key(capsys, tmp_path, small):
    src, _ = small
    cfg = tmp_path / "gpurag.toml"
    cfg.write_text("[index]\nchunk_overlap = -4\n", encoding="utf-8")
    code, _, err = _run(capsys, "index", src, "-o", tmp_path / "x.index", "--config", cfg)
    _one_line_error(code, err, str(cfg), "[index] chunk_overlap=-4")
    _no_leftovers(tmp_path)


@pytest.mark.parametrize("env,needles", [
    ({"GPURAG_QUERY_DAMPING": "1.0"}, ("GPURAG_QUERY_DAMPING",)),
    ({"GPURAG_QUERY_K": "many"}, ("GPURAG_QUERY_K",)),
    ({"GPURAG_QUERY_MODE": "fancy"}, ("GPURAG_QUERY_MODE", "dense, graph")),
    ({"GPURAG_THREADS": "-2"}, ("GPURAG_THREADS",)),
])
def test_bad_setting_fails_query_cleanly(capsys, monkeypatch, small, env, needles):
    _, index = small
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = _run(capsys, "query", index, "what is it?")
    _one_line_error(code, err, *needles)
    assert out == ""


def test_missing_questions_file(capsys, small, tmp_path):
    _, index = small
    missing = tmp_path / "nope.txt"
    code, _, err = _run(capsys, "query", index, "--questions-file", missing)
    _one_line_error(code, err, "--questions-file", str(missing), "no such file")


def test_non_utf8_questions_file(capsys, small, tmp_path):
    _, index = small
    bad = tmp_path / "questions.txt"
    bad.write_bytes(b"who invented it?\nwhat is a caf\xe9?\n")
    code, _, err = _run(capsys, "query", index, "--questions-file", bad)
    _one_line_error(code, err, str(bad), "not UTF-8", "line 2")


def test_questions_file_that_is_a_folder(capsys, small, tmp_path):
    _, index = small
    code, _, err = _run(capsys, "query", index, "--questions-file", tmp_path)
    _one_line_error(code, err, "--questions-file", str(tmp_path))


@pytest.mark.parametrize("flags,needle", [(["-k", "0"], "-k=0"), (["--level", "-1"], "--level")])
def test_bad_query_flags(capsys, small, flags, needle):
    _, index = small
    code, _, err = _run(capsys, "query", index, "a question", *flags)
    _one_line_error(code, err, needle)


def test_good_questions_file_still_works(capsys, small, tmp_path):
    _, index = small
    questions = tmp_path / "q.txt"
    questions.write_text("\ufeffWho invented the Pellucid cell?\n\n  \nWhat is it?\n",
                         encoding="utf-8")
    code, out, err = _run(capsys, "query", index, "--questions-file", questions, "--json",
                          "-k", "2")
    assert code == 0, err
    assert [r["question"] for r in json.loads(out)] == ["Who invented the Pellucid cell?",
                                                        "What is it?"]


def test_console_script_gives_one_line_and_exit_2(tmp_path, small):
    """The real process: no traceback on stderr, rc 2, no work folder."""
    src, _ = small
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPURAG_")}
    env.update(GPURAG_PROGRESS="0", GPURAG_QUERY_DAMPING="2.5", GPURAG_THREADS="4")
    proc = subprocess.run([sys.executable, "-m", "gpurag", "index", str(src), "-o",
                           str(tmp_path / "i"), "--no-graph"], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)
    _one_line_error(proc.returncode, proc.stderr, "GPURAG_QUERY_DAMPING='2.5'")
    _no_leftovers(tmp_path)


def test_python_api_gets_the_same_errors(small, monkeypatch):
    from gpurag import Index
    from gpurag.errors import ConfigError

    _, out = small
    index = Index.open(out)
    with pytest.raises(ConfigError, match=r"query: damping=2\.5 is not valid"):
        index.query("what is it?", damping=2.5)
    with pytest.raises(ConfigError, match="seed_passages"):
        index.query_batch(["what is it?"], seed_passages=-1)
    monkeypatch.setenv("GPURAG_QUERY_SIM_POWER", "nan")
    with pytest.raises(ConfigError, match="GPURAG_QUERY_SIM_POWER"):
        Index.open(out)
