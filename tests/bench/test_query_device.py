"""bench/query_device.py writes its report after every batch size, atomically: a run killed by
its timeout keeps the batches it measured, and no partial file is left beside it."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _load_query_device():
    """bench/query_device.py, whose ``from query import ...`` means bench/query.py (not the
    tests' ``query`` package a test session may have imported under that name)."""
    saved, path = sys.modules.pop("query", None), list(sys.path)
    try:
        return _load("query_device")
    finally:
        sys.path[:] = path  # the script puts bench/ and the repository first
        sys.modules.pop("query", None)
        if saved is not None:
            sys.modules["query"] = saved


def test_the_report_is_saved_whole_after_each_batch(tmp_path):
    qd = _load_query_device()
    out = tmp_path / "r" / "query_device.json"
    report = {"machine": {}, "query": {"cpu": [], "cuda": []}, "skipped_batches": []}
    qd.save(report, ["cpu", "cuda"], time.perf_counter(), str(out))
    assert json.loads(out.read_text())["query"] == {"cpu": [], "cuda": []}
    report["query"]["cpu"].append({"batch": 1, "ms_per_question": 40.0, "p50_ms": 40.0})
    report["query"]["cuda"].append({"batch": 1, "ms_per_question": 4.0, "p50_ms": 5.0})
    qd.save(report, ["cpu", "cuda"], time.perf_counter(), str(out))
    saved = json.loads(out.read_text())
    assert saved["ratios"] == {"cuda_over_cpu_batch1_ms_per_q": 0.1, "cuda_over_cpu_p50": 0.125}
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left
