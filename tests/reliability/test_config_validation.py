"""Settings are validated where they enter: every field of IndexConfig and QueryConfig, fuzzed
through the environment, a TOML file, keywords and direct construction. A bad value is a
ConfigError naming the field and where it came from; good values (bounds included) pass."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gpurag import Index
from gpurag.config import (
    IndexConfig,
    QueryConfig,
    Rule,
    apply_overrides,
    check_environment,
    load_config,
    rules,
    threads_from_env,
)
from gpurag.errors import ConfigError


def _num(x: float, kind: type) -> str:
    return str(int(x)) if kind is int else repr(float(x))


def bad_values(rule: Rule) -> list[str]:
    """Strings that ``rule`` must refuse: one of each kind of mistake that applies."""
    if rule.kind is bool:
        return ["maybe", "2", "tru", "", "none"]
    if rule.kind is str:
        return ["no-such-choice", ""] if rule.choices else ([] if rule.optional else ["", "  "])
    if rule.kind is dict:
        return []
    bad = ["abc", "", "1e999x"]
    if rule.kind is int:
        bad += ["1.5", "0x10"]
    else:
        bad += ["nan", "inf", "-inf"]
    if rule.lo is not None:
        bad.append(_num(rule.lo - 1, rule.kind))
        if rule.open_lo:
            bad.append(_num(rule.lo, rule.kind))
    if rule.hi is not None:
        bad.append(_num(rule.hi + 1, rule.kind))
        if rule.open_hi:
            bad.append(_num(rule.hi, rule.kind))
    return bad


def good_values(rule: Rule, default) -> list[str]:
    """Strings that ``rule`` must accept: the default, and the bounds it includes."""
    if rule.kind is bool:
        return ["1", "true", "YES", "on", "0", "false", "No", "off"]
    if rule.kind is str:
        return list(rule.choices) or ([""] if rule.optional else ["x"])
    good = [str(default)]
    if rule.lo is not None and not rule.open_lo:
        good.append(_num(rule.lo, rule.kind))
    if rule.hi is not None and not rule.open_hi:
        good.append(_num(rule.hi, rule.kind))
    if rule.lo is not None and rule.open_lo:
        good.append(_num(rule.lo + (1 if rule.kind is int else 1e-6), rule.kind))
    return good


FIELDS = [(cls, prefix, f) for cls, prefix in ((IndexConfig, "GPURAG_INDEX_"),
                                               (QueryConfig, "GPURAG_QUERY_"))
          for f in dataclasses.fields(cls)]
BAD = [pytest.param(cls, prefix, f.name, value, id=f"{prefix}{f.name.upper()}={value!r}")
       for cls, prefix, f in FIELDS for value in bad_values(f.metadata["rule"])]
GOOD = [pytest.param(cls, prefix, f.name, value, id=f"{prefix}{f.name.upper()}={value!r}")
        for cls, prefix, f in FIELDS for value in good_values(f.metadata["rule"], f.default)]


def test_every_field_has_a_rule():
    for cls in (IndexConfig, QueryConfig):
        assert set(rules(cls)) == {f.name for f in dataclasses.fields(cls)}
        assert all(isinstance(r, Rule) for r in rules(cls).values())


@pytest.mark.parametrize("cls,prefix,name,value", BAD)
def test_bad_environment_value_names_variable_and_field(monkeypatch, cls, prefix, name, value):
    var = f"{prefix}{name.upper()}"
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        load_config()
    message = str(info.value)
    assert var in message and name in message and "environment" in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match=var):
        check_environment()


@pytest.mark.parametrize("cls,prefix,name,value", GOOD)
def test_good_environment_value_is_accepted(monkeypatch, cls, prefix, name, value):
    # chunk_tokens must stay above chunk_overlap (checked between the two).
    if cls is IndexConfig and name == "chunk_tokens" and int(value) <= IndexConfig.chunk_overlap:
        monkeypatch.setenv("GPURAG_INDEX_CHUNK_OVERLAP", "0")
    monkeypatch.setenv(f"{prefix}{name.upper()}", value)
    icfg, qcfg = load_config()
    got = getattr(icfg if cls is IndexConfig else qcfg, name)
    rule = rules(cls)[name]
    if rule.kind is bool:
        assert got is (value.lower() in ("1", "true", "yes", "on"))
    elif rule.kind in (int, float):
        assert got == rule.kind(float(value)) and type(got) is rule.kind
        assert math.isfinite(got)


@pytest.mark.parametrize("cls,prefix,name,value", BAD)
def test_bad_keyword_value_is_refused(cls, prefix, name, value):
    with pytest.raises(ConfigError) as info:
        apply_overrides(cls(), {name: value}, "Index.build")
    assert name in str(info.value) and "Index.build" in str(info.value)
    with pytest.raises(ConfigError, match=name):  # the API's own constructor checks too
        cls(**{name: value})


@pytest.mark.parametrize("cls,prefix,name,value", BAD)
def test_bad_toml_value_names_file_table_and_field(tmp_path, cls, prefix, name, value):
    table = "index" if cls is IndexConfig else "query"
    path = tmp_path / "gpurag.toml"
    path.write_text(f"[{table}]\n{name} = {value!r}\n".replace("'", '"'), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and f"[{table}] {name}" in message


@pytest.mark.parametrize("toml,name", [
    ("[index]\nchunk_tokens = 128.5\n", "chunk_tokens"),
    ("[index]\nchunk_tokens = true\n", "chunk_tokens"),
    ("[index]\ngraph = 1\n", "graph"),
    ("[index]\nmax_community_size = 1.5\n", "max_community_size"),
    ("[query]\ndamping = 1\n", "damping"),
    ("[query]\nk = [1, 2]\n", "k"),
    ("[query]\nextra = 3\n", "extra"),
    ("index = 5\n", "index"),
])
def test_wrongly_typed_toml_values(tmp_path, toml, name):
    path = tmp_path / "gpurag.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError, match=name) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_numbers_from_toml_keep_their_types(tmp_path):
    path = tmp_path / "gpurag.toml"
    path.write_text("[query]\nppr_tol = 1\nk = 7\n", encoding="utf-8")
    qcfg = load_config(path)[1]
    assert qcfg.ppr_tol == 1.0 and type(qcfg.ppr_tol) is float
    assert qcfg.k == 7 and type(qcfg.k) is int


def test_overlap_must_be_less_than_window():
    with pytest.raises(ConfigError, match="chunk_overlap=32 must be less than chunk_tokens=16"):
        apply_overrides(IndexConfig(), {"chunk_tokens": 16}, "command line",
                        {"chunk_tokens": "--chunk-tokens"})
    assert apply_overrides(IndexConfig(), {"chunk_tokens": 16, "chunk_overlap": 4},
                           "x").chunk_tokens == 16


def test_index_build_refuses_bad_keyword_before_any_work(tmp_path):
    src = tmp_path / "docs.txt"
    src.write_text("Some text.", encoding="utf-8")
    out = tmp_path / "out" / "index"
    with pytest.raises(ConfigError, match=r"Index\.build: chunk_tokens=-1"):
        Index.build(src, out, chunk_tokens=-1, show_progress=False)
    assert not out.parent.exists() or not any(out.parent.iterdir())


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "nan"])
def test_threads_variable_is_checked(monkeypatch, value):
    monkeypatch.setenv("GPURAG_THREADS", value)
    with pytest.raises(ConfigError, match="GPURAG_THREADS"):
        threads_from_env()
    with pytest.raises(ConfigError, match="GPURAG_THREADS"):
        check_environment()


def test_threads_variable_good_values(monkeypatch):
    assert threads_from_env() == 0
    monkeypatch.setenv("GPURAG_THREADS", " 1 ")  # (at most the cores: issue 28, item 12)
    assert threads_from_env() == 1


def test_extractor_registered_at_run_time_is_accepted(monkeypatch):
    from gpurag import extract

    monkeypatch.setitem(extract.EXTRACTORS, "custom", extract.FastExtractor)
    assert IndexConfig(extractor="custom").extractor == "custom"
    with pytest.raises(ConfigError, match="custom") as err:  # listed among the choices
        IndexConfig(extractor="bogus")
    assert "\n" not in str(err.value) and "extractor='bogus'" in str(err.value)


def test_extractor_names_are_checked_without_importing_the_extractors():
    """config asks the registry below it (gpurag.registry), not gpurag.extract: a misspelled
    extractor is one line naming the setting, and a plug-in registered there is accepted."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from gpurag import registry\n"
            "from gpurag.config import IndexConfig\n"
            "from gpurag.errors import ConfigError\n"
            "registry.EXTRACTORS['mine'] = object\n"
            "assert IndexConfig(extractor='Mine').extractor == 'mine'\n"
            "try:\n"
            "    IndexConfig(extractor='fsat')\n"
            "except ConfigError as exc:\n"
            "    print(exc)\n"
            "print('gpurag.extract' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["IndexConfig: extractor='fsat' is not valid: extractor must be one of fast, "
                   "regex, ner, spacy, spacy-ner, triples, llm, mine", "False"]
