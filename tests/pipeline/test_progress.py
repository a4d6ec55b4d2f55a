"""Progress when stderr is not a terminal: stage lines, periodic rate/ETA lines, --quiet and
--log-format json (issue 30: an index run under nohup or CI must not look hung)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from gpurag.pipeline.progress import LogProgress, progress_bar
from tests.conftest import REPO, write_jsonl


def _run_to_log(tmp_path, *args: str, **env: str) -> tuple[int, str]:
    """``gpurag ARGS > log 2>&1``: stdout and stderr into one file, as under nohup."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GPURAG_")}
    environ.update(PYTHONUNBUFFERED="1", **env)
    log = tmp_path / "log"
    with open(log, "wb") as fh:
        code = subprocess.run([sys.executable, "-m", "gpurag", *args], stdout=fh,
                              stderr=subprocess.STDOUT, cwd=REPO, env=environ,
                              timeout=300).returncode
    return code, log.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory, sample_records):
    return write_jsonl(tmp_path_factory.mktemp("progress") / "docs.jsonl", sample_records[:8])


def test_index_into_a_log_file_writes_stage_lines(tmp_path, small_corpus):
    code, log = _run_to_log(tmp_path, "index", str(small_corpus), "-o", str(tmp_path / "idx"))
    assert code == 0, log
    for line in ("chunk+embed: started", "chunk+embed: done: 8 doc", "read: 8 documents",
                 "passage index: ", "extract (", "graph: step 1/5: resolving aliases",
                 "commit: ", "index: done: "):
        assert line in log, f"{line!r} not in the log:\n{log}"
    assert "\r" not in log, "no bar redraws in a log file"
    assert log.index("chunk+embed: started") < log.index("commit: ") < log.index(
        "index written to")


def test_json_log_format_gives_one_object_a_line_with_rate_and_eta(tmp_path, small_corpus):
    code, log = _run_to_log(tmp_path, "--log-format", "json", "index", str(small_corpus),
                            "-o", str(tmp_path / "idx"), GPURAG_PROGRESS_INTERVAL="0")
    assert code == 0, log
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert records and all(r["logger"] == "gpurag.progress" for r in records)
    assert "index written to" in log  # the summary on stdout stays text
    stages = {r["stage"] for r in records}
    assert {"index", "chunk+embed", "graph", "commit"} <= stages
    periodic = [r for r in records if r.get("event") == "progress" and r.get("total")]
    assert periodic and all("rate_per_s" in r and "eta_s" in r for r in periodic)
    ends = [r for r in records if r.get("event") == "end" and r["stage"] == "chunk+embed"]
    assert ends and ends[0]["done"] == 8


def test_quiet_writes_no_progress_lines(tmp_path, small_corpus):
    code, log = _run_to_log(tmp_path, "--quiet", "index", str(small_corpus), "-o",
                            str(tmp_path / "idx"), "--no-graph")
    assert code == 0, log
    assert "gpurag.progress" not in log and "chunk+embed" not in log
    assert "index written to" in log


def test_log_progress_lines_count_rate_eta_and_steps(caplog, monkeypatch):
    monkeypatch.setenv("GPURAG_PROGRESS_INTERVAL", "0")
    with caplog.at_level(logging.INFO, logger="gpurag.progress"):
        bar = LogProgress(total=4, desc="work", unit="item")
        bar.update(0)  # nothing done: no line
        bar.update(2)
        bar.set_postfix_str("second half")
        bar.set_postfix(chunks=12)
        bar.update(2)
        bar.close()
        bar.close()  # once
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "work: started of 4 item"
    assert lines[1].startswith("work: 2/4 item (50%), ") and "item/s, ETA " in lines[1]
    assert lines[2] == "work: step 3/4: second half"
    assert lines[3].startswith("work: 4/4 item (100%)") and "chunks 12" in lines[3]
    assert lines[4].startswith("work: done: 4 item in ") and lines[4].endswith("chunks 12")
    assert len(lines) == 5


def test_progress_bar_is_a_log_progress_only_off_a_terminal(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert isinstance(progress_bar(3, "x", show=None), LogProgress)
    assert not isinstance(progress_bar(3, "x", show=False), LogProgress)


def test_insert_into_a_log_file_writes_stage_lines(tmp_path, small_corpus, sample_records):
    out = tmp_path / "idx"
    code, log = _run_to_log(tmp_path, "-q", "index", str(small_corpus), "-o", str(out),
                            "--no-graph")
    assert code == 0, log
    more = write_jsonl(tmp_path / "more.jsonl", sample_records[8:11])
    code, log = _run_to_log(tmp_path, "insert", str(out), str(more))
    assert code == 0, log
    assert "chunk+embed: started" in log and "chunk+embed: done: 3 doc" in log, log


def test_memory_add_into_a_log_file_writes_progress_lines(tmp_path, sample_records):
    traces = write_jsonl(tmp_path / "traces.jsonl",
                         [{"text": r["text"], "session": "s1", "turn": i}
                          for i, r in enumerate(sample_records[:5])])
    code, log = _run_to_log(tmp_path, "memory", "add", str(tmp_path / "mem"), "--file",
                            str(traces))
    assert code == 0, log
    assert "memory add: started of 5 trace" in log, log
    assert "memory add: done: 5 trace" in log, log
    code, quiet = _run_to_log(tmp_path, "-q", "memory", "add", str(tmp_path / "mem2"), "--file",
                              str(traces))
    assert code == 0 and "memory add:" not in quiet, quiet
