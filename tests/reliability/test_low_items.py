"""The low items of issue 28: no hidden work folder after a build that had nothing to keep, a
resume log that says what it does, delete's wording, and one rule for a blank question."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gpurag import Index
from gpurag.cli import main
from gpurag.config import IndexConfig
from gpurag.errors import InputError
from gpurag.pipeline import build as build_mod
from gpurag.pipeline.workdir import WorkDir
from gpurag.store import layout

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample" / "corpus.jsonl"
DENSE = IndexConfig(graph=False)


def test_a_build_with_nothing_to_keep_leaves_no_work_folder(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": "   "}) + "\n" + json.dumps({"id": "b"}))
    out = tmp_path / "index"
    with pytest.raises(InputError, match="no usable text"):
        Index.build(corpus, out, config=DENSE, show_progress=False)
    assert not layout.sibling(out, layout.WORK_SUFFIX).exists()
    assert not layout.sibling(out, layout.TMP_SUFFIX).exists()
    assert not out.exists()


@pytest.mark.usefixtures("shared_embeddings")
def test_a_failed_build_keeps_the_work_a_rerun_resumes(tmp_path, monkeypatch):
    out = tmp_path / "index"

    def fail(*args, **kwargs):
        raise RuntimeError("injected failure after chunk+embed")

    monkeypatch.setattr(build_mod, "write_dense_part", fail)
    with pytest.raises(RuntimeError, match="injected"):
        Index.build(SAMPLE, out, config=DENSE, show_progress=False)
    assert layout.sibling(out, layout.WORK_SUFFIX).is_dir()


def test_a_resume_that_keeps_nothing_says_it_starts_over(tmp_path, caplog):
    target = tmp_path / "index"
    work = WorkDir(target, {"chunk_embed": {"source": "a"}, "extract": {"x": 1}})
    work.state["chunk_embed"] = {"parts": 3, "done": True}
    work.save()
    with caplog.at_level(logging.INFO):
        WorkDir(target, {"chunk_embed": {"source": "b"}, "extract": {"x": 1}})
    assert "its no stage" not in caplog.text and "its no checkpoints" not in caplog.text
    assert "starts over: source changed, so chunk_embed is redone" in caplog.text


@pytest.fixture
def dense_index(index_copy) -> Path:
    """A private copy of the session's dense index of the sample corpus."""
    return index_copy


def test_delete_says_re_extracted(dense_index, capsys):
    assert main(["-q", "delete", str(dense_index), "--doc-ids", "p03"]) == 0
    out = capsys.readouterr().out
    assert "chunks re-extracted" in out and " chunks extracted" not in out


@pytest.mark.parametrize("question", ["", "   ", "\t\n"])
def test_a_blank_question_is_refused_like_the_service_does(tmp_path, capsys, question):
    rc = main(["query", str(tmp_path / "any-index"), question])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "the question is empty" in err and len(err.splitlines()) == 1


def test_cluster_shards_that_came_back_out_of_order_count_as_progress(tmp_path):
    """A cluster build checkpoints shards that finish ahead of the finished prefix under
    ``shards`` (``parts`` still 0): a failure then must keep them for the rerun."""
    work = WorkDir(tmp_path / "idx", "key")
    assert not work.has_progress()
    work.state["chunk_embed"] = {"parts": 0, "docs": 0, "shards": {"2": {"docs": 4}}}
    assert work.has_progress()
