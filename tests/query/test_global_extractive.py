"""Global questions without an LLM (``--mode global`` with no server configured): communities
ranked by relevance to the question, each with key entities, central passages and sentences."""

from __future__ import annotations

import contextlib
import io
import itertools
import json

import pytest

from gpurag.cli import main as gpurag_main
from gpurag.errors import ConfigError

THEMES = "What are the main themes of this corpus?"


@pytest.fixture(autouse=True)
def _no_server(monkeypatch):
    monkeypatch.delenv("GPURAG_LLM_URL", raising=False)


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = gpurag_main(["-q", *argv])
    return rc, out.getvalue(), err.getvalue()


def _doc_text(index, doc_id: str) -> dict[int, str]:
    chunks = index.chunks[index.chunks["doc_id"] == doc_id]
    return {int(s): str(t) for s, t in zip(chunks["char_start"], chunks["text"], strict=True)}


def test_cli_global_without_llm_answers_with_communities(graph_index):
    rc, out, err = _run("query", str(graph_index.path), THEMES, "--mode", "global", "--json")
    assert rc == 0, err
    [result] = json.loads(out)
    assert result["mode"] == "global" and result["error"] is None and result["answer"] is None
    comms = result["communities"]
    assert len(comms) == 5
    assert [c["rank"] for c in comms] == [1, 2, 3, 4, 5]
    assert all(a["score"] >= b["score"] for a, b in itertools.pairwise(comms))
    assert 0 < sum(c["score"] for c in comms) <= 1.0 + 1e-6
    listed = {p["chunk_id"] for p in result["passages"]}
    for c in comms:
        assert c["entities"] and c["passages"] and c["summary"]
        assert len(c["passages"]) == len(c["documents"])
    # the result's passages are the communities' central passages, in community order
    assert listed <= {p for c in comms for p in c["passages"]}
    assert result["passages"][0]["chunk_id"] == comms[0]["passages"][0]
    rc, text, _ = _run("query", str(graph_index.path), THEMES, "--mode", "global")
    assert rc == 0
    assert "communities (most relevant" in text and "C5. community" in text
    assert "entities: " + ", ".join(comms[0]["entities"]) in text


def test_summary_sentences_quote_their_passages(graph_index):
    result = graph_index.query(THEMES, mode="global", communities=3)
    for hit in result.communities:
        for s in hit.summary:
            assert s.char_start >= 0
            starts = _doc_text(graph_index, s.doc_id)
            start = max(k for k in starts if k <= s.char_start)
            chunk = starts[start]
            assert chunk[s.char_start - start:s.char_end - start] == s.text
        # at most one sentence per passage, and only from the community's own passages
        assert len({s.chunk_id for s in hit.summary}) == len(hit.summary)


def test_ranking_follows_the_question(graph_index):
    """A specific question puts the community of what it names first; a different one
    ranks differently."""
    film = graph_index.query("Who directed the film Saltwater Lanterns?", mode="global")
    assert "Saltwater Lanterns" in film.communities[0].entities or any(
        "Saltwater Lanterns" in s.text for s in film.communities[0].summary)
    band = graph_index.query("Which folk band released the album Ferrylight?", mode="global")
    assert band.communities[0].community != film.communities[0].community
    assert any("Salt Orchard" in e for e in band.communities[0].entities)


def test_batch_equals_single_questions(graph_index):
    qs = [THEMES, "Who directed the film Saltwater Lanterns?"]
    batch = graph_index.query_batch(qs, k=4, mode="global", communities=2)
    for q, got in zip(qs, batch, strict=True):
        one = graph_index.query(q, k=4, mode="global", communities=2)
        assert [h.community for h in got.communities] == [h.community for h in one.communities]
        assert got.chunk_ids == one.chunk_ids and len(got.passages) <= 4


def test_global_options_are_checked(graph_index):
    with pytest.raises(ConfigError, match="not valid with mode='global'"):
        graph_index.query(THEMES, mode="global", damping=0.5)
    with pytest.raises(ConfigError, match="no community level 7"):
        graph_index.query(THEMES, mode="global", level=7)
    with pytest.raises(ConfigError, match="communities must be at least 1"):
        graph_index.query(THEMES, mode="global", communities=0)


def test_no_server_is_never_assumed(graph_index):
    """Asking for an LLM answer with no server configured says how to set one, and that the
    extractive global mode exists; nothing is sent to a localhost default."""
    with pytest.raises(ConfigError, match=r"GPURAG_LLM_URL.*extractively"):
        graph_index.query(THEMES, mode="global", llm=True)
    for extra in (["--mode", "global", "--answer"], ["--answer"]):
        rc, _, err = _run("query", str(graph_index.path), THEMES, *extra)
        assert rc == 2
        assert "no LLM server is configured" in err and "--llm-url" in err
        assert "--mode global answers extractively" in err


def test_dense_index_has_no_communities(sample_index):
    index = sample_index  # the session's dense sample index
    with pytest.raises(ConfigError, match="no knowledge graph"):
        index.query(THEMES, mode="global")
