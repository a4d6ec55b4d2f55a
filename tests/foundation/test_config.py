"""Settings: defaults, TOML file, GPURAG_INDEX_* / GPURAG_QUERY_* environment, errors."""

from __future__ import annotations

import dataclasses

import pytest

from gpurag.config import IndexConfig, QueryConfig, apply_overrides, load_config
from gpurag.errors import ConfigError


def _toml(tmp_path, text: str):
    p = tmp_path / "gpurag.toml"
    p.write_text(text, encoding="utf-8")
    return p


def test_defaults():
    icfg, qcfg = load_config()
    assert icfg == IndexConfig() and qcfg == QueryConfig()


def test_toml_overrides(tmp_path):
    p = _toml(tmp_path, """
[index]
chunk_tokens = 128
chunk_overlap = 8
graph = true
max_community_size = 32

[query]
k = 7
mode = "dense"
""")
    icfg, qcfg = load_config(p)
    assert (icfg.chunk_tokens, icfg.chunk_overlap, icfg.graph) == (128, 8, True)
    assert icfg.max_community_size == 32
    assert (qcfg.k, qcfg.mode) == (7, "dense")
    untouched = {f.name for f in dataclasses.fields(IndexConfig)} - {
        "chunk_tokens", "chunk_overlap", "graph", "max_community_size"}
    for name in untouched:
        assert getattr(icfg, name) == getattr(IndexConfig(), name)


def test_config_path_from_environment(tmp_path, monkeypatch):
    p = _toml(tmp_path, "[index]\nchunk_tokens = 99\n")
    monkeypatch.setenv("GPURAG_CONFIG", str(p))
    assert load_config()[0].chunk_tokens == 99


def test_environment_beats_file_and_is_typed(tmp_path, monkeypatch):
    p = _toml(tmp_path, "[index]\nchunk_tokens = 128\ngraph = true\n[query]\nk = 7\n")
    monkeypatch.setenv("GPURAG_INDEX_CHUNK_TOKENS", "64")
    monkeypatch.setenv("GPURAG_INDEX_GRAPH", "0")
    monkeypatch.setenv("GPURAG_INDEX_MAX_COMMUNITY_SIZE", "16")
    monkeypatch.setenv("GPURAG_INDEX_EMBEDDER", "onnx:/x/model.onnx")
    monkeypatch.setenv("GPURAG_QUERY_K", "3")
    icfg, qcfg = load_config(p)
    assert icfg.chunk_tokens == 64 and isinstance(icfg.chunk_tokens, int)
    assert icfg.graph is False
    assert icfg.max_community_size == 16
    assert icfg.embedder == "onnx:/x/model.onnx"
    assert qcfg.k == 3


@pytest.mark.parametrize("value,expected", [("1", True), ("true", True), ("YES", True),
                                            ("on", True), ("0", False), ("false", False),
                                            ("no", False)])
def test_bool_env_values(monkeypatch, value, expected):
    monkeypatch.setenv("GPURAG_INDEX_GRAPH", value)
    assert load_config()[0].graph is expected


def test_unknown_key_in_file_names_file_and_key(tmp_path):
    p = _toml(tmp_path, "[index]\nchunk_tokenz = 128\n")
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert str(p) in str(info.value) and "chunk_tokenz" in str(info.value)


def test_unknown_query_key_in_file(tmp_path):
    p = _toml(tmp_path, "[query]\ntop_k = 3\n")
    with pytest.raises(ConfigError, match="top_k") as info:
        load_config(p)
    assert str(p) in str(info.value)


def test_broken_toml_names_file(tmp_path):
    p = _toml(tmp_path, "[index\nchunk_tokens = \n")
    with pytest.raises(ConfigError, match="cannot read config file") as info:
        load_config(p)
    assert str(p) in str(info.value)


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_config(missing)
    assert str(missing) in str(info.value)


def test_unknown_override_in_build(tmp_path):
    from gpurag import Index

    with pytest.raises(ConfigError, match=r"Index\.build: unknown setting 'chunk_size'"):
        Index.build(tmp_path, tmp_path / "out", chunk_size=10)


def test_apply_overrides_returns_copy():
    base = IndexConfig()
    new = apply_overrides(base, {"chunk_tokens": "64"}, "test")
    assert new.chunk_tokens == 64 and base.chunk_tokens == IndexConfig().chunk_tokens


def test_non_numeric_env_value_is_config_error(monkeypatch):
    monkeypatch.setenv("GPURAG_INDEX_CHUNK_TOKENS", "abc")
    with pytest.raises(ConfigError, match="chunk_tokens"):
        load_config()


@pytest.mark.parametrize(("make", "message"), [
    (lambda: IndexConfig(merge_threshold=0.5),  # a setting that moved to the build profile
     "IndexConfig: merge_threshold=0.5: merge_threshold is a constant of the build profile "
     "(gpurag/profile.py BuildProfile), which cannot be changed field by field here: choose a "
     "profile by name (profile), or pass merge_threshold= explicitly in Python (to "
     "Index.build)"),
    (lambda: QueryConfig(damping=0.5),
     "QueryConfig: damping=0.5: damping is a constant of the ranking profile"),
    (lambda: IndexConfig(chunk_size=10),
     "IndexConfig: unknown setting 'chunk_size' (known: embedder, chunk_tokens, "),
    (lambda: QueryConfig(k=3, top_k=3), "QueryConfig: unknown setting 'top_k' (known: mode, k, "),
])
def test_an_unknown_keyword_of_a_config_is_a_config_error_naming_it(make, message):
    """Not Python's bare TypeError ('unexpected keyword argument'): the config file's error,
    one line, naming the setting and where it can go (or the settings there are)."""
    with pytest.raises(ConfigError) as info:
        make()
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_an_unknown_profile_constant_is_a_config_error_naming_the_known_ones():
    from gpurag.profile import BuildProfile, RankingProfile

    with pytest.raises(ConfigError, match=r"^BuildProfile: mergethreshold=0\.7: 'mergethreshold'"
                       r" is not a build profile constant \(known: acronym_merges, .*"
                       r"merge_threshold, .*; and name, version, evaluated_by\)$"):
        BuildProfile(name="loose", mergethreshold=0.7)
    with pytest.raises(ConfigError, match="'merge_threshold' is not a ranking profile constant"):
        RankingProfile(merge_threshold=0.7)
    assert BuildProfile(name="loose", merge_threshold=0.7).merge_threshold == 0.7


def test_an_unknown_flag_of_the_cli_is_an_error_line_naming_it(tmp_path, capsys):
    from gpurag.cli import main

    with pytest.raises(SystemExit) as info:  # argparse's: the usage, then the error line
        main(["index", str(tmp_path), "-o", str(tmp_path / "out"), "--merge-threshold", "0.5"])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "gpurag: error: unrecognized arguments: --merge-threshold 0.5")
