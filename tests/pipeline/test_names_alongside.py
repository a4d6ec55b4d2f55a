"""The names' index is built on a thread while the facts embed (graph_stage.names_alongside):
the same index, the two really overlap, and an error of the names' write fails the build
with nothing committed."""

from __future__ import annotations

import threading

import pytest

import gpurag.pipeline.graph_stage as graph_stage
from gpurag import Index
from tests.pipeline.test_ahead import WAIT_S, like_reference  # noqa: F401 - fixture
from tests.pipeline.test_build import BoomError
from tests.pipeline.test_extract_ahead import (  # noqa: F401 - fixtures
    OPTS,
    corpus,
    files,
    reference,
)


def test_names_are_indexed_while_the_facts_embed(tmp_path, monkeypatch, reference,  # noqa: F811
                                                 corpus, like_reference):  # noqa: F811
    monkeypatch.setattr(graph_stage, "NAMES_ALONGSIDE_MIN_CORES", 1)  # on any machine
    facts_running, facts_done = threading.Event(), threading.Event()
    overlapped: list[bool] = []
    real_names, real_facts = graph_stage.write_names, graph_stage.embed_facts

    def write_names(*args):  # run one after the other, the facts are not embedding now
        overlapped.append(facts_running.wait(WAIT_S) and not facts_done.is_set())
        return real_names(*args)

    def embed_facts(*args):
        facts_running.set()
        try:
            return real_facts(*args)
        finally:
            facts_done.set()

    monkeypatch.setattr(graph_stage, "write_names", write_names)
    monkeypatch.setattr(graph_stage, "embed_facts", embed_facts)
    out = tmp_path / "names" / "index"
    Index.build(corpus, out, **OPTS).close()
    assert overlapped == [True]
    assert files(out) == files(reference)


def test_an_error_writing_the_names_fails_the_build(tmp_path, monkeypatch, corpus,  # noqa: F811
                                                    like_reference):  # noqa: F811
    def write_names(*args):
        raise BoomError("names index")

    monkeypatch.setattr(graph_stage, "NAMES_ALONGSIDE_MIN_CORES", 1)
    monkeypatch.setattr(graph_stage, "write_names", write_names)
    out = tmp_path / "broken" / "index"
    with pytest.raises(BoomError, match="names index"):
        Index.build(corpus, out, **OPTS)
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize(("setting", "value"), [("NAMES_ALONGSIDE_BYTES", 0),
                                               ("NAMES_ALONGSIDE_MIN_CORES", 10**6)])
def test_large_name_vectors_or_few_cores_write_names_before_the_facts_embed(
        tmp_path, monkeypatch, reference, corpus, like_reference, setting, value):  # noqa: F811
    order: list[str] = []
    real_names, real_facts = graph_stage.write_names, graph_stage.embed_facts
    monkeypatch.setattr(graph_stage, "NAMES_ALONGSIDE_MIN_CORES", 1)
    monkeypatch.setattr(graph_stage, setting, value)
    monkeypatch.setattr(graph_stage, "write_names",
                        lambda *a: (real_names(*a), order.append("names"))[0])
    monkeypatch.setattr(graph_stage, "embed_facts",
                        lambda *a: (order.append("facts"), real_facts(*a))[1])
    out = tmp_path / "sequential" / "index"
    Index.build(corpus, out, **OPTS).close()
    assert order == ["names", "facts"]
    assert files(out) == files(reference)
