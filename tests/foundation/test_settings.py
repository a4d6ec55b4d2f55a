"""The environment is read in one place (issue 25, deliver 2): ``gpurag/settings.py`` is the only
module of the package that touches ``os.environ``; every ``GPURAG_*`` variable is declared and
checked there; precedence is defaults < config file < environment < explicit."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpurag import settings
from gpurag.config import apply_overrides, check_environment, load_config
from gpurag.errors import ConfigError

PACKAGE = Path(__file__).resolve().parents[2] / "gpurag"
ALLOWED = {"gpurag/settings.py"}  # at most two modules may touch the environment
ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def _touches_env(node: ast.AST) -> bool:
    """``os.environ`` (``os.getenv``, ``os.putenv``...) or ``from os import environ``."""
    if isinstance(node, ast.Attribute):
        return (node.attr in ENV_NAMES and isinstance(node.value, ast.Name)
                and node.value.id == "os")
    if isinstance(node, ast.ImportFrom):
        return node.module == "os" and any(a.name in ENV_NAMES for a in node.names)
    return False


def _env_users(package: Path = PACKAGE) -> dict[str, list[int]]:
    """Modules of gpurag/ that touch the environment: ``os.environ``/``os.getenv``/... or
    those names imported from ``os``, with the lines."""
    out: dict[str, list[int]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        lines = [node.lineno for node in ast.walk(tree) if _touches_env(node)]
        if lines:
            out[str(path.relative_to(package.parent))] = lines
    return out


def test_only_the_settings_module_touches_the_environment():
    users = _env_users()
    assert len(users) <= 2 and set(users) <= ALLOWED, (
        f"os.environ read or written outside gpurag/settings.py: {users}")
    assert "gpurag/settings.py" in users  # the scan sees what it looks for


def test_the_scan_catches_each_spelling(tmp_path):
    pkg = tmp_path / "gpurag"
    pkg.mkdir()
    (pkg / "a.py").write_text("import os\nx = os.environ.get('A')\n")
    (pkg / "b.py").write_text("from os import getenv\n")
    (pkg / "c.py").write_text("import os\nos.putenv('A', '1')\n")
    (pkg / "d.py").write_text("import os\npath = os.path.join('a', 'b')\n")
    assert set(_env_users(pkg)) == {"gpurag/a.py", "gpurag/b.py", "gpurag/c.py"}


@pytest.mark.parametrize("name", ["GPURAG_THREDS", "GPURAG_PROGRES", "GPURAG_DEVICES"])
def test_an_unknown_variable_is_an_error_naming_it(name):
    with pytest.raises(ConfigError, match=name):
        settings.read({name: "1"})
    with pytest.raises(ConfigError, match=name):
        check_environment({name: "1"})


@pytest.mark.parametrize("name", ["GPURAG_QUERY_KK", "GPURAG_INDEX_CHUNK_TOKEN",
                                  "GPURAG_LLM_URLS"])
def test_an_unknown_field_variable_is_an_error_naming_it(name):
    with pytest.raises(ConfigError, match=name):
        check_environment({name: "3"})


def test_tooling_variables_of_tests_and_scripts_are_allowed():
    env = {"GPURAG_TEST_LLM": "0", "GPURAG_BENCH_TREE": "/x", "GPURAG_SHARED_DATA": "/d",
           "HOME": "/h"}
    assert settings.read(env) == settings.Settings()
    check_environment(env)


def test_every_variable_is_typed_and_a_bad_value_names_it():
    s = settings.read({"GPURAG_THREADS": "2", "GPURAG_PROGRESS": "0",
                       "GPURAG_PROGRESS_INTERVAL": "2.5", "GPURAG_EXTRACT_WORKERS": "3",
                       "GPURAG_DEVICE": "cpu", "GPURAG_QUERY_K": "4", "GPURAG_LLM_URL": "h"})
    assert (s.threads, s.progress, s.progress_interval, s.extract_workers, s.device) == (
        2, False, 2.5, 3, "cpu")
    assert s.query == {"k": "4"} and s.llm == {"url": "h"}
    for name, bad in [("GPURAG_PROGRESS_INTERVAL", "soon"), ("GPURAG_EXTRACT_WORKERS", "-1"),
                      ("GPURAG_PROGRESS", "maybe"), ("GPURAG_THREADS", "two")]:
        with pytest.raises(ConfigError, match=f"{name}='{bad}'"):
            settings.read({name: bad})


def test_current_is_parsed_once_and_again_after_a_change(monkeypatch):
    monkeypatch.setenv("GPURAG_THREADS", "1")
    first = settings.current()
    assert settings.current() is first and first.threads == 1
    monkeypatch.setenv("GPURAG_THREADS", "2")
    assert settings.current().threads == 2


def test_one_reader_of_an_environ_else_the_process(monkeypatch):
    """``read(environ)``, and with None the process's parsed once: no module writes its own
    ``current() if environ is None else read(environ)``."""
    from gpurag.llm.config import LLMConfig
    from gpurag.runtime import read_settings

    monkeypatch.setenv("GPURAG_THREADS", "1")
    monkeypatch.setenv("GPURAG_LLM_MODEL", "m")
    assert read_settings is settings.read and settings.read() is settings.current()
    assert settings.read({"GPURAG_THREADS": "2"}).threads == 2
    assert LLMConfig.from_env().model == "m" and LLMConfig.from_env({}).model != "m"
    assert load_config(environ={"GPURAG_INDEX_SEED": "7"})[0].seed == 7
    copies = [str(f.relative_to(PACKAGE.parent)) for f in PACKAGE.rglob("*.py")
              if "current() if" in f.read_text(encoding="utf-8")]
    assert copies == []


def test_one_cache_root_for_llm_answers_and_model_weights(monkeypatch, tmp_path):
    from gpurag.embed.onnx_weights import default_cache_root
    from gpurag.llm.config import default_cache_dir

    monkeypatch.delenv("GPURAG_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == str(tmp_path / "xdg" / "gpurag" / "llm")
    assert default_cache_root() == tmp_path / "xdg" / "gpurag" / "models"
    monkeypatch.setenv("GPURAG_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == str(tmp_path / "c" / "llm")
    assert default_cache_root() == tmp_path / "c" / "models"


def test_precedence_defaults_file_environment_explicit(tmp_path):
    p = tmp_path / "gpurag.toml"
    p.write_text("[index]\nchunk_tokens = 128\nmax_community_size = 32\n"
                 "[query]\nk = 7\nrerank_candidates = 40\n", encoding="utf-8")
    env = {"GPURAG_CONFIG": str(p), "GPURAG_INDEX_CHUNK_TOKENS": "64", "GPURAG_QUERY_K": "3"}
    icfg, qcfg = load_config(environ=env)
    assert icfg.max_community_size == 32 and qcfg.rerank_candidates == 40  # file over default
    assert icfg.chunk_tokens == 64 and qcfg.k == 3  # environment over file
    assert icfg.embedder == "minilm"  # default where nobody says
    # explicit (Index.build(**overrides), Index.query(k=...)) over the environment
    assert apply_overrides(icfg, {"chunk_tokens": 100}, "Index.build").chunk_tokens == 100
    assert apply_overrides(qcfg, {"k": 9}, "query").k == 9


def test_export_and_child_environment_go_through_settings(monkeypatch, tmp_path):
    monkeypatch.delenv("GPURAG_CONFIG", raising=False)
    with pytest.raises(ConfigError, match="GPURAG_CONFG"):
        settings.export("GPURAG_CONFG", "x")
    p = tmp_path / "c.toml"
    p.write_text("[query]\nk = 6\n", encoding="utf-8")
    monkeypatch.setenv("GPURAG_CONFIG", "")  # so monkeypatch restores it after the export
    settings.export("GPURAG_CONFIG", str(p))
    assert settings.current().config_file == str(p) and load_config()[1].k == 6
    child = settings.child_environ({"VLLM_API_KEY": "k"})
    assert child["VLLM_API_KEY"] == "k" and child["GPURAG_CONFIG"] == str(p)


def test_a_child_can_start_without_the_library_defaults_gpurag_set(monkeypatch):
    """library_default records what it set, so a benchmark's baseline child starts from the
    user's environment; a value the user sets afterwards is theirs and is passed on."""
    monkeypatch.delenv("GPURAG_TEST_LIBRARY_VAR", raising=False)
    monkeypatch.setitem(settings._SET_BY_DEFAULT, "GPURAG_TEST_LIBRARY_VAR", "PASSIVE")
    monkeypatch.setenv("GPURAG_TEST_LIBRARY_VAR", "PASSIVE")  # as library_default left it
    assert "GPURAG_TEST_LIBRARY_VAR" not in settings.without_library_defaults()
    monkeypatch.setenv("GPURAG_TEST_LIBRARY_VAR", "ACTIVE")  # the user's own choice
    assert settings.without_library_defaults()["GPURAG_TEST_LIBRARY_VAR"] == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delitem(settings._SET_BY_DEFAULT, "OMP_WAIT_POLICY", raising=False)
    assert settings.library_default("OMP_WAIT_POLICY", "PASSIVE") == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in settings.without_library_defaults()
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert settings.library_default("OMP_WAIT_POLICY", "PASSIVE") == "ACTIVE"


def test_the_readme_lists_every_variable():
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    for var in settings.VARIABLES:
        assert f"| `{var.name}` | {var.doc} |" in readme, f"README: {var.name} row"
