"""`gpurag eval` end to end on the sample corpus, and dataset loading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpurag.cli import main
from gpurag.errors import ConfigError
from gpurag.eval.datasets import load_dataset

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"
# Builds read the session's embedding cache (no test here counts the embedder's calls).
pytestmark = pytest.mark.usefixtures("shared_embeddings")


def test_dataset_loader_skips_questions_without_gold(tmp_path):
    shutil.copy(SAMPLE / "corpus.jsonl", tmp_path / "corpus.jsonl")
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    extra = [json.dumps({"id": "u1", "question": "unanswerable?", "answer": "",
                         "gold_ids": []}), "{not json"]
    (tmp_path / "questions.jsonl").write_text("\n".join(lines + extra) + "\n", encoding="utf-8")
    ds = load_dataset(tmp_path)
    assert len(ds.questions) == len(lines)
    assert ds.skipped == {"no gold_ids": 1, "bad line": 1}


def test_eval_cli_prints_table_and_writes_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GPURAG_PROGRESS", "0")
    out = tmp_path / "res.json"
    rc = main(["-q", "eval", str(SAMPLE), "--modes", "bm25,dense,graph,nonsense",
               "--index", str(tmp_path / "idx"), "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    for mode in ("bm25", "dense", "graph"):
        assert mode in text
    assert "nonsense" in text and "unavailable" in text
    result = json.loads(out.read_text())
    questions = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    assert result["n_questions"] == len(questions)
    for mode in ("bm25", "dense", "graph"):
        row = result["modes"][mode]
        for key in ("recall@2", "recall@5", "all_gold@8", "mrr", "latency_ms_p50",
                    "latency_ms_p95"):
            assert row[key] >= 0
        assert 0 < row["recall@5"] <= 1
        assert row["recall@2"] <= row["recall@5"]
    per_q = result["questions"]
    assert len(per_q) == len(questions)
    assert all(len(q["ranks"]["graph"]) == len(q["gold_ids"]) for q in per_q)

    # The index is reused on a second run, and refused for another corpus.
    rc = main(["-q", "eval", str(SAMPLE), "--modes", "dense", "--index", str(tmp_path / "idx")])
    assert rc == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "corpus.jsonl").write_text(json.dumps({"id": "x", "text": "hello"}) + "\n")
    (other / "questions.jsonl").write_text(json.dumps(
        {"id": "1", "question": "q?", "gold_ids": ["x"]}) + "\n")
    with pytest.raises(ConfigError):
        from gpurag.eval.runner import open_or_build_index

        open_or_build_index(load_dataset(other), str(tmp_path / "idx"), None, False)


def test_eval_reuses_an_index_whose_corpus_repeats_a_passage(tmp_path, monkeypatch):
    """A build drops a passage whose text repeats an earlier one; the index is still the
    corpus's and is reused, while one built from a corpus missing a passage is refused."""
    from gpurag.eval.runner import open_or_build_index

    monkeypatch.setenv("GPURAG_PROGRESS", "0")
    records = [json.loads(line) for line in
               (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:12]]
    dup = {**records[3], "id": "repeat-of-3"}
    ds_dir = tmp_path / "ds"
    ds_dir.mkdir()
    (ds_dir / "corpus.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in [*records, dup]), encoding="utf-8")
    (ds_dir / "questions.jsonl").write_text(json.dumps(
        {"id": "1", "question": "q?", "gold_ids": [records[0]["id"]]}) + "\n")
    ds = load_dataset(ds_dir)
    index, _, _ = open_or_build_index(ds, str(tmp_path / "idx"), None, False)
    assert "repeat-of-3" not in set(index.chunks["doc_id"])
    again, tmp, built_s = open_or_build_index(ds, str(tmp_path / "idx"), None, False)
    assert tmp is None and built_s == 0.0 and len(again.chunks) == len(index.chunks)

    smaller = tmp_path / "smaller"
    smaller.mkdir()
    (smaller / "corpus.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records[:-1]), encoding="utf-8")
    (smaller / "questions.jsonl").write_text((ds_dir / "questions.jsonl").read_text())
    open_or_build_index(load_dataset(smaller), str(tmp_path / "idx2"), None, False)
    with pytest.raises(ConfigError, match="corpus passages are missing"):
        open_or_build_index(ds, str(tmp_path / "idx2"), None, False)
