"""The ranking profile at query time (issue 25, deliver 5): explicit values run on a copy and
change nothing when they equal the profile's; the environment cannot set a profile field; a
query config of mode "global" is accepted by Index.query as the keyword is."""

from __future__ import annotations

import dataclasses

import pytest

from gpurag.config import QueryConfig
from gpurag.errors import ConfigError
from gpurag.profile import get_profile


def _ranks(results):
    return [r.doc_ids for r in results]


def test_the_profiles_own_values_given_explicitly_change_no_rank(graph_index, questions):
    plain = graph_index.query_batch(questions, k=5, mode="graph", evidence=False)
    same = graph_index.query_batch(questions, k=5, mode="graph", evidence=False,
                                   **get_profile("default").constants())
    assert _ranks(plain) == _ranks(same)
    off = graph_index.query_batch(questions, k=5, mode="graph", evidence=False,
                                  second_hop_weight=0.0, second_hop_expansions=0,
                                  link_weight=0.0, lexical_weight=0.0, dense_head=0)
    assert _ranks(off) != _ranks(plain)  # the explicit values do reach the ranking


def test_environment_cannot_set_a_profile_field(graph_index, monkeypatch):
    from gpurag import Index

    monkeypatch.setenv("GPURAG_QUERY_LINK_WEIGHT", "0")
    with pytest.raises(ConfigError, match="GPURAG_QUERY_LINK_WEIGHT"):
        Index.open(graph_index.path)


def test_mode_global_from_the_query_config_is_accepted(graph_index, monkeypatch):
    monkeypatch.setattr(graph_index, "query_config", QueryConfig(mode="global"))
    by_config = graph_index.query("What are the main themes of this corpus?", k=3)
    monkeypatch.setattr(graph_index, "query_config", QueryConfig())
    by_keyword = graph_index.query("What are the main themes of this corpus?", k=3,
                                   mode="global")
    assert by_config.mode == by_keyword.mode == "global"
    assert dataclasses.asdict(by_config)["communities"] == \
        dataclasses.asdict(by_keyword)["communities"]
