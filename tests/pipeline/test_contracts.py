"""Contract tests every registered extractor, embedder and reranker must pass (the same small
verbs, deterministic, documented output shapes and dtypes), in the spirit of scikit-learn's
``check_estimator``. A new implementation is added to the registry and gets these for free."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from gpurag.extract import EXTRACTORS, make_extractor
from gpurag.extract.base import MENTION_COLUMNS, RELATION_COLUMNS, Extraction

from .conftest import SAMPLE

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
        pytest.skip("the LLM extractor needs a server (GPURAG_LLM_URL; see tests/llm)")
    return {}


@pytest.mark.parametrize("name", sorted(EXTRACTORS))
def test_extractor_contract(name, tmp_path):
    ex = make_extractor(name, **_extractor_options(name, tmp_path))
    assert isinstance(ex.name, str) and ex.name
    out = ex.extract(CHUNKS, offset=100)
    assert isinstance(out, Extraction)
    assert set(MENTION_COLUMNS) <= set(out.mentions.columns)
    assert set(RELATION_COLUMNS) <= set(out.relations.columns)
    assert len(out.mentions), "the sample names people, places and companies"
    # chunk positions are offset rows of the batch, spans lie inside the chunk text
    m = out.mentions
    assert m["chunk"].between(100, 100 + len(CHUNKS) - 1).all()
    located = m[m["start"] >= 0]
    texts = CHUNKS["text"].to_numpy()
    for chunk, start, end in zip(located["chunk"], located["start"], located["end"],
                                 strict=True):
        assert 0 <= start < end <= len(texts[chunk - 100])
    assert out.relations["chunk"].between(100, 100 + len(CHUNKS) - 1).all()
    assert all(isinstance(v, (int, np.integer)) for v in out.stats.values())
    # deterministic: the same batch gives the same tables
    again = make_extractor(name, **_extractor_options(name, tmp_path)).extract(CHUNKS, 100)
    pd.testing.assert_frame_equal(out.mentions.reset_index(drop=True),
                                  again.mentions.reset_index(drop=True))
    pd.testing.assert_frame_equal(out.relations.reset_index(drop=True),
                                  again.relations.reset_index(drop=True))
    # an empty batch is an empty extraction, not an error
    empty = ex.extract(CHUNKS.iloc[:0], offset=0)
    assert len(empty.mentions) == 0 and len(empty.relations) == 0


def _embedder_specs() -> list[str]:
    from gpurag.embed.onnx_minilm import default_model_path

    specs = ["minilm", f"onnx:{default_model_path()}"]
    st = os.environ.get("GPURAG_TEST_ST_MODEL")
    if st:
        specs.append(f"st:{st}")
    return specs


@pytest.mark.parametrize("spec", _embedder_specs())
def test_embedder_contract(spec):
    from gpurag.embed import load_embedder
    from gpurag.embed.base import Embedder

    emb = load_embedder(spec, device="cpu")
    assert isinstance(emb, Embedder)
    assert isinstance(emb.name, str) and emb.dim > 0 and emb.max_tokens > 0
    texts = [*CHUNKS["text"].tolist()[:6], "", "x"]
    vecs = emb.encode(texts, batch_size=3)
    assert vecs.shape == (len(texts), emb.dim) and vecs.dtype == np.float32
    assert np.isfinite(vecs).all()
    np.testing.assert_allclose(np.linalg.norm(vecs[:6], axis=1), 1.0, atol=1e-3)
    np.testing.assert_array_equal(emb.encode(texts, batch_size=3), vecs)  # deterministic
    # batching does not change a text's vector beyond float noise
    np.testing.assert_allclose(emb.encode(texts, batch_size=64), vecs, atol=1e-3)
    assert emb.encode([], batch_size=4).shape == (0, emb.dim)
    counts = emb.count_tokens(texts)
    assert len(counts) == len(texts) and all(isinstance(c, int) and c >= 0 for c in counts)


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
    reset, _ = retriever.reset_matrix(qvecs, graph_index.query_config, dense)
    top = retriever.backends.ppr(retriever.graph, reset, k=1, lo=retriever.n_ent, damping=0.8,
                                 tol=1e-4, full=True)
    out = rr.score(qvecs, cand, top.full, dense)
    assert out.shape == cand.shape and out.dtype == np.float32 and np.isfinite(out).all()
    np.testing.assert_array_equal(rr.score(qvecs, cand, top.full, dense), out)
    # one question at a time gives its rows of the batch
    np.testing.assert_allclose(rr.score(qvecs[:1], cand[:1], top.full[:1],
                                        (dense[0][:1], dense[1][:1])), out[:1], atol=1e-5)
