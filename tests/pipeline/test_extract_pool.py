"""Extraction batches in worker processes give exactly what one process gives."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from gpurag import Index
from gpurag.config import machine_cores
from gpurag.extract import make_extractor
from gpurag.pipeline import graph_stage
from gpurag.pipeline.extract_pool import extract_batches, pool_workers
from tests.conftest import SAMPLE


@pytest.fixture(scope="module")
def chunks() -> pd.DataFrame:
    recs = [json.loads(line) for line in
            (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line]
    return pd.DataFrame({"chunk_id": [r["id"] for r in recs], "doc_id": [r["id"] for r in recs],
                         "title": [r.get("title", "") for r in recs],
                         "text": [r["text"] for r in recs]})


def test_pooled_batches_equal_the_batches_of_one_process(chunks):
    fast = make_extractor("fast")
    one = list(extract_batches(chunks, fast, 5, 8, workers=1))
    pooled = list(extract_batches(chunks, fast, 5, 8, workers=2))
    assert [(a, n) for a, n, _ in pooled] == [(a, n) for a, n, _ in one]
    assert [a for a, _, _ in one] == list(range(5, len(chunks), 8))
    for (_, _, x), (_, _, y) in zip(one, pooled, strict=True):
        pd.testing.assert_frame_equal(x.mentions, y.mentions)
        pd.testing.assert_frame_equal(x.relations, y.relations)
        assert x.stats == y.stats


def test_only_cpu_bound_extractors_with_enough_batches_use_workers(monkeypatch):
    from gpurag.pipeline import extract_pool

    fast = make_extractor("fast")
    monkeypatch.delenv("GPURAG_EXTRACT_WORKERS", raising=False)
    monkeypatch.setattr(extract_pool, "main_module_is_guarded", lambda: True)
    assert pool_workers(fast, 15) == 1  # too few batches to pay for starting workers
    assert pool_workers(fast, 100, cap=4) == 4
    assert pool_workers(fast, 20, cap=32) == 20

    class Remote:  # an LLM-like extractor: not CPU-bound
        name = "remote"

    assert pool_workers(Remote(), 100, cap=4) == 1
    monkeypatch.setenv("GPURAG_EXTRACT_WORKERS", "1")
    assert pool_workers(fast, 100, cap=4) == 1


def test_a_users_script_keeps_extraction_in_its_process_unless_asked(monkeypatch, tmp_path):
    """A spawned worker imports ``__main__``: a script that builds at its top level would run
    again in every worker, so only gpurag's CLI, pytest and interactive sessions pool."""
    import sys
    import types

    from gpurag.pipeline import extract_pool

    fast = make_extractor("fast")
    monkeypatch.delenv("GPURAG_EXTRACT_WORKERS", raising=False)
    script = types.ModuleType("__main__")
    script.__file__ = str(tmp_path / "my_build.py")
    monkeypatch.setitem(sys.modules, "__main__", script)
    assert not extract_pool.main_module_is_guarded()
    assert pool_workers(fast, 100, cap=4) == 1
    monkeypatch.setenv("GPURAG_EXTRACT_WORKERS", "3")  # the user asks: they guard their script
    assert pool_workers(fast, 100, cap=4) == min(3, machine_cores())  # (issue 28, item 12)
    cli = types.ModuleType("__main__")
    cli.__file__ = "/venv/bin/gpurag"
    monkeypatch.setitem(sys.modules, "__main__", cli)
    monkeypatch.delenv("GPURAG_EXTRACT_WORKERS")
    assert pool_workers(fast, 100, cap=4) == 4
    interactive = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, "__main__", interactive)
    assert extract_pool.main_module_is_guarded()


def test_a_build_with_extraction_workers_equals_one_without(tmp_path, monkeypatch):
    from gpurag.pipeline import extract_pool

    used = []
    real = extract_pool.pool_workers
    monkeypatch.setattr(extract_pool, "pool_workers",
                        lambda *a, **kw: used.append(real(*a, **kw)) or used[-1])
    monkeypatch.setattr(graph_stage, "EXTRACT_BATCH", 3)  # 57 chunks: 19 batches
    monkeypatch.setenv("GPURAG_EXTRACT_WORKERS", "2")
    pooled = Index.build(SAMPLE / "corpus.jsonl", tmp_path / "pooled", show_progress=False)
    # the two workers extracted alongside chunk+embed (pipeline/extract_ahead.py): nothing
    # was left for extraction after stage 1
    assert "extract_ahead_wait_s" in pooled.manifest.extra["timings_s"] and used[-1] == 1
    monkeypatch.setenv("GPURAG_EXTRACT_WORKERS", "1")
    single = Index.build(SAMPLE / "corpus.jsonl", tmp_path / "single", show_progress=False)
    digests = [{rel: m["sha256"] for rel, m in ix.manifest.files.items()}
               for ix in (pooled, single)]
    assert digests[0] == digests[1]
