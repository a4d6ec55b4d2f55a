"""The tolerance contract of local inserts (issue 34), on a shared multi-hop set.

A seeded random sequence of inserts (local) and deletes on a prefix of HotpotQA's passages;
then the index answers the set's questions (those whose supporting passages it holds) as a
full build of the same documents does: Recall@5 within 0.01, the same top-5 documents for at
least 95% of the questions. ``compact`` then gives that build's files byte for byte.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from gpurag import Index
from gpurag.eval.metrics import gold_ranks, recall_at
from gpurag.runtime import Runtime, Settings
from tests.pipeline.test_incremental import _file_digests

REPO = Path(__file__).resolve().parents[2]
_DATA_DIRS = [Path(p) for p in (os.environ.get("GPURAG_SHARED_DATA"),) if p] + [
    REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"]
DATA = next((d / "hotpotqa_train100" for d in _DATA_DIRS if (d / "hotpotqa_train100").is_dir()),
            _DATA_DIRS[0] / "hotpotqa_train100")
PASSAGES = 200

pytestmark = pytest.mark.skipif(not (DATA / "corpus.jsonl").is_file(),
                                reason="shared data not present")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _answers(index: Index, questions: list[dict]) -> tuple[list[list[str]], float]:
    results = index.query_batch([q["question"] for q in questions], k=5)
    top = [[p.doc_id for p in r.passages] for r in results]
    ranks = [gold_ranks(t, q["gold_ids"]) for t, q in zip(top, questions, strict=True)]
    return top, recall_at(ranks, 5)


def test_random_inserts_and_deletes_stay_within_tolerance(tmp_path):
    records = _jsonl(DATA / "corpus.jsonl")[:PASSAGES]
    by_id = {r["id"]: r for r in records}
    runtime = Runtime.create(Settings(embed_cache=str(tmp_path / "cache")), device="cpu",
                             progress=False)
    rng = np.random.default_rng(34)
    index = Index.build(_write(tmp_path / "base.jsonl", records[:100]), tmp_path / "inc",
                        runtime=runtime, show_progress=False)
    pending = records[100:]
    for step, op in enumerate(("insert", "insert", "delete", "insert", "insert")):
        if op == "insert":
            n = int(rng.integers(10, 30))
            batch, pending = pending[:n], pending[n:]
            index = index.insert(_write(tmp_path / f"ins{step}" / "docs.jsonl", batch),
                                 show_progress=False)
            assert index.manifest.extra["incremental"]["mode"] == "local"
        else:
            held = list(dict.fromkeys(index.chunks["doc_id"].astype(str)))
            index = index.delete([str(x) for x in rng.choice(held, 8, replace=False)],
                                 show_progress=False)
    held = list(dict.fromkeys(index.chunks["doc_id"].astype(str)))
    full = Index.build(_write(tmp_path / "final.jsonl", [by_id[i] for i in held]),
                       tmp_path / "full", runtime=runtime, show_progress=False)
    present = set(held)
    questions = [q for q in _jsonl(DATA / "questions.jsonl") if set(q["gold_ids"]) <= present]
    assert len(questions) >= 8
    (top_a, rec_a), (top_b, rec_b) = _answers(index, questions), _answers(full, questions)
    same = float(np.mean([a == b for a, b in zip(top_a, top_b, strict=True)]))
    assert same >= 0.95 and abs(rec_a - rec_b) <= 0.01, (same, rec_a, rec_b)
    assert _file_digests(index) != _file_digests(full)  # the local path really ran
    compacted = index.compact(show_progress=False)
    assert _file_digests(compacted) == _file_digests(full)
    assert compacted.manifest.counts == full.manifest.counts
