"""Local inserts (issue 34): only the new documents' work, answers within the stated tolerance
of a full build, and ``compact`` gives the full build back byte for byte.

The sample corpus split A/B as in test_incremental.py (small extractor batches, so the open
batch a local insert does not re-extract really differs from a build's).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpurag import Index
from gpurag.cli import main
from gpurag.pipeline import graph_stage, incremental
from gpurag.runtime import Runtime
from gpurag.store import layout
from tests.pipeline.test_incremental import (
    BATCH,
    SPLIT,
    _file_digests,
    _records,
    _retrieval,
    _write,
    assert_equivalent,
)


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch):
    monkeypatch.setattr(graph_stage, "EXTRACT_BATCH", BATCH)
    monkeypatch.setattr(incremental, "EXTRACT_BATCH", BATCH)


@pytest.fixture(scope="module")
def runtime():
    return Runtime.create(device="cpu", progress=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    records = _records()
    return {"A": _write(root / "a" / "A.jsonl", records[:SPLIT]),
            "B1": _write(root / "b1" / "B1.jsonl", records[SPLIT:SPLIT + 10]),
            "B2": _write(root / "b2" / "B2.jsonl", records[SPLIT + 10:]),
            "AB": _write(root / "ab" / "AB.jsonl", records),
            "b_ids": [r["id"] for r in records[SPLIT:]]}


def _within_tolerance(got: Index, want: Index) -> None:
    (top_a, rec_a), (top_b, rec_b) = _retrieval(got), _retrieval(want)
    same = np.mean([x == y for x, y in zip(top_a, top_b, strict=True)])
    assert same >= 0.95 and abs(rec_a - rec_b) <= 0.01, (same, rec_a, rec_b)


def test_local_insert_touches_only_the_new_documents(tmp_path, corpus, runtime):
    base = Index.build(corpus["A"], tmp_path / "inc", runtime=runtime, show_progress=False)
    grown = base.insert(corpus["B1"], show_progress=False).insert(corpus["B2"],
                                                                  show_progress=False)
    r = grown.last_update
    assert r.version == 3 and r.chunks == 17
    assert r.reextracted_chunks == 17  # only the new chunks, not the open batch
    info = grown.manifest.extra["incremental"]
    assert info["mode"] == "local" and info["exact_below"] == SPLIT
    assert info["local_updates"] == 2 and "tolerance" in info
    full = Index.build(corpus["AB"], tmp_path / "full", runtime=runtime, show_progress=False)
    assert _file_digests(grown) != _file_digests(full)  # local: not the build's bytes
    _within_tolerance(grown, full)
    # the stored entities keep their ids; every table agrees with the others
    old_names = base.dir.table(layout.NAMES)
    new_names = grown.dir.table(layout.NAMES)
    assert new_names["name"].iloc[: len(old_names)].tolist() == old_names["name"].tolist()
    assert (new_names["entity"].iloc[: len(old_names)].to_numpy()
            == old_names["entity"].to_numpy()).all()
    assert grown.retriever.entity_index.index.ntotal == len(new_names)
    assert grown.retriever.fact_index.ntotal == len(grown.dir.table(layout.FACTS))
    assert grown.manifest.counts["chunks"] == len(grown.chunks) == 57
    assert grown.manifest.counts["documents"] == full.manifest.counts["documents"]
    for q in ("Who founded Kestrel Dynamics?",):
        assert grown.query(q).passages


def test_compact_equals_the_full_build_byte_for_byte(tmp_path, corpus, runtime):
    base = Index.build(corpus["A"], tmp_path / "inc", runtime=runtime, show_progress=False)
    grown = base.insert(corpus["B1"], show_progress=False).insert(corpus["B2"],
                                                                  show_progress=False)
    compacted = grown.compact(show_progress=False)
    full = Index.build(corpus["AB"], tmp_path / "full", runtime=runtime, show_progress=False)
    assert_equivalent(compacted, full)
    assert "incremental" not in compacted.manifest.extra
    assert compacted.last_update.reextracted_chunks == 57 - (SPLIT // BATCH) * BATCH
    assert compacted.compact(show_progress=False).last_update.version is None  # already exact


def test_exact_insert_after_local_ones_equals_a_build(tmp_path, corpus, runtime):
    """The exact path re-extracts what local inserts extracted in their own batches."""
    base = Index.build(corpus["A"], tmp_path / "inc", runtime=runtime, show_progress=False)
    grown = base.insert(corpus["B1"], show_progress=False).insert(corpus["B2"], exact=True,
                                                                  show_progress=False)
    assert_equivalent(grown, Index.build(corpus["AB"], tmp_path / "full", runtime=runtime,
                                         show_progress=False))
    assert "incremental" not in grown.manifest.extra


def test_cli_compact(tmp_path, corpus, runtime, capsys):
    out = tmp_path / "idx"
    Index.build(corpus["A"], out, runtime=runtime, show_progress=False)
    assert main(["-q", "insert", str(out), str(corpus["B1"])]) == 0
    assert "local update" in capsys.readouterr().out
    assert main(["-q", "compact", str(out)]) == 0
    assert "version 3" in capsys.readouterr().out
    assert main(["-q", "compact", str(out)]) == 0
    assert "already" in capsys.readouterr().out
