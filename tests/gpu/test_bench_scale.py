"""The scaling bench's pieces on the CPU: synthetic power-law graphs, corpus prefixes, the
storage-precision measurement, and one tiny end-to-end run of ``bench/scale.py``."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import scale  # noqa: E402
import synthetic  # noqa: E402


def _check_symmetric_csr(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray) -> None:
    import scipy.sparse as sp

    n = indptr.size - 1
    a = sp.csr_array((weights, indices, indptr), shape=(n, n))
    assert (a != a.T).nnz == 0
    assert a.diagonal().sum() == 0
    assert indices.dtype == np.int32 and indptr.dtype == np.int64 and weights.dtype == np.float32


def test_numpy_power_law_graph_is_symmetric_heavy_tailed_and_near_the_size():
    indptr, indices, weights = synthetic.power_law_numpy(200_000, seed=3)
    _check_symmetric_csr(indptr, indices, weights)
    assert 0.8 * 200_000 <= indices.size <= 1.2 * 200_000
    degree = np.diff(indptr)
    assert degree.max() > 20 * np.median(degree[degree > 0])  # hubs
    again = synthetic.power_law_numpy(200_000, seed=3)
    np.testing.assert_array_equal(again[1], indices)


def test_torch_power_law_graph_on_cpu():
    pytest.importorskip("torch")
    (indptr, indices, weights), name = synthetic.power_law_csr(50_000, "cpu", "torch")
    assert name.startswith("torch")
    _check_symmetric_csr(indptr, indices, weights)


def test_prefix_and_storage_precision(tmp_path):
    src = tmp_path / "p.jsonl.gz"
    with gzip.open(src, "wt", encoding="utf-8") as fh:
        for i in range(10):
            fh.write(json.dumps({"id": str(i), "title": "t", "text": "é" * i}) + "\n")
    n, text_bytes = scale.write_prefix(src, 4, tmp_path / "out.jsonl")
    assert n == 4 and text_bytes == 2 * (0 + 1 + 2 + 3)
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 4
    assert scale.write_prefix(src, 0, tmp_path / "all.jsonl")[0] == 10
    pytest.importorskip("faiss")  # the precision check uses FAISS's scalar quantizer
    from gpurag import Index

    sample = Path(scale.__file__).resolve().parents[1] / "examples" / "sample" / "corpus.jsonl"
    Index.build(sample, tmp_path / "index", show_progress=False).close()
    rows = {r["vectors"]: r for r in scale.storage_precision(tmp_path / "index", sample=300,
                                                             queries=30)}
    assert "names" in rows and set(rows) <= {"passages", "names", "facts"}
    for row in rows.values():
        assert 0 < row["queries"] <= 30 and row["stored_as"] == "int8" and row["dim"] == 384
        assert row["recall_fp16"] >= 0.99 and 0.9 < row["recall_int8"] <= 1.0


def test_scale_runs_end_to_end_on_a_tiny_graph(tmp_path, capsys):
    pytest.importorskip("faiss")
    result = scale.main(["--prefixes", "", "--edges", "2e4", "--batches", "1,4",
                         "--knn-max", "500", "--min-runs", "1", "--max-runs", "2",
                         "--case-s", "0", "--out", str(tmp_path), "--budget-s", "300"])
    (graph,) = result["graph"]
    assert "error" not in graph, graph
    assert [r["q"] for r in graph["ppr"]] == [1, 4] and [r["q"] for r in graph["knn"]] == [1, 4]
    assert graph["knn"][0]["implementation"].startswith("faiss-cpu")
    assert all(r["p95_ms"] >= r["p50_ms"] > 0 for r in graph["ppr"] + graph["knn"])
    assert graph["peak_rss_bytes"] > 0 and graph["generator"] == "numpy Chung-Lu"
    saved = json.loads(next(tmp_path.glob("scale_*.json")).read_text())
    assert saved["graph"][0]["edges"] == graph["edges"]
    assert "ppr+top10 q=4" in capsys.readouterr().out



def test_the_budget_counts_from_the_start_of_the_run(tmp_path, monkeypatch):
    # The module may be imported long before main() runs (a test session, a notebook): a
    # budget counted from the import would skip every case.
    monkeypatch.setattr(scale, "_START", [scale.time.perf_counter() - 10_000.0])
    seen = []
    monkeypatch.setattr(scale, "run_child",
                        lambda kind, extra, args: seen.append(scale.elapsed()) or {"skipped": "x"})
    scale.main(["--prefixes", "", "--edges", "2e4", "--out", str(tmp_path), "--budget-s", "300"])
    assert seen and max(seen) < 60


def test_build_children_may_spawn_extraction_workers(tmp_path, monkeypatch):
    """A build child is this guarded script, so it extracts with a worker pool as the command
    line does; a script is not trusted to spawn workers unless GPURAG_EXTRACT_WORKERS says so."""
    seen = {}

    def fake_run(cmd, **kw):
        seen.update(kw["env"])
        return scale.subprocess.CompletedProcess(cmd, 0, stdout="{}")

    monkeypatch.delenv("GPURAG_EXTRACT_WORKERS", raising=False)
    monkeypatch.setattr(scale.subprocess, "run", fake_run)
    args = scale.parse_args(["--out", str(tmp_path)])
    scale.run_child("build", [], args)
    from gpurag.pipeline.extract_pool import available_cores

    assert seen["GPURAG_EXTRACT_WORKERS"] == str(available_cores())
    monkeypatch.setenv("GPURAG_EXTRACT_WORKERS", "1")  # the caller's choice stands
    scale.run_child("build", [], args)
    assert seen["GPURAG_EXTRACT_WORKERS"] == "1"
