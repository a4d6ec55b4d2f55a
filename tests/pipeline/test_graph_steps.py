"""Each step of the graph stage on its own, with typed inputs and outputs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gpurag.backends.embed import load_embedder
from gpurag.config import IndexConfig
from gpurag.extract import make_extractor
from gpurag.graph import CSRGraph
from gpurag.pipeline import graph_stage as gs
from gpurag.runtime import Runtime
from gpurag.vectors.codec import VectorCodec
from tests.conftest import SAMPLE


@pytest.fixture(scope="module")
def chunks() -> pd.DataFrame:
    recs = [json.loads(line) for line in
            (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line][:20]
    return pd.DataFrame({"chunk_id": [r["id"] for r in recs], "doc_id": [r["id"] for r in recs],
                         "title": [r.get("title", "") for r in recs],
                         "text": [r["text"] for r in recs]})


@pytest.fixture(scope="module")
def resolved(chunks):
    ex = make_extractor("fast").extract(chunks)
    return gs.resolve_entities(ex, load_embedder("minilm"), IndexConfig())


def test_resolve_entities(resolved):
    n_ent = len(resolved.entities)
    n_names = len(resolved.name_to_entity)
    assert n_ent and resolved.name_vectors.shape == (n_names, 384)
    assert len(resolved.name_counts) == n_names and (resolved.name_counts >= 1).all()
    np.testing.assert_allclose(np.linalg.norm(resolved.name_vectors, axis=1), 1.0, atol=5e-3)
    codec = VectorCodec("int8", 384)  # the default precision: stored values, idempotent
    np.testing.assert_array_equal(codec.round_trip(resolved.name_vectors), resolved.name_vectors)
    assert resolved.mentions["entity"].between(0, n_ent - 1).all()
    rel = resolved.relations
    assert (rel["head_entity"] != rel["tail_entity"]).all()
    assert not resolved.mentions["label"].isin(gs.DATE_LABELS).any()  # graph_dates=False
    assert resolved.entities["n_passages"].sum() >= n_ent


def test_facts_graph_and_communities(chunks, resolved):
    facts = gs.build_facts(chunks, resolved)
    assert len(facts.indptr) == len(facts.table) + 1 and facts.indptr[-1] == len(facts.entities)
    kg = gs.build_graph(resolved, len(chunks))
    n_ent = len(resolved.entities)
    assert isinstance(kg.graph, CSRGraph) and kg.graph.n_nodes == n_ent + len(chunks)
    assert kg.entity_graph.n_nodes == n_ent
    seen = []

    def leiden(g, *, max_cluster_size, seed):
        seen.append((g.n_nodes, max_cluster_size, seed))
        return pd.DataFrame({"node": np.arange(g.n_nodes, dtype=np.int32),
                             "level": np.zeros(g.n_nodes, np.int16)})

    comms = gs.detect_communities(kg, IndexConfig(max_community_size=7, seed=3), leiden)
    assert seen == [(n_ent, 7, 3)] and len(comms) == n_ent
    host = gs.detect_communities(kg, IndexConfig(max_community_size=7),
                                Runtime(device="cpu").leiden)
    assert host["node"].nunique() == n_ent


def test_knn_component_used_by_alias_resolution_matches_the_host_default():
    pytest.importorskip("torch")
    from gpurag.backends.searcher import make_searcher
    from gpurag.resolve import knn_pairs

    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 32)).astype(np.float32)
    x[150:] = x[:150] + 0.05 * rng.standard_normal((150, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    host = knn_pairs(x, 5, 0.5)
    # the device searcher's torch kernel, run on the CPU
    dev = knn_pairs(x, 5, 0.5, knn=lambda v, **kw: make_searcher(v, "cpu", backend="torch"))
    for a, b in zip(host, dev, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_name_vectors_are_written_and_dropped_before_the_facts_embed(chunks, tmp_path,
                                                                     monkeypatch):
    """The name vectors (the stage's largest array) are stored as soon as the names are
    resolved and are no longer held while the facts embed, where the build peaks."""
    import gc
    import weakref

    from gpurag.pipeline.workdir import WorkDir
    from gpurag.runtime import BuildRecord, Runtime
    from gpurag.store import IndexWriter, layout

    refs: list[weakref.ref] = []
    seen: dict[str, bool] = {}
    resolve, embed = gs.resolve_entities, gs.embed_facts

    def spy_resolve(*args, **kwargs):
        ents = resolve(*args, **kwargs)
        refs.append(weakref.ref(ents.name_vectors))
        return ents

    def spy_embed(facts, embedder, cfg):
        gc.collect()
        seen["vectors_held"] = refs[0]() is not None
        seen["names_written"] = (writer.tmp / layout.NAMES_FAISS).is_file()
        return embed(facts, embedder, cfg)

    monkeypatch.setattr(gs, "resolve_entities", spy_resolve)
    monkeypatch.setattr(gs, "embed_facts", spy_embed)
    cfg, runtime = IndexConfig(), Runtime.create(device="cpu")
    writer = IndexWriter(tmp_path / "idx")
    try:
        counts = gs.run_graph_stage(chunks, runtime.embedder_for(cfg.embedder), cfg,
                                    WorkDir(tmp_path / "idx", "key"), writer, {}, runtime,
                                    BuildRecord(), False)
        assert (writer.tmp / layout.NAMES_FAISS).is_file()
        assert (writer.tmp / layout.FACTS_FAISS).is_file()
    finally:
        writer.abort()
    assert counts["facts"] > 0
    assert seen == {"vectors_held": False, "names_written": True}


def test_triples_add_labelled_facts_beside_the_sentence_facts(chunks, tmp_path):
    """Imported triples give labelled facts, and the sentences naming two entities stay facts
    too: an LLM leaves relations out, and the sentence still says how its entities relate."""
    path = tmp_path / "triples.jsonl"
    path.write_text(json.dumps({"id": "p01", "entities": ["M. Vollan-Idris"], "triples": [
        ["M. Vollan-Idris", "founded", "Kestrel Dynamics Ltd."]]}) + "\n", encoding="utf-8")
    ex = make_extractor("triples", path=str(path)).extract(chunks)
    resolved = gs.resolve_entities(ex, load_embedder("minilm"), IndexConfig())
    facts = gs.build_facts(chunks, resolved)
    only_sentences = gs.build_facts(chunks, gs.resolve_entities(
        make_extractor("fast").extract(chunks), load_embedder("minilm"), IndexConfig()))
    texts = facts.table["text"].tolist()
    assert "M. Vollan-Idris founded Kestrel Dynamics Ltd." in texts
    assert set(only_sentences.table["text"]) <= set(texts)  # the sentence facts stay
    assert len(facts.indptr) == len(texts) + 1 and facts.indptr[-1] == len(facts.entities)
    # each fact's entities are the ones it names: the triple's head and tail, and for a
    # sentence, entities mentioned in its chunk
    n2e = resolved.name_to_entity
    row = texts.index("M. Vollan-Idris founded Kestrel Dynamics Ltd.")
    assert set(facts.entities[facts.indptr[row]:facts.indptr[row + 1]]) == {
        n2e["M. Vollan-Idris"], n2e["Kestrel Dynamics Ltd."]}
    by_chunk = resolved.mentions.groupby("chunk")["entity"].agg(set)
    for f in range(len(texts)):
        if texts[f] in set(only_sentences.table["text"]):
            ents = set(facts.entities[facts.indptr[f]:facts.indptr[f + 1]])
            assert len(ents) >= 2 and ents <= by_chunk[facts.table["chunk"].iloc[f]]
