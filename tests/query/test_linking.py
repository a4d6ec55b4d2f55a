"""Question entity linking: every entity a question names seeds the walk with its own share."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpurag.query.linking import EntityLinker

COMPARISON = "Which was established first, Kestrel Dynamics Ltd. or Brask & Thorne Shipwrights?"


def _id_of(graph_index, name: str) -> int:
    aliases = graph_index.dir.table("tables/aliases.parquet")
    return int(aliases.loc[aliases["name"] == name, "entity_id"].iloc[0])


def test_linker_prefers_the_longest_name_and_keeps_spans():
    aliases = pd.DataFrame({"name": ["Brenmoor", "Brenmoor University", "the", "Oskerby"],
                            "entity_id": [1, 2, 3, 4]})
    linker = EntityLinker(aliases)
    [found] = linker.link(["Did anyone from Brenmoor University visit Oskerby or the coast?"])
    assert [e.entity_id for e in found] == [2, 4]  # not 1 (inside a longer name), not "the"
    q = "Did anyone from Brenmoor University visit Oskerby or the coast?"
    assert q[found[0].start:found[0].end] == "Brenmoor University"
    assert linker.link(["what about brenmoor?"]) == [[]]  # names start with a capital


def test_comparison_question_seeds_both_named_entities(graph_index):
    retriever = graph_index.retriever
    kestrel = _id_of(graph_index, "Kestrel Dynamics Ltd.")
    brask = _id_of(graph_index, "Brask & Thorne Shipwrights")
    [linked] = retriever.linker.link([COMPARISON])
    assert {kestrel, brask} <= {e.entity_id for e in linked}

    [result] = graph_index.query_batch([COMPARISON], k=5, link_weight=1.0)
    seeds = {s.entity_id: s for s in result.seeds}
    assert kestrel in seeds and brask in seeds

    qvec = graph_index.embedder.encode([COMPARISON])
    cfg = graph_index.query_config.plan()
    import dataclasses

    dense = graph_index.passage_index.search(qvec, 20)
    off, _ = retriever.reset_matrix(qvec, dataclasses.replace(cfg, link_weight=0.0), dense,
                                    [COMPARISON])
    on, _ = retriever.reset_matrix(qvec, dataclasses.replace(cfg, link_weight=1.0), dense,
                                   [COMPARISON])
    on = on.toarray()[0] / on.sum()
    off = off.toarray()[0] / off.sum()
    # Both named entities get their own share: each outweighs every entity the question does
    # not name, and each gains mass over the FAISS seeds alone.
    n_ent = retriever.n_ent
    others = np.setdiff1d(np.arange(n_ent), [e.entity_id for e in linked])
    assert min(on[kestrel], on[brask]) > on[others].max()
    assert on[brask] > off[brask] and on[kestrel] > off[kestrel]


def test_a_retrieval_links_its_batch_once(graph_index, monkeypatch):
    """The walk's reset, the title head and the second hop share one linking of the batch
    (no memo in the linker: hidden shared state in the service)."""
    linker = graph_index.retriever.linker
    calls = []
    inner = linker._link
    monkeypatch.setattr(linker, "_link", lambda qs: calls.append(list(qs)) or inner(qs))
    questions = [COMPARISON, "Did Halvard study at Brenmoor University?"]
    graph_index.query_batch(questions, k=5, head_fusion="dense+bm25+title+ppr")
    assert calls == [questions]
    graph_index.query_batch(questions, k=5)
    assert calls == [questions, questions]  # the next batch links again: nothing is kept


def test_the_index_stores_each_alias_key_and_old_indexes_still_link(graph_index):
    """The alias table carries each name's lookup key, so opening an index does not normalize
    every alias again (once for linking, once for the second hop); an index written before,
    without the column, links the same."""
    from gpurag.resolve.normalize import normalize_name

    table = graph_index.dir.table("tables/aliases.parquet")
    assert table["key"].tolist() == normalize_name(table["name"].astype(str).tolist())
    new = EntityLinker(table).link([COMPARISON])
    old = EntityLinker(table.drop(columns=["key"])).link([COMPARISON])
    assert new == old and new[0]
    assert graph_index.retriever.aliases is graph_index.retriever.aliases  # read once
