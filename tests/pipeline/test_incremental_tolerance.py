"""The tolerance contract of local updates (issue 34), on a shared multi-hop set.

A seeded random sequence of local inserts and local deletes over a small HotpotQA fixture
(the gold passages of 32 questions and a distractor each, in a random order); then the
index answers the questions whose supporting passages it holds as a full build of the same
documents does: Recall@5 within 0.01, the same top-5 documents for at least 95% of the
questions. ``compact`` then gives that build's files byte for byte.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from gpurag import Index
from gpurag.metrics import gold_ranks, recall_at
from gpurag.runtime import Runtime, Settings
from tests.pipeline.test_incremental import _file_digests

REPO = Path(__file__).resolve().parents[2]
_DATA_DIRS = [Path(p) for p in (os.environ.get("GPURAG_SHARED_DATA"),) if p] + [
    REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"]
DATA = next((d / "hotpotqa_train100" for d in _DATA_DIRS if (d / "hotpotqa_train100").is_dir()),
            _DATA_DIRS[0] / "hotpotqa_train100")
QUESTIONS = 32  # the fixture: the gold passages of the first 32 questions, a distractor each
KEPT = 24  # the gold passages of the first 24 questions are never deleted
DISTRACTORS = 1

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


def _fixture() -> tuple[list[dict], list[dict], set[str]]:
    """The passages (corpus order), the questions and the ids never deleted."""
    questions = _jsonl(DATA / "questions.jsonl")[:QUESTIONS]
    gold = {g for q in questions for g in q["gold_ids"]}
    corpus = _jsonl(DATA / "corpus.jsonl")
    by_id = {r["id"]: r for r in corpus}
    picked = set(gold)
    for q in questions:  # distractors beside each question's gold passages
        group = int(q["gold_ids"][0][1:]) // 10 * 10
        others = [f"p{i:05d}" for i in range(group, group + 10)]
        picked |= set([i for i in others if i in by_id and i not in gold][:DISTRACTORS])
    records = [r for r in corpus if r["id"] in picked]
    kept = {g for q in questions[:KEPT] for g in q["gold_ids"]}
    return records, questions, kept


@pytest.mark.slow  # ~40 s of CPU (two minutes at a load of 24 on 2 cores)
def test_random_inserts_and_deletes_stay_within_tolerance(tmp_path):
    records, questions, kept = _fixture()
    by_id = {r["id"]: r for r in records}
    runtime = Runtime.create(Settings(embed_cache=str(tmp_path / "cache")), device="cpu",
                             progress=False)
    rng = np.random.default_rng(34)
    order = [records[i] for i in rng.permutation(len(records))]
    half = len(order) // 2
    index = Index.build(_write(tmp_path / "base.jsonl", order[:half]), tmp_path / "inc",
                        runtime=runtime, show_progress=False)
    pending = order[half:]
    ops = ("insert", "delete", "insert", "delete", "insert")
    for step, op in enumerate(ops):
        if op == "insert":
            n = len(pending) if step == len(ops) - 1 else int(rng.integers(6, 12))
            batch, pending = pending[:n], pending[n:]
            index = index.insert(_write(tmp_path / f"ins{step}" / "docs.jsonl", batch),
                                 show_progress=False)
        else:
            held = [i for i in dict.fromkeys(index.chunks["doc_id"].astype(str))
                    if i and i not in kept]  # blank: deleted
            index = index.delete([str(x) for x in rng.choice(held, 3, replace=False)],
                                 show_progress=False)
        assert index.manifest.extra["incremental"]["mode"] == "local"
    held = [i for i in dict.fromkeys(index.chunks["doc_id"].astype(str)) if i]  # blank: deleted
    full = Index.build(_write(tmp_path / "final.jsonl", [by_id[i] for i in held]),
                       tmp_path / "full", runtime=runtime, show_progress=False)
    present = set(held)
    questions = [q for q in questions if set(q["gold_ids"]) <= present]
    assert len(questions) >= KEPT
    (top_a, rec_a), (top_b, rec_b) = _answers(index, questions), _answers(full, questions)
    same = float(np.mean([a == b for a, b in zip(top_a, top_b, strict=True)]))
    assert same >= 0.95 and abs(rec_a - rec_b) <= 0.01, (same, rec_a, rec_b)
    assert _file_digests(index) != _file_digests(full)  # the local path really ran
    compacted = index.compact(show_progress=False)
    assert _file_digests(compacted) == _file_digests(full)
    assert compacted.manifest.counts == full.manifest.counts


@pytest.mark.slow
def test_small_inserts_as_deltas_stay_within_tolerance(tmp_path):
    """Inserts small enough to go in as deltas (within lexical_reweight_growth and the graph
    delta's fold bound), a delete between them (which writes the graph and the BM25 model
    whole): the index answering from a graph and a BM25 model with deltas stays within the
    contract of a full build, and ``compact`` gives that build's files."""
    records, questions, kept = _fixture()
    by_id = {r["id"]: r for r in records}
    runtime = Runtime.create(Settings(embed_cache=str(tmp_path / "cache")), device="cpu",
                             progress=False)
    rng = np.random.default_rng(35)
    order = [records[i] for i in rng.permutation(len(records))]
    index = Index.build(_write(tmp_path / "base.jsonl", order[:-8]), tmp_path / "inc",
                        runtime=runtime, show_progress=False)
    pending = order[-8:]
    for step, op in enumerate(("insert", "delete", "insert", "insert")):
        if op == "insert":
            n = 2 if step == 0 else 3
            batch, pending = pending[:n], pending[n:]
            index = index.insert(_write(tmp_path / f"ins{step}" / "docs.jsonl", batch),
                                 show_progress=False)
        else:
            held = [i for i in dict.fromkeys(index.chunks["doc_id"].astype(str))
                    if i and i not in kept]  # blank: deleted
            index = index.delete([str(x) for x in rng.choice(held, 2, replace=False)],
                                 show_progress=False)
    assert {"graph/delta.json", "lexical/delta.json"} <= set(index.manifest.files)
    held = [i for i in dict.fromkeys(index.chunks["doc_id"].astype(str)) if i]
    full = Index.build(_write(tmp_path / "final.jsonl", [by_id[i] for i in held]),
                       tmp_path / "full", runtime=runtime, show_progress=False)
    present = set(held)
    questions = [q for q in questions if set(q["gold_ids"]) <= present]
    assert len(questions) >= KEPT
    (top_a, rec_a), (top_b, rec_b) = _answers(index, questions), _answers(full, questions)
    same = float(np.mean([a == b for a, b in zip(top_a, top_b, strict=True)]))
    assert same >= 0.95 and abs(rec_a - rec_b) <= 0.01, (same, rec_a, rec_b)
    compacted = index.compact(show_progress=False)
    assert _file_digests(compacted) == _file_digests(full)
