"""The head of the graph ranking on a corpus without bridge pages (chat logs, notes): when the
dense and BM25 rankings disagree on the first passage, both keep a place in the first two."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from gpurag import Index
from gpurag.config import QueryConfig
from gpurag.errors import ConfigError
from gpurag.profile import RankingProfile
from gpurag.query.graph import union_head
from gpurag.vectors import search

DATA = Path(__file__).parent / "data"
# chat messages grouped under "week1".."week3"
NOTES = Path(__file__).parents[1] / "data" / "notes_corpus.jsonl"
PAGES = DATA / "second_hop_corpus.jsonl"  # encyclopedic pages that mention each other
QUESTION = "Which appliance stopped dripping after the repair?"


@pytest.fixture(scope="module")
def notes(notes_index_path) -> Index:
    return Index.open(notes_index_path)  # NOTES, built once (tests/conftest.py)


def test_union_head_keeps_each_sources_first_row_in_fused_order():
    dense = np.array([[4, 1, 2], [5, 6, 7]])
    bm25 = np.array([[3, 1, -1], [5, 7, 6]])
    ppr = np.array([[1, 3, 4], [6, 5, 7]])
    head = union_head([dense, bm25], ppr, per_source=1, n=8)
    # Question 0: the sources disagree (4 and 3); 3 is also PPR's second, so it leads.
    assert head[0].tolist() == [3, 4]
    # Question 1: both put 5 first: one row, the second slot stays free for the graph.
    assert head[1].tolist() == [5, -1]


def test_auto_head_is_union_only_without_bridge_pages(notes, second_hop_index_path):
    cfg = QueryConfig().plan()
    assert notes.retriever.bridge_pages.reached_share(cfg.second_hop_max_pages) == 0.0
    resolved = notes.retriever.for_corpus(cfg)
    assert (resolved.head_mode, resolved.lexical_weight) == ("union", cfg.lexical_weight_unbridged)
    pages = Index.open(second_hop_index_path)  # PAGES, built once (tests/conftest.py)
    assert pages.retriever.bridge_pages.reached_share(cfg.second_hop_max_pages) > 0.02
    assert pages.retriever.for_corpus(cfg) == dataclasses.replace(cfg, head_mode="fused")
    # An explicit mode is kept as given.
    assert notes.retriever.for_corpus(QueryConfig().plan(head_mode="fused")).head_mode == "fused"


def test_disagreeing_sources_both_reach_the_first_two(notes):
    doc = notes.chunks["doc_id"].to_numpy()
    _, lex = notes.retriever.lexical.search([QUESTION], 1)
    _, dense = search(notes.passage_index, notes.embedder.encode([QUESTION]), 1)
    firsts = {doc[lex[0, 0]], doc[dense[0, 0]]}
    assert len(firsts) == 2, "the fixture question must split dense and BM25"
    union = notes.query_batch([QUESTION], k=3, mode="graph")[0].doc_ids
    fused = notes.query_batch([QUESTION], k=3, mode="graph", head_mode="fused")[0].doc_ids
    assert set(union[:2]) == firsts
    assert set(fused[:2]) != firsts  # one of them loses its place without the union


@pytest.mark.parametrize("setting,value", [("head_mode", "both"),
                                           ("lexical_weight_unbridged", -0.1)])
def test_head_settings_are_validated(setting, value):
    with pytest.raises(ConfigError):
        RankingProfile(**{setting: value})


def test_reached_share_is_computed_once_per_page_cap(notes, monkeypatch):
    pages = notes.retriever.bridge_pages
    first = pages.reached_share(3)
    monkeypatch.setattr(pages, "matrix", lambda max_pages: pytest.fail("recomputed"))
    assert pages.reached_share(3) == first
