"""Synthetic multi-hop questions from an index's own graph: a bridge question names the first
hop and never the bridge, its gold is the bridge pair, the same seed gives the same questions,
and an index without bridges says so."""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from gpurag import Index
from gpurag.errors import ConfigError
from gpurag.query.synthetic import BUILDERS, KINDS
from gpurag.rerank.train import TrainConfig
from gpurag.training.synthetic import (
    Corpus,
    bridge_triples,
    generate,
    prepare_synthetic,
)

DATA = Path(__file__).parents[1] / "rerank" / "data"
NOTES = Path(__file__).parents[1] / "data" / "notes_corpus.jsonl"


@pytest.fixture(scope="module")
def index(rerank_index_path) -> Index:
    return Index.open(rerank_index_path)  # DATA / "corpus.jsonl", built once (tests/conftest.py)


@pytest.fixture(scope="module")
def notes(notes_index_path) -> Index:
    return Index.open(notes_index_path)  # NOTES, built once (tests/conftest.py)


def _names(text: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE) is not None


def test_bridge_questions_name_the_first_hop_and_hide_the_bridge(index):
    syn = generate(index, 30, seed=0, kinds={"bridge": 1.0}, trivial_top=0, per_page=10)
    docs = index.chunks["doc_id"].tolist()
    titles = index.chunks["title"].tolist()
    matrix = index.retriever.bridge_pages.matrix(3)
    title_entity = index.retriever.title_entity
    names = index.retriever.entity_names
    pairs = {(docs[q.rows[0]], docs[q.rows[1]]) for q in syn.questions}
    assert {("fawell", "westchicago"), ("song", "owens"), ("song", "capitol")} <= pairs
    for q in syn.questions:
        a, b = q.rows
        assert q.kind == "bridge" and q.gold_ids == (docs[a], docs[b])
        assert matrix[a, b] == 1  # the second hop of graph retrieval links them
        assert _names(q.question, names[title_entity[a]])  # the first hop is named
        short_b = re.sub(r"\s*\(.*\)$", "", titles[b]).split(",")[0]
        assert not _names(q.question, short_b), q.question  # the bridge page is not
        assert not any(_names(q.question, h) for h in q.hidden)
    fawell = next(q for q in syn.questions if q.gold_ids == ("fawell", "westchicago"))
    # The relation words of Fawell's page that lead to the bridge, not its name.
    assert "Harris W. Fawell" in fawell.question and "born in" in fawell.question
    assert not _names(fawell.question, "West Chicago")


def test_chain_and_comparison_questions(index):
    syn = generate(index, 40, seed=0, kinds={"chain": 1.0, "comparison": 1.0}, trivial_top=0,
                   per_page=10)
    docs = index.chunks["doc_id"].tolist()
    chains = [q for q in syn.questions if q.kind == "chain"]
    assert chains and all(len(q.gold_ids) == 3 for q in chains)
    assert ("song", "owens", "sherman") in {q.gold_ids for q in chains}
    for q in chains:  # only the first hop is named
        assert not any(_names(q.question, h) for h in q.hidden)
    comparisons = [q for q in syn.questions if q.kind == "comparison"]
    assert comparisons
    for q in comparisons:  # both pages named, both gold
        assert len(q.named) == 2 and all(n in q.question for n in q.named)
        assert q.gold_ids == tuple(docs[r] for r in q.rows)


def test_same_seed_same_questions(index):
    one = generate(index, 25, seed=3, trivial_top=0)
    two = generate(index, 25, seed=3, trivial_top=0)
    other = generate(index, 25, seed=4, trivial_top=0)
    assert one.questions and one.questions == two.questions
    assert [q.question for q in one.questions] != [q.question for q in other.questions]
    assert len({q.id for q in one.questions}) == len(one.questions)


def test_trivial_questions_are_dropped(index):
    kept = generate(index, 100, seed=0, trivial_top=2)
    every = generate(index, 100, seed=0, trivial_top=0)  # n above the pool: all kept
    assert len(every.questions) == sum(s["built"] for s in every.stats.values())

    def trivial(q) -> bool:
        top = list(dict.fromkeys(index.query(q.question, k=8, mode="dense").doc_ids))[:2]
        return set(q.gold_ids) <= set(top)

    flags = [trivial(q) for q in every.questions]
    assert any(flags) and not all(flags)
    assert [q.question for q in kept.questions] == [
        q.question for q, t in zip(every.questions, flags, strict=True) if not t]
    assert sum(s["trivial"] for s in kept.stats.values()) == sum(flags)


def test_index_without_bridges_yields_none(notes):
    c = Corpus.from_index(notes)
    assert len(bridge_triples(c)) == 0
    syn = generate(notes, 10, kinds={"bridge": 1.0, "chain": 1.0}, trivial_top=0)
    assert syn.questions == [] and "no bridge pairs" in syn.empty_reason
    with pytest.raises(ConfigError, match="yields no synthetic questions"):
        prepare_synthetic(notes, 10, TrainConfig(), kinds={"bridge": 1.0})
    with pytest.raises(ConfigError, match="unknown synthetic question kinds"):
        generate(notes, 10, kinds={"bridges": 1.0})
    with pytest.raises(ConfigError, match="at least 1"):
        generate(notes, 0)


def test_questions_are_eval_records(index):
    syn = generate(index, 6, seed=0, trivial_top=0)
    rec = syn.questions[0].record()
    assert rec["gold_ids"] == list(syn.questions[0].gold_ids)
    assert rec["type"].startswith("synthetic-") and rec["hops"] >= 2
    assert np.all([len(q.gold_ids) >= 2 for q in syn.questions])


def test_module_writes_eval_format_questions(index, tmp_path):
    from gpurag.training.synthetic import main

    out = tmp_path / "questions.jsonl"
    assert main([str(index.path), "-n", "5", "--trivial-top", "0", "-o", str(out)]) == 0
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 5
    assert all(set(x["gold_ids"]) <= set(index.chunks["doc_id"]) for x in lines)


def test_four_hop_chains_follow_three_bridges_and_name_only_the_first_hop(index):
    syn = generate(index, 20, seed=0, kinds={"chain4": 1.0}, trivial_top=0, per_page=10)
    docs = index.chunks["doc_id"].tolist()
    matrix = index.retriever.bridge_pages.matrix(3)
    chains = syn.questions
    assert chains and all(q.kind == "chain4" for q in chains)
    # e.g. song -> Buck Owens -> The Buckaroos -> Don Rich; one per first-hop passage
    assert "song" in {q.gold_ids[0] for q in chains}
    assert len({q.rows[0] for q in chains}) == len(chains)
    for q in chains:
        assert len(set(q.gold_ids)) == 4 and q.gold_ids == tuple(docs[r] for r in q.rows)
        assert all(matrix[a, b] == 1 for a, b in pairwise(q.rows))  # bridge pages
        assert q.record()["hops"] == 4
        assert not any(_names(q.question, h) for h in q.hidden), q.question
    # not in the default mix, and after the default kinds in BUILDERS (each kind's random
    # stream is seeded by its place there): rerank=auto's questions are the same as before
    assert "chain4" not in generate(index, 20, seed=0, trivial_top=0).stats
    assert list(BUILDERS)[:len(KINDS)] == list(KINDS) == ["bridge", "chain", "comparison",
                                                          "shared"]


def _aspect_corpus() -> Corpus:
    import pandas as pd

    text = ["Maryland is a state. Its state sport is jousting.",
            "The history of the state begins with a colony founded by Lord Baltimore.",
            "Jousting is the official sport of Maryland."]
    names = np.array(["Maryland", "Jousting"], object)
    mentions = pd.DataFrame({"entity": [1, 0], "chunk": [0, 2], "start": [41, 35],
                             "end": [49, 43], "label": ["MISC", "GPE"]})
    aliases = pd.DataFrame({"name": names, "entity_id": [0, 1], "key": ["maryland", "jousting"]})
    return Corpus(text, ["Maryland", "History of Maryland", "Jousting"],
                  np.array(["md", "mdhist", "joust"], object), np.array([0, -1, 1]), mentions,
                  names, aliases)


def test_aspect_pages_are_bridge_pages_when_asked():
    c = _aspect_corpus()
    assert sorted(map(tuple, c.titled(3).to_numpy())) == [(0, 0), (1, 2)]
    assert set(bridge_triples(c)["b_row"]) == {0, 2}
    c = _aspect_corpus()
    c.aspects = True  # "History of Maryland" is about Maryland, which does not title it
    assert sorted(map(tuple, c.titled(3).to_numpy())) == [(0, 0), (0, 1), (1, 2)]
    got = bridge_triples(c)
    assert set(map(tuple, got[["a_row", "b_row"]].to_numpy())) == {(0, 2), (2, 0), (2, 1)}
    # aspect pages are counted apart from the titled ones, as in the second hop's bridges
    assert (2, 1) in set(map(tuple, bridge_triples(c, 1)[["a_row", "b_row"]].to_numpy()))


def test_a_category_bridges_to_none_of_its_aspects_as_in_the_second_hop():
    """An entity titling more than ``max_pages`` passages names a category: the synthetic
    bridges, like the second hop's bridge matrix, go neither to its pages nor its aspects."""
    import pandas as pd

    from gpurag.query.second_hop import bridge_matrix

    text = ["Maryland is a state.", "Maryland's flag is old.", "The history begins in 1632.",
            "Jousting is the official sport of Maryland."]
    names = np.array(["Maryland", "Jousting"], object)
    mentions = pd.DataFrame({"entity": [1, 0], "chunk": [0, 3], "start": [0, 35],
                             "end": [8, 43], "label": ["GPE", "MISC"]})
    aliases = pd.DataFrame({"name": names, "entity_id": [0, 1], "key": ["maryland", "jousting"]})
    titles = ["Maryland", "Maryland", "History of Maryland", "Jousting"]
    c = Corpus(text, titles, np.array(["md", "md2", "mdhist", "joust"], object),
               np.array([0, 0, -1, 1]), mentions, names, aliases, aspects=True)
    pairs = set(map(tuple, c.titled(1).to_numpy()))
    assert pairs == {(1, 3)}  # Maryland titles 2 > 1 pages: no page and no aspect of it
    matrix = bridge_matrix(mentions, c.title_entity, pd.Series(titles), aliases, 2, 1)
    assert {(int(a), int(b)) for a, b in zip(*matrix.nonzero(), strict=True)} == {(0, 3)}
    assert pairs | {(0, 0), (0, 1), (0, 2)} == set(map(tuple, c.titled(2).to_numpy()))


@pytest.mark.parametrize("bridges", [2, 3])
def test_chains_of_either_length_follow_bridges_across_documents(index, bridges):
    """One builder for both lengths (``chain4_questions`` is it along three bridges): each
    question follows ``bridges`` bridge pages from A, pages two or more hops apart in
    different documents, its gold the pages' documents, at most ``per_page // 2`` (three
    pages) or one (four) from one first-hop passage. (Before the two builders became one,
    their questions were compared equal for every seed, count, per_page and max_pages tried,
    with and without aspect pages, on this corpus and on hotpotqa_train100; the next test
    pins those builders' questions.)"""
    from collections import Counter

    from gpurag.query.synthetic import chain_questions

    c = Corpus.from_index(index)
    matrix = index.retriever.bridge_pages.matrix(3)
    for per_page in (1, 4):
        qs = chain_questions(c, 40, np.random.default_rng([0, 1]), 3, per_page, bridges=bridges)
        assert qs
        most = max(1, per_page // 2) if bridges == 2 else 1
        assert max(Counter(q.rows[0] for q in qs).values()) == most
        for q in qs:
            assert q.kind == ("chain" if bridges == 2 else "chain4")
            assert len(q.rows) == bridges + 1 and q.question.endswith("?")
            assert all(matrix[a, b] == 1 for a, b in pairwise(q.rows))  # bridge pages
            assert all(c.doc[q.rows[i]] != c.doc[q.rows[j]]
                       for i in range(len(q.rows)) for j in range(i + 2, len(q.rows)))
            assert q.gold_ids == tuple(dict.fromkeys(str(c.doc[r]) for r in q.rows))
            assert q.record()["hops"] == bridges + 1


# sha256 of every question (all fields) the two chain builders gave on the rerank test corpus
# at 681faa7, the last commit with two separate builders (see the test below)
CHAIN_DIGEST = "b2996eab4f8990455e0806e566757b0739799671100a20b33ce6e8a6b01e8395"


def chain_digest(index) -> tuple[str, int]:
    """The digest of the chain builders' questions over seeds, per_page, max_pages and aspect
    pages, and how many questions it covers."""
    import dataclasses
    import hashlib

    from gpurag.query.synthetic import chain4_questions, chain_questions

    out = []
    for aspects in (False, True):
        c = Corpus.from_index(index, aspects=aspects)
        for builder in (chain_questions, chain4_questions):
            for per_page in (1, 2, 4):
                for seed in ([0, 1], [0, 4], [7]):
                    for max_pages in (2, 3):
                        qs = builder(c, 30, np.random.default_rng(seed), max_pages, per_page)
                        out.append([builder.__name__, aspects, per_page, seed, max_pages,
                                    [dataclasses.astuple(q) for q in qs]])
    text = json.dumps(out, default=int)
    return hashlib.sha256(text.encode()).hexdigest(), sum(len(x[-1]) for x in out)


def test_a_seed_gives_the_chain_questions_it_gave_before_the_builders_merged(index):
    """A digest of generated data, on purpose: it pins "a seed gives the questions it gave"
    (training sets and ``rerank="auto"``'s decision are drawn from these builders), which no
    structural check can. The expected digest was computed with the two separate builders of
    681faa7 (``chain_questions`` and ``chain4_questions`` before they became one) on this
    test's index (the rerank corpus as the current build indexes it: the merged builder gives
    the same digest there); any change in the draws, their order or the question text fails it. A
    deliberate change of the questions updates it (and says so in its commit)."""
    digest, n = chain_digest(index)
    assert n > 0
    assert digest == CHAIN_DIGEST
