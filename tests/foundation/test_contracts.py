"""Contract tests every registered extractor, embedder and reranker must pass (the same small
verbs, deterministic, documented output shapes and dtypes), in the spirit of scikit-learn's
``check_estimator``. A new implementation is added to the registry and gets these for free."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from gpurag.contracts import check_embedder, check_extractor, check_reranker
from gpurag.extract import EXTRACTORS, make_extractor
from tests.conftest import SAMPLE

RECORDS = [json.loads(line) for line in
           (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
CHUNKS = pd.DataFrame({
    "chunk_id": [f"{r['id']}#0" for r in RECORDS[:12]],
    "doc_id": [r["id"] for r in RECORDS[:12]],
    "title": [r.get("title", "") for r in RECORDS[:12]],
    "text": [r["text"] for r in RECORDS[:12]],
})


def _extractor_options(name: str, tmp_path) -> dict:
    if name == "triples":
        path = tmp_path / "triples.jsonl"
        rows = [{"id": r["id"], "entities": [r["title"]],
                 "triples": [[r["title"], "mentioned with", "Vollan-Idris"]]}
                for r in RECORDS[:12] if r.get("title")]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return {"path": path}
    if name in ("ner", "spacy", "spacy-ner"):
        pytest.importorskip("spacy")
        from gpurag.extract.spacy_ner import load_spacy

        try:
            load_spacy()
        except Exception as exc:
            pytest.skip(f"no spaCy English model: {exc}")
    if name == "llm" and not os.environ.get("GPURAG_LLM_URL"):
        pytest.skip("checked against the real local server in tests/llm/test_contract_llm.py")
    return {}


@pytest.mark.parametrize("name", sorted(EXTRACTORS))
def test_extractor_contract(name, tmp_path):
    options = _extractor_options(name, tmp_path)
    check_extractor(lambda: make_extractor(name, **options), CHUNKS)


def _embedder_specs() -> list[str]:
    from gpurag.embed.onnx_minilm import default_model_path

    specs = ["minilm", f"onnx:{default_model_path()}"]
    st = os.environ.get("GPURAG_TEST_ST_MODEL")
    if st:
        specs.append(f"st:{st}")
    return specs


@pytest.mark.parametrize("spec", _embedder_specs())
def test_embedder_contract(spec):
    from gpurag.backends.embed import load_embedder

    check_embedder(load_embedder(spec, device="cpu"), CHUNKS["text"].tolist()[:6])


def _rerankers() -> list[str]:
    from gpurag.rerank import RERANKERS

    return list(RERANKERS)


@pytest.mark.parametrize("name", _rerankers())
def test_reranker_contract(name, graph_index, sample_questions):
    pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    pytest.importorskip("safetensors")
    from gpurag.rerank import get_reranker

    retriever = graph_index.retriever
    rr = get_reranker(name, retriever)
    qs = [q["question"] for q in sample_questions[:4]]
    qvecs = graph_index.embedder.encode(qs)
    from gpurag.vectors import search

    dense = search(graph_index.passage_index, qvecs, 20)
    cand = dense[1][:, :6]
    reset, _ = retriever.reset_matrix(qvecs, graph_index.query_config.plan(), dense)
    top = retriever.ppr(retriever.graph, reset, k=1, lo=retriever.n_ent, damping=0.8,
                        tol=1e-4, full=True)
    check_reranker(rr, qvecs, cand, top.full, dense)
