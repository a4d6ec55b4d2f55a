"""`--answer`, `--mode global` and `eval --answer` end to end against the real tiny server.

SmolLM2-135M answers poorly: these check the plumbing (answers come back, citations point at
retrieved passages, scores are computed), not the quality.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpurag import Index
from gpurag.extract import make_extractor
from gpurag.extract.base import COOCCURS
from gpurag.llm.client import LLMClient

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"


@pytest.fixture(scope="module")
def small_index(graph_index):
    return graph_index  # the sample corpus with its graph, built once (tests/conftest.py)


def test_answer_cites_only_retrieved_passages(small_index, llm_config):
    from gpurag.query.generate import answer_results

    client = LLMClient(llm_config)
    results = small_index.query_batch(
        ["Where is the headquarters of Kestrel Dynamics?", "Who founded Brantholm Works?"], k=3)
    answer_results(small_index, results, client, token_budget=600)
    for r in results:
        assert r.error is None
        assert isinstance(r.answer, str) and r.answer.strip()
        assert set(r.citations) <= set(r.doc_ids)
    # The second run is served from the on-disk cache.
    again = LLMClient(llm_config)
    answer_results(small_index, results, again, token_budget=600)
    assert again.usage.cache_hits >= 2


# slow: eager report generation over every community with the real local LLM (~60 s)
@pytest.mark.slow
def test_global_mode_answers_from_community_reports(small_index, llm_config):
    from gpurag.query.generate import global_answers

    client = LLMClient(llm_config.replace(max_tokens=48))
    out = global_answers(small_index, ["What kinds of organisations appear in this world?"],
                         client, level=0, report_max_tokens=24, answer_max_tokens=24)
    assert len(out) == 1 and out[0].mode == "global"
    assert isinstance(out[0].answer, str)


@pytest.mark.usefixtures("shared_embeddings")  # the sample index's vectors, from the cache
def test_eval_with_answers_reports_exact_match_and_f1(tmp_path, llm_config):
    from gpurag.eval.datasets import load_dataset
    from gpurag.eval.runner import evaluate, open_or_build_index

    shutil.copy(SAMPLE / "corpus.jsonl", tmp_path / "corpus.jsonl")
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    (tmp_path / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ds = load_dataset(tmp_path)
    index, _, _ = open_or_build_index(ds, str(tmp_path / "idx"), None, False)
    result = evaluate(ds, index, ["dense"], answer_client=LLMClient(llm_config))
    row = result["modes"]["dense"]
    assert 0.0 <= row["answer_em"] <= row["answer_f1"] <= 1.0
    assert row["answer_errors"] == 0
    json.dumps(result)  # serializable as written by --json


def test_index_with_llm_extractor_end_to_end(tmp_path, llm_url, monkeypatch):
    """`--extractor llm` builds a graph from the server's (schema-constrained) answers, keeps
    descriptions, and a rebuild is served from the cache."""
    monkeypatch.setenv("GPURAG_LLM_URL", llm_url)
    monkeypatch.setenv("GPURAG_LLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPURAG_LLM_MAX_TOKENS", "96")
    records = [json.loads(line) for line in
               (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:3]]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    index = Index.build(corpus, tmp_path / "idx", extractor="llm", show_progress=False)
    assert index.manifest.components["extract"].startswith("llm-")
    assert index.manifest.counts["chunks"] == 3
    assert index.manifest.counts["entities"] >= 1
    # the LLM's output goes on top of the rule-based extraction: every name the fast
    # extractor finds is in the graph, with its co-occurrence relations
    assert index.manifest.components["extract"].endswith("+" + make_extractor("fast").name)
    fast = Index.build(corpus, tmp_path / "fast", show_progress=False)
    names = set(index.dir.table("tables/names.parquet")["name"].astype(str))
    assert set(fast.dir.table("tables/names.parquet")["name"].astype(str)) <= names
    relations = index.dir.table("tables/relations.parquet")["relation"].astype(str)
    assert (relations == COOCCURS).any()
    # the LLM's labelled relations are the typed facts the second hop scores; the sentences
    # beside them are not
    facts = index.dir.table("tables/facts.parquet")
    rel = index.dir.table("tables/relations.parquet")
    labelled = rel[rel["relation"].astype(str) != COOCCURS]
    assert facts["typed"].sum() == labelled.groupby(
        ["head_entity", "relation", "tail_entity"]).ngroups
    assert (index.retriever.bridge_pages.chunk_triples() is not None) == bool(
        facts["typed"].any())
    assert index.query(records[0]["title"], k=2).passages
    rebuilt = Index.build(corpus, tmp_path / "idx2", extractor="llm", show_progress=False)
    assert rebuilt.manifest.counts["entities"] == index.manifest.counts["entities"]
