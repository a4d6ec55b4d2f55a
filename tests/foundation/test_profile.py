"""The ranking profile (issue 25, deliver 5): the evaluated constants are a frozen, named,
versioned RankingProfile, chosen by name; the environment and the config file cannot change
them one by one; QueryConfig keeps what a user decides."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpurag.config import QueryConfig, QueryPlan, check_environment, load_config, query_plan
from gpurag.errors import ConfigError
from gpurag.profile import PROFILES, RankingProfile, get_profile, profile_fields

REPO = Path(__file__).resolve().parents[2]
# The constants as QueryConfig held them before the profile (and BRIDGED_SHARE, in code):
# profile "default" v1 must keep every one, or per-question ranks change.
V1 = {"damping": 0.8, "seed_entities": 10, "seed_facts": 10, "seed_passages": 20,
      "sim_power": 4.0, "entity_margin": 0.1, "fact_margin": 0.2, "entity_weight": 1.0,
      "fact_weight": 1.0, "passage_weight": 0.05, "link_weight": 4.0, "lexical_seeds": 10,
      "lexical_weight": 0.05, "dense_head": 1, "head_fusion": "dense+bm25", "head_mode": "auto",
      "lexical_weight_unbridged": 0.3, "bridged_share": 0.02, "dense_blend": 0.0,
      "second_hop_weight": 0.35, "second_hop_from": 5, "second_hop_temperature": 0.05,
      "second_hop_rank_constant": 2.0, "second_hop_max_pages": 3, "second_hop_expansions": 3,
      "second_hop_expansion_weight": 0.5, "second_hop_expansion_keep": 5,
      "second_hop_triples": 4, "chain_rounds": 0,
      # the walk's push threshold: read only on graphs past the size rule (>= 500k edges)
      "push_eps": 3e-6, "push_min_edges": 500_000, "push_max_seeds": 256}
# v2: v1 and shared-entity pages (docs/RECALL.md "Shared-entity pages"); weight 0 is v1's ranks
V2 = {**V1, "shared_entity_weight": 0.25, "shared_entity_from": 3, "shared_entity_max_df": 50,
      "shared_entity_temperature": 0.1}


def test_default_profile_keeps_the_evaluated_constants():
    p = get_profile("default")
    assert (p.name, p.version, p.label) == ("default", 2, "default@2")
    assert p.constants() == V2


def test_the_profile_names_the_runs_it_came_from():
    p = get_profile("default")
    for doc in ("docs/RECALL.md", "docs/results.md"):
        assert doc in p.evaluated_by and (REPO / doc).is_file()


def test_profile_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PROFILES["default"].second_hop_weight = 0.0  # type: ignore[misc]


def test_query_config_keeps_user_decisions_only():
    user = {f.name for f in dataclasses.fields(QueryConfig)}
    assert user == {"mode", "k", "profile", "ppr_tol", "ppr_method", "rerank",
                    "rerank_candidates", "gat_checkpoint"}
    assert not user & set(profile_fields())  # a name means one thing
    assert {f.name for f in dataclasses.fields(QueryPlan)} == user | set(profile_fields())


def test_profile_is_selectable_by_name_and_an_unknown_name_is_an_error(monkeypatch, tmp_path):
    flat = RankingProfile(name="flat", second_hop_weight=0.0, second_hop_expansions=0)
    monkeypatch.setitem(PROFILES, "flat", flat)
    _, plan = query_plan(QueryConfig(profile="flat"))
    assert (plan.profile, plan.second_hop_weight, plan.second_hop_expansions) == ("flat", 0, 0)
    assert plan.damping == V1["damping"]
    assert load_config(environ={"GPURAG_QUERY_PROFILE": "flat"})[1].profile == "flat"
    toml = tmp_path / "q.toml"
    toml.write_text('[query]\nprofile = "flat"\n', encoding="utf-8")
    assert load_config(toml, environ={})[1].profile == "flat"
    with pytest.raises(ConfigError, match="tuned"):
        QueryConfig(profile="tuned")
    with pytest.raises(ConfigError, match="GPURAG_QUERY_PROFILE"):
        load_config(environ={"GPURAG_QUERY_PROFILE": "tuned"})


@pytest.mark.parametrize("name", sorted(V1))
def test_environment_and_file_cannot_override_a_profile_field(tmp_path, name):
    var = f"GPURAG_QUERY_{name.upper()}"
    value = str(V1[name])  # even the profile's own value: the field is not the env's to set
    for call in (lambda: load_config(environ={var: value}),
                 lambda: check_environment({var: value})):
        with pytest.raises(ConfigError, match=var) as info:
            call()
        assert "ranking profile" in str(info.value) and "\n" not in str(info.value)
    toml = tmp_path / "q.toml"
    toml.write_text(f"[query]\n{name} = {value!r}\n".replace("'", '"'), encoding="utf-8")
    with pytest.raises(ConfigError, match=f"\\[query\\] {name}") as info:
        load_config(toml, environ={})
    assert "ranking profile" in str(info.value)


def test_explicit_values_run_on_a_named_copy_and_are_checked():
    cfg, plan = query_plan(QueryConfig(), {"k": 3, "second_hop_weight": 0}, "query")
    assert cfg.k == 3 and plan.k == 3 and plan.second_hop_weight == 0.0
    assert plan.profile == "default+custom" and get_profile("default").second_hop_weight == 0.35
    assert query_plan(QueryConfig())[1].profile == "default"
    with pytest.raises(ConfigError, match=r"query: damping=2\.5 is not valid"):
        query_plan(QueryConfig(), {"damping": 2.5}, "query")
    with pytest.raises(ConfigError, match="second_hop_wieght"):
        query_plan(QueryConfig(), {"second_hop_wieght": 0.1}, "query")


@pytest.mark.parametrize("name", sorted(V1))
def test_every_profile_field_is_checked(name):
    rule = profile_fields()[name]
    bad = "no-such-choice" if rule.kind is str else -1
    if rule.kind is not str and rule.lo is not None and rule.lo < 0:
        pytest.skip("no negative bound")
    with pytest.raises(ConfigError, match=name):
        RankingProfile(**{name: bad})
