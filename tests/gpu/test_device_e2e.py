"""``bench/device_e2e.py`` on the CPU, so the device check's end-to-end step works when a GPU
is lent: one build and eval through the command line, and the cpu/cuda comparison."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"
sys.path.insert(0, str(BENCH))

import device_e2e  # noqa: E402


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> dict:
    pytest.importorskip("faiss")
    out = tmp_path_factory.mktemp("e2e")
    assert device_e2e.main([str(SAMPLE), "--devices", "cpu", "--modes", "graph,bm25",
                            "--out", str(out)]) == 0
    report = json.loads(next(out.glob("device_e2e_*.json")).read_text())
    return report["datasets"]["sample"]["runs"]["cpu"]


def test_a_run_records_what_ran_the_stages_and_every_question(cpu_run):
    assert cpu_run["rc"] == 0 and cpu_run["components"]["device"] == "cpu"
    assert {"chunk_embed_s", "resolve_s", "leiden_s"} <= set(cpu_run["timings_s"])
    questions = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(cpu_run["ranks"]) == len([q for q in questions if q.strip()])
    assert set(cpu_run["modes"]) == {"graph", "bm25"}


def test_compare_counts_identical_ranks_and_metric_deltas(cpu_run):
    same = device_e2e.compare(cpu_run, cpu_run)
    assert same["identical_ranks"] == {m: same["questions"] for m in ("graph", "bm25")}
    assert all(d == 0 for row in same["metric_delta_cuda_minus_cpu"].values()
               for d in row.values())
    other = copy.deepcopy(cpu_run)
    first = next(iter(other["ranks"]))
    other["ranks"][first]["graph"] = [None] * len(other["ranks"][first]["graph"])
    other["counts"]["entities"] += 1
    diff = device_e2e.compare(cpu_run, other)
    assert diff["identical_ranks"]["graph"] == same["questions"] - 1
    assert diff["identical_ranks"]["bm25"] == same["questions"]
    assert list(diff["counts_that_differ"]) == ["entities"]


def test_a_failed_run_is_reported_not_raised(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "corpus.jsonl").write_text("", encoding="utf-8")
    (bad / "questions.jsonl").write_text("", encoding="utf-8")
    assert device_e2e.main([str(bad), "--devices", "cpu", "--out", str(tmp_path)]) == 1
    report = json.loads(next(tmp_path.glob("device_e2e_*.json")).read_text())
    assert "error" in report["datasets"]["bad"]["runs"]["cpu"]
