"""The build profile (issue 25, deliver 5): the evaluated constants of the build are a frozen,
named, versioned BuildProfile chosen by name; the environment and the config file cannot
change them one by one (a setting that moved there says so); IndexConfig keeps what a user
decides; a build runs on the BuildPlan of both, which the manifest records."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

from gpurag.config import (
    BuildPlan,
    IndexConfig,
    build_plan,
    check_environment,
    load_config,
    stored_plan,
)
from gpurag.errors import ConfigError
from gpurag.profile import (
    ALIAS_KEYWORDS,
    BUILD_PROFILES,
    BuildProfile,
    build_profile_fields,
    get_build_profile,
    hnsw_options,
)

REPO = Path(__file__).resolve().parents[2]
# The constants as IndexConfig and the code held them before the profile: profile "default"
# v1 must keep every one, or the index files change.
V1 = {"merge_threshold": 0.9, "synonym_threshold": 0.8, "nested_threshold": 0.95,
      "token_similarity": 0.85, "acronym_merges": True, "acronym_similarity": 0.5,
      "surname_merges": True, "alias_neighbours": 10, "alias_exact_limit": 5_000,
      "alias_search_dim": 128, "alias_hnsw_m": 16, "alias_hnsw_ef_construction": 40,
      "alias_hnsw_ef_search": 32, "title_edge_weight": 10.0, "hnsw_m": 16,
      "hnsw_ef_construction": 80, "hnsw_ef_search": 96}
# Added later, read by local updates only (a full build's files are the same): the BM25
# delta's re-weighting bound (gpurag/query/lexical_delta.py).
ADDED = {"lexical_reweight_growth": 0.1}
MOVED = ("merge_threshold", "synonym_threshold", "title_edge_weight")  # IndexConfig fields once


def test_default_build_profile_keeps_the_constants_of_before():
    p = get_build_profile("default")
    assert (p.name, p.version, p.label) == ("default", 1, "default@1")
    got = p.constants()
    assert {k: got[k] for k in V1} == V1
    # constants added since, none of which a full build's files depend on
    assert set(got) - set(V1) == set(ADDED)
    assert {k: got[k] for k in ADDED} == ADDED


def test_code_defaults_agree_with_the_default_profile():
    """A function called without the profile (a test, a script) gets profile default's."""
    from gpurag.resolve import resolve_aliases
    from gpurag.vectors.faiss_index import DEFAULT_HNSW

    params = inspect.signature(resolve_aliases).parameters
    for name, keyword in ALIAS_KEYWORDS.items():
        assert params[keyword].default == V1[name], name
    assert DEFAULT_HNSW == hnsw_options(get_build_profile("default")) == (16, 80, 96)


def test_the_build_profile_names_the_runs_it_came_from():
    p = get_build_profile("default")
    for ref in ("docs/RECALL.md", "tests/resolve/", "bench/resolve.py",
                "gpurag/vectors/faiss_index.py", "gpurag/resolve/knn.py"):
        assert ref in p.evaluated_by and (REPO / ref).exists()


def test_build_profile_is_frozen_and_checked():
    with pytest.raises(dataclasses.FrozenInstanceError):
        BUILD_PROFILES["default"].merge_threshold = 0.5  # type: ignore[misc]
    with pytest.raises(ConfigError, match=r"build profile 'default': merge_threshold=1\.5"):
        BuildProfile(merge_threshold=1.5)


def test_index_config_keeps_user_decisions_only():
    user = {f.name for f in dataclasses.fields(IndexConfig)}
    assert not user & set(build_profile_fields())
    assert not set(MOVED) & user
    assert "profile" in user
    assert {f.name for f in dataclasses.fields(BuildPlan)} == (
        user | set(build_profile_fields()) | {"profile_version"})


@pytest.mark.parametrize("name", sorted(V1))
def test_environment_and_file_cannot_set_a_build_profile_constant(tmp_path, name):
    var = f"GPURAG_INDEX_{name.upper()}"
    value = str(V1[name]).lower()  # even the profile's own value
    for call in (lambda: load_config(environ={var: value}),
                 lambda: check_environment({var: value})):
        with pytest.raises(ConfigError, match=var) as info:
            call()
        message = str(info.value)
        assert "build profile (gpurag/profile.py BuildProfile)" in message
        assert "\n" not in message
    toml = tmp_path / "i.toml"
    toml.write_text(f"[index]\n{name} = {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"\\[index\\] {name}") as info:
        load_config(toml, environ={})
    assert "BuildProfile" in str(info.value)


@pytest.mark.parametrize("name", MOVED)
def test_a_setting_that_moved_to_the_profile_says_where(tmp_path, name):
    toml = tmp_path / "old.toml"
    toml.write_text(f"[index]\n{name} = 0.85\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(toml, environ={})
    assert str(info.value) == (
        f"{toml}: [index] {name}=0.85: {name} is a constant of the build profile "
        "(gpurag/profile.py BuildProfile), which cannot be changed field by field here: choose "
        f"a profile by name (profile), or pass {name}= explicitly in Python (to Index.build)")


def test_misspelled_index_settings_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown setting 'GPURAG_INDEX_PROFILEE'"):
        load_config(environ={"GPURAG_INDEX_PROFILEE": "default"})
    toml = tmp_path / "typo.toml"
    toml.write_text("[index]\nmerge_treshold = 0.8\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown setting '\[index\] merge_treshold'"):
        load_config(toml, environ={})
    with pytest.raises(ConfigError, match="GPURAG_INDEX_PROFILE='tuned'"):
        load_config(environ={"GPURAG_INDEX_PROFILE": "tuned"})
    with pytest.raises(ConfigError, match="merge_treshold"):
        build_plan(IndexConfig(), {"merge_treshold": 0.8})


def test_build_profile_is_selectable_by_name(monkeypatch, tmp_path):
    loose = BuildProfile(name="loose", version=3, merge_threshold=0.7)
    monkeypatch.setitem(BUILD_PROFILES, "loose", loose)
    assert load_config(environ={"GPURAG_INDEX_PROFILE": "loose"})[0].profile == "loose"
    toml = tmp_path / "p.toml"
    toml.write_text('[index]\nprofile = "loose"\n', encoding="utf-8")
    cfg = load_config(toml, environ={})[0]
    plan = build_plan(cfg)
    assert (plan.profile, plan.profile_version, plan.merge_threshold) == ("loose", 3, 0.7)
    assert plan.synonym_threshold == V1["synonym_threshold"]


def test_explicit_values_run_on_a_named_copy():
    plan = build_plan(IndexConfig(), {"merge_threshold": 0.5, "chunk_tokens": 128})
    assert (plan.profile, plan.merge_threshold, plan.chunk_tokens) == ("default+custom", 0.5, 128)
    assert get_build_profile("default").merge_threshold == 0.9
    assert build_plan(IndexConfig()).profile == "default"
    own = build_plan(IndexConfig(), {"profile": BuildProfile(name="mine", hnsw_m=8)})
    assert (own.profile, own.hnsw_m) == ("mine", 8)
    again = build_plan(own, {"alias_neighbours": 5})  # a plan keeps its own constants
    assert (again.profile, again.hnsw_m, again.alias_neighbours) == ("mine+custom", 8, 5)
    with pytest.raises(ConfigError, match=r"Index\.build: hnsw_m=1 is not valid"):
        build_plan(IndexConfig(), {"hnsw_m": 1})


def test_the_manifest_config_gives_back_the_plan():
    custom = build_plan(IndexConfig(), {"merge_threshold": 0.5})
    assert stored_plan(dataclasses.asdict(custom)) == custom
    assert stored_plan({**dataclasses.asdict(custom), "from_a_newer_gpurag": 1}) == custom
    # An index from before the profile recorded three constants and no profile.
    old = {k: v for k, v in dataclasses.asdict(build_plan(IndexConfig())).items()
           if k in {f.name for f in dataclasses.fields(IndexConfig)} - {"profile"}}
    assert stored_plan({**old, "merge_threshold": 0.9, "synonym_threshold": 0.8,
                        "title_edge_weight": 10.0}).profile == "default"
    moved = stored_plan({**old, "merge_threshold": 0.85})
    assert (moved.profile, moved.merge_threshold) == ("default+custom", 0.85)
    assert moved.build_profile().merge_threshold == 0.85


def test_info_names_the_profile_updates_read_back():
    """``gpurag info`` reports an old index's constants as updates use them: an index built
    before the profile with another merge threshold is ``default+custom``, not ``default``."""
    from gpurag.info import _build_profile_label

    old = {k: v for k, v in dataclasses.asdict(build_plan(IndexConfig())).items()
           if k in {f.name for f in dataclasses.fields(IndexConfig)} - {"profile"}}
    assert _build_profile_label({**old, "merge_threshold": 0.9}) == "default@1"
    assert _build_profile_label({**old, "merge_threshold": 0.85}) == "default+custom@1"
