"""Chains longer than two: the rounds after the second hop reach the page three hops from the
entity the question names, as many rounds as the question has relations past its first, and a
question without such relations keeps its ranking."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpurag import Index
from gpurag.errors import ConfigError
from gpurag.profile import RankingProfile
from gpurag.query.chain_rounds import fresh_sources, relation_counts, rounds_for

CORPUS = Path(__file__).parent / "data" / "chain_corpus.jsonl"
# Brother (named) -> Pearl Jam (its performers) -> Seattle (where they formed) -> King County
CHAIN = "In which county is the city where the performers of Brother were formed?"
PLAIN = "Which band recorded Brother?"


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Index:
    return Index.build(CORPUS, tmp_path_factory.mktemp("chain") / "idx", show_progress=False)


def _docs(index: Index, question: str, rounds: int) -> list[str]:
    return index.query_batch([question], k=10, mode="graph", evidence=False,
                             chain_rounds=rounds)[0].doc_ids


def test_rounds_come_from_the_question_relations():
    qs = [CHAIN, PLAIN, "What is the capital of the country where the composer of X was born?",
          "Who was Hello Love's performer?"]
    assert relation_counts(qs).tolist() == [3, 0, 3, 1]
    assert rounds_for(qs, 5).tolist() == [2, 0, 2, 0]
    assert rounds_for(qs, 1).tolist() == [1, 0, 1, 0]  # the budget caps them
    assert rounds_for(qs, 0).tolist() == [0, 0, 0, 0]


def test_fresh_sources_skip_rows_a_round_started_from():
    rows = np.array([[4, 7, 2, 9, -1], [1, 2, 3, 4, 5]])
    used = np.array([[7, 9], [-1, -1]])
    assert fresh_sources(rows, used, depth=5, take=2).tolist() == [[4, 2], [1, 2]]
    assert fresh_sources(rows, used, depth=2, take=2).tolist() == [[4, -1], [1, 2]]


def test_the_third_hop_is_reached_in_the_first_round(index):
    off = _docs(index, CHAIN, 0)
    assert off[:3] == ["brother", "pearljam", "gossard"]  # the second hop found the band
    assert "kingcounty" not in off  # three hops from the song: out of the walk's reach
    one = _docs(index, CHAIN, 1)
    assert "kingcounty" in one
    assert one[:5] == off[:5]  # the round's pages come below the first documents


def test_a_question_without_further_relations_keeps_its_ranking(index):
    assert _docs(index, PLAIN, 3) == _docs(index, PLAIN, 0)


def test_chain_rounds_setting_is_validated():
    with pytest.raises(ConfigError, match="chain_rounds"):
        RankingProfile(chain_rounds=-1)
