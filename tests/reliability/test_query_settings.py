"""Query settings from the environment and the config file are honoured by ``gpurag query``
and ``Index.query``, not only by the service; a misspelled TOML table is an error (issue 28,
item 22)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpurag import Index
from gpurag.cli import main
from gpurag.config import load_config
from gpurag.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample" / "corpus.jsonl"
QUESTION = "Who founded Kestrel Dynamics?"


@pytest.fixture(scope="module")
def dense_index(sample_index_path) -> Path:
    return sample_index_path  # the session's dense sample index (tests/conftest.py)


def _cli_count(capsys, *argv: str) -> list[int]:
    assert main(["query", *argv, "--json"]) == 0
    return [len(r["passages"]) for r in json.loads(capsys.readouterr().out)]


def test_env_k_is_the_python_api_default(dense_index, monkeypatch):
    monkeypatch.setenv("GPURAG_QUERY_K", "2")
    with Index.open(dense_index) as index:
        assert len(index.query(QUESTION, mode="dense").passages) == 2
        assert len(index.query(QUESTION, k=4, mode="dense").passages) == 4


def test_env_and_file_k_are_the_cli_default(dense_index, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("GPURAG_QUERY_K", "3")
    assert _cli_count(capsys, str(dense_index), QUESTION, "--mode", "dense") == [3]
    assert _cli_count(capsys, str(dense_index), QUESTION, "--mode", "dense", "-k", "1") == [1]
    monkeypatch.delenv("GPURAG_QUERY_K")
    config = tmp_path / "gpurag.toml"
    config.write_text("[query]\nk = 2\n")
    monkeypatch.setenv("GPURAG_CONFIG", str(config))
    assert _cli_count(capsys, str(dense_index), QUESTION, "--mode", "dense") == [2]


def test_k_must_be_a_whole_number(dense_index):
    with Index.open(dense_index) as index, pytest.raises(ConfigError, match="whole number"):
        index.query(QUESTION, k=True, mode="dense")


@pytest.mark.parametrize("text", ["[indx]\nchunk_tokens = 128\n", "[query]\nk = 2\n[qeury]\n",
                                  "k = 3\n"])
def test_a_misspelled_table_is_an_error(tmp_path, text):
    config = tmp_path / "gpurag.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=r"unknown table") as err:
        load_config(config)
    assert str(config) in str(err.value)
