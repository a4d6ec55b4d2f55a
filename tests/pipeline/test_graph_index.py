"""The knowledge-graph stage end to end on the sample corpus, and multi-hop retrieval."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from gpurag import Index
from gpurag.graph import csr as csr_mod


def _entity_of(index: Index) -> dict[str, int]:
    aliases = index.dir.table("tables/aliases.parquet")
    return dict(zip(aliases["name"].astype(str), aliases["entity_id"].astype(int), strict=True))


def test_manifest_counts_and_tables(graph_index):
    counts = graph_index.manifest.counts
    assert counts["chunks"] == 57
    assert counts["entities"] > 50 and counts["facts"] > 20
    for table in ("entities", "aliases", "mentions", "relations", "facts", "communities"):
        assert graph_index.dir.has(f"tables/{table}.parquet")
    ents = graph_index.dir.table("tables/entities.parquet")
    assert len(ents) == counts["entities"]
    assert (ents["n_passages"] >= 0).all()


def test_aliases_of_the_sample_world_merge_and_confusables_stay_apart(graph_index):
    ent = _entity_of(graph_index)
    assert ent["Kestrel Dynamics Ltd."] == ent["Kestrel Dynamics"]
    assert ent["Kestrel Marine Cooperative"] != ent["Kestrel Dynamics"]
    assert ent["Zoë Lunde"] != ent["Zoë Ødegård"]
    assert graph_index.manifest.counts["merged_names"] > 0


def test_dates_are_not_graph_nodes_by_default(graph_index):
    names = set(graph_index.dir.table("tables/entities.parquet")["name"].astype(str))
    assert "1971" not in names and "1974" not in names


def test_graph_is_symmetric_csr_over_entities_then_passages(graph_index):
    g = csr_mod.load(graph_index.path / "graph")
    n_ent = graph_index.manifest.counts["entities"]
    assert g.n_nodes == n_ent + graph_index.manifest.counts["chunks"]
    a = sp.csr_array((np.asarray(g.weights), np.asarray(g.indices), np.asarray(g.indptr)),
                     shape=(g.n_nodes, g.n_nodes))
    assert abs(a - a.T).max() < 1e-6
    # Passages connect only to entities (mention edges), never to other passages.
    psg_block = a[n_ent:, n_ent:]
    assert psg_block.nnz == 0
    # Every passage with a located mention has at least one edge.
    mentions = graph_index.dir.table("tables/mentions.parquet")
    rows = np.unique(mentions["chunk"].to_numpy())
    assert (np.diff(a.indptr)[n_ent + rows] > 0).all()


def test_communities_nest_and_respect_the_cap(graph_index):
    comm = graph_index.dir.table("tables/communities.parquet")
    n_ent = graph_index.manifest.counts["entities"]
    level0 = comm[comm["level"] == 0]
    assert sorted(level0["node"]) == list(range(n_ent))
    final = comm[comm["is_final"]]
    cap = graph_index.config.max_community_size
    assert final.groupby("community").size().max() <= cap
    for level in sorted(comm["level"].unique())[1:]:
        child = comm[comm["level"] == level]
        parent_of = comm[comm["level"] == level - 1].set_index("node")["community"]
        assert (child["parent"].to_numpy() == parent_of.loc[child["node"]].to_numpy()).all()


def _rank(result, doc_id):
    return result.doc_ids.index(doc_id) + 1 if doc_id in result.doc_ids else None


def test_bridge_passage_without_shared_words_found_by_graph_missed_by_dense(
        graph_index, sample_questions):
    """q01: the second gold passage (p03) shares no content word with the question; dense
    retrieval misses it in the top 8, the graph reaches it through the bridge entity."""
    q = next(q for q in sample_questions if q["id"] == "q01")
    second = q["gold_ids"][1]
    dense = graph_index.query(q["question"], k=8, mode="dense")
    graph = graph_index.query(q["question"], k=8, mode="graph")
    assert _rank(dense, second) is None
    assert _rank(graph, second) is not None
    assert _rank(graph, q["gold_ids"][0]) is not None


def test_graph_mode_covers_more_gold_passages_than_dense(graph_index, sample_questions):
    texts = [q["question"] for q in sample_questions]

    def hits(mode: str) -> int:
        results = graph_index.query_batch(texts, k=8, mode=mode)
        return sum(len(set(q["gold_ids"]) & set(r.doc_ids))
                   for q, r in zip(sample_questions, results, strict=True))

    assert hits("graph") > hits("dense")


def test_graph_results_carry_seeds_and_paths(graph_index, sample_questions):
    r = graph_index.query(sample_questions[0]["question"], k=5)
    assert r.mode == "graph"
    assert r.seeds and all(s.name for s in r.seeds)
    assert r.paths
    top_chunks = set(r.chunk_ids)
    assert all(p.chunk_id in top_chunks and p.entities for p in r.paths)
    scores = [p.score for p in r.passages]
    assert scores == sorted(scores, reverse=True)


def test_graph_scores_are_the_walks_relevance_not_fusion_internals(graph_index,
                                                                     sample_questions):
    """A graph result shows each passage's relevance from the walk (PPR mass relative to the
    question's best passage), never rising down the list: not the 1e6 weight that pins the
    head in the fusion."""
    for r in graph_index.query_batch([q["question"] for q in sample_questions], k=8):
        scores = np.array([p.score for p in r.passages])
        assert ((scores >= 0) & (scores <= 1.0 + 1e-6)).all(), scores
        assert (np.diff(scores) <= 0).all()
        assert scores[0] > 0


def test_shown_scores_are_the_best_relevance_at_or_below_each_rank():
    from gpurag.query.graph import shown_scores

    cand = np.array([[4, 7, 9, 2, -1]])
    relevance = np.array([[1.0, 0.5, 0.8, 0.1, -np.inf]])
    rows = np.array([[7, 9, 2, 4, 3, -1]])  # 3 is not a candidate (found by a later fusion)
    assert shown_scores(rows, cand, relevance).tolist() == [[1.0, 1.0, 1.0, 1.0, 0.0, 0.0]]
    rows = np.array([[4, 7, 3, 9, 2, -1]])
    assert shown_scores(rows, cand, relevance).tolist() == [[1.0, 0.8, 0.8, 0.8, 0.1, 0.0]]


def test_batch_equals_one_by_one_in_graph_mode(graph_index, sample_questions):
    texts = [q["question"] for q in sample_questions[:5]]
    batch = graph_index.query_batch(texts, k=6)
    single = [graph_index.query(t, k=6) for t in texts]
    for b, s in zip(batch, single, strict=True):
        assert b.doc_ids == s.doc_ids
        # PPR stops at an L1 tolerance (QueryConfig.ppr_tol): scores agree to about that.
        np.testing.assert_allclose([p.score for p in b.passages],
                                   [p.score for p in s.passages], rtol=0, atol=2e-3)


def test_triples_import_counts_malformed_rows_and_builds_facts(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "title": "Ada Quill", "text": "Ada Quill founded Brightwater Mills in 1890."},
        {"id": "b", "title": "Brightwater Mills", "text": "Brightwater Mills stands in Orrin."},
    ]) + "\n", encoding="utf-8")
    triples = tmp_path / "triples.jsonl"
    triples.write_text("\n".join([
        json.dumps({"id": "a", "entities": ["Ada Quill", "Brightwater Mills", "1890"],
                    "triples": [["Ada Quill", "founded", "Brightwater Mills"],
                                ["only", "two"], ["", "x", "y"]]}),
        "{broken json",
        json.dumps({"id": "b", "entities": ["Brightwater Mills", "Orrin"],
                    "triples": [["Brightwater Mills", "located in", "Orrin"]]}),
    ]) + "\n", encoding="utf-8")
    index = Index.build(corpus, tmp_path / "idx", triples=str(triples), show_progress=False)
    counts = index.manifest.counts
    assert sum(v for k, v in counts.items() if "malformed" in k) >= 2
    assert sum(v for k, v in counts.items() if "bad_line" in k) >= 1
    facts = index.dir.table("tables/facts.parquet")
    # the two well-formed triples, then the two sentences that name two entities each
    assert facts["text"].tolist() == ["Ada Quill founded Brightwater Mills",
                                      "Brightwater Mills located in Orrin",
                                      "Ada Quill founded Brightwater Mills in 1890.",
                                      "Brightwater Mills stands in Orrin."]
    assert facts["typed"].tolist() == [True, True, False, False]  # triples, then sentences
    assert counts["facts"] == 4
    r = index.query("Where does the company Ada Quill founded stand?", k=2)
    assert set(r.doc_ids) == {"a", "b"}
    # the LLM's date is labelled as the rule-based extractors label dates: not a graph node
    assert "1890" not in set(index.dir.table("tables/entities.parquet")["name"])


def test_killed_extraction_resumes_without_redoing_finished_batches(tmp_path, monkeypatch):
    from gpurag.extract.ner import FastExtractor
    from gpurag.pipeline import graph_stage

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "title": f"Town {i}",
                                          "text": f"Town {i} lies on the River Vell{i}. "
                                                  f"Mayor Ann Brook{i} lives in Town {i}."})
                              + "\n" for i in range(30)), encoding="utf-8")
    monkeypatch.setattr(graph_stage, "EXTRACT_BATCH", 10)
    calls: list[int] = []
    real = FastExtractor.extract

    def flaky(self, chunks: pd.DataFrame, offset: int = 0):
        calls.append(offset)
        if offset == 20 and len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, chunks, offset)

    monkeypatch.setattr(FastExtractor, "extract", flaky)
    with pytest.raises(KeyboardInterrupt):
        Index.build(corpus, tmp_path / "idx", show_progress=False)
    assert calls == [0, 10, 20]
    index = Index.build(corpus, tmp_path / "idx", show_progress=False)
    assert calls == [0, 10, 20, 20]
    assert index.manifest.counts["chunks"] == 30
    assert not (tmp_path / ".idx.work").exists()


def test_default_mode_comes_from_the_query_config(graph_index, monkeypatch):
    from gpurag.config import load_config

    monkeypatch.setenv("GPURAG_QUERY_MODE", "dense")
    monkeypatch.setattr(graph_index, "query_config", load_config()[1])
    assert graph_index.query("Who founded Kestrel Dynamics?", k=3).mode == "dense"
    monkeypatch.delenv("GPURAG_QUERY_MODE")
    monkeypatch.setattr(graph_index, "query_config", load_config()[1])
    assert graph_index.query("Who founded Kestrel Dynamics?", k=3).mode == "graph"
