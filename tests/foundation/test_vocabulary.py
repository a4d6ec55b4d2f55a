"""One vocabulary across the command line and Python (issue 30, deliver 4): the bm25 mode in
query as in eval, --config on query, --help naming every command, passage previews without
Markdown markup or a repeated title."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gpurag import Index
from gpurag.query.lexical import BM25Index
from tests.foundation.test_cli import main_in_process

QUESTION = "Where is the headquarters of the company founded by the inventor of the Pellucid cell?"


@pytest.fixture(scope="module")
def dense_index(sample_index):
    return sample_index  # the session's dense sample index (tests/conftest.py)


@pytest.fixture
def gpurag(capsys):
    """``gpurag ARGS`` run through ``gpurag.cli.main`` in this process (what is checked is the
    commands' words and output; the real process: tests/foundation/test_cli.py)."""
    def run(*args):
        code, out, err = main_in_process(capsys, *args)
        return SimpleNamespace(returncode=code, stdout=out, stderr=err)

    return run


def test_bm25_mode_in_python_equals_the_eval_baseline(dense_index):
    result = dense_index.query(QUESTION, k=5, mode="bm25")
    assert result.mode == "bm25" and len(result.passages) == 5
    scores, rows = BM25Index(dense_index.chunks).search([QUESTION], 5)
    want = dense_index.chunks["chunk_id"].to_numpy()[rows[0][rows[0] >= 0]]
    assert [p.chunk_id for p in result.passages] == list(want)
    np.testing.assert_allclose([p.score for p in result.passages], scores[0][:len(want)],
                               rtol=1e-6)


def test_query_cli_takes_bm25_and_a_config_file(gpurag, dense_index, tmp_path):
    proc = gpurag("query", dense_index.path, QUESTION, "--mode", "bm25", "-k", "3")
    assert proc.returncode == 0, proc.stderr
    assert "[bm25]" in proc.stdout and proc.stdout.count("\n   3. ") + proc.stdout.count(
        "\n  3. ") == 1
    config = tmp_path / "q.toml"
    config.write_text("[query]\nk = 2\nmode = \"dense\"\n", encoding="utf-8")
    proc = gpurag("query", dense_index.path, QUESTION, "--config", config)
    assert proc.returncode == 0, proc.stderr
    assert "[dense]" in proc.stdout
    ranks = [line.split(".")[0].strip() for line in proc.stdout.splitlines()
             if line.startswith("   ") and line.strip()[:2].rstrip(".").isdigit()]
    assert ranks == ["1", "2"], proc.stdout
    config.write_text("[query]\nk = 0\n", encoding="utf-8")
    bad = gpurag("query", dense_index.path, QUESTION, "--config", config)
    assert bad.returncode == 2 and "[query] k" in bad.stderr


def test_help_names_every_registered_command():
    from gpurag.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    text = parser.format_help()
    description = parser.description
    for name in sub.choices:
        assert name in description, name
    assert "``" not in text


def test_passage_previews_have_no_markup_or_repeated_title(gpurag, tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "haymo.md").write_text(
        "# Haymo of Faversham\n\nHaymo of Faversham was an **English** Franciscan friar "
        "and [scholastic](https://example.org) theologian.\n", encoding="utf-8")
    out = tmp_path / "idx"
    assert gpurag("index", corpus, "-o", out, "--no-graph").returncode == 0
    proc = gpurag("query", out, "Who was Haymo of Faversham?", "-k", "1")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.strip().startswith("1."))
    assert "Haymo of Faversham: Haymo of Faversham was an English Franciscan friar and " \
           "scholastic theologian." in line, line
    assert "#" not in line and "**" not in line and "](" not in line
    stored = Index.open(out).chunks["text"].iloc[0]
    assert stored.startswith("# Haymo of Faversham")  # the stored text is as written


def test_eval_takes_a_config_file(gpurag, tmp_path):
    from tests.conftest import SAMPLE_DIR

    config = tmp_path / "e.toml"
    config.write_text("[index]\nchunk_tokens = 96\ngraph = false\n", encoding="utf-8")
    out = tmp_path / "idx"
    proc = gpurag("eval", SAMPLE_DIR, "--modes", "dense", "--index", out, "--config", config)
    assert proc.returncode == 0, proc.stderr
    assert Index.open(out).config.chunk_tokens == 96
    config.write_text("[indx]\nchunk_tokens = 96\n", encoding="utf-8")
    bad = gpurag("eval", SAMPLE_DIR, "--modes", "dense", "--config", config)
    assert bad.returncode == 2 and "[indx]" in bad.stderr
