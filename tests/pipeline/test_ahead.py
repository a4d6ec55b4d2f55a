"""Stage 1 prepares batch i + 1 while batch i embeds (pipeline/ahead.py): the same index, the
overlap really happens, a failure while preparing is raised after the batches before it are
checkpointed, and the resumed build gives the same index."""

from __future__ import annotations

import json
import threading

import pytest

import gpurag.pipeline.chunk_embed as chunk_embed
from gpurag import Index
from gpurag.pipeline.ahead import ahead
from tests.pipeline.test_build import BoomError, _build_embedder
from tests.pipeline.test_extract_ahead import (  # noqa: F401 - fixtures
    OPTS,
    corpus,
    files,
    reference,
    small_batches,
)

WAIT_S = 60  # a guard against a deadlock, never reached when the overlap works


@pytest.fixture
def like_reference(monkeypatch) -> None:
    """The reference build's extraction settings (after stage 1, in process, batches of 4)."""
    small_batches(monkeypatch)
    monkeypatch.setenv("GPURAG_EXTRACT_WORKERS", "1")


def test_items_come_in_order_and_the_producer_runs_at_most_depth_ahead():
    made: list[int] = []
    taken: list[tuple[int, int]] = []  # (item, items made when it was taken)

    def items():
        for i in range(20):
            made.append(i)
            yield i

    with ahead(items(), depth=2) as got:
        for i in got:
            taken.append((i, len(made)))
    assert [i for i, _ in taken] == list(range(20))
    # taken item i: at most i + 1 made and consumed, 2 in the queue, 1 in the producer's hand
    assert all(n <= i + 1 + 2 + 1 for i, n in taken)


def test_an_error_of_the_producer_is_raised_where_its_item_would_come():
    def items():
        yield 1
        yield 2
        raise BoomError("bad record")

    got: list[int] = []
    with pytest.raises(BoomError, match="bad record"), ahead(items()) as it:
        got.extend(it)
    assert got == [1, 2]


def test_leaving_early_stops_and_closes_the_producer():
    closed = threading.Event()

    def items():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    with ahead(items()) as it:
        assert next(it) == 0
    assert closed.is_set()


def test_batch_two_is_chunked_while_batch_one_embeds(
        tmp_path, monkeypatch, reference, corpus, like_reference):  # noqa: F811
    emb = _build_embedder()
    real_tokens, real_ids = type(emb).encode_tokens, type(emb).token_ids_offsets
    second_chunked = threading.Event()
    chunked: list[int] = []
    overlapped: list[bool] = []

    def token_ids_offsets(self, texts):
        chunked.append(len(texts))
        if len(chunked) == 2:
            second_chunked.set()
        return real_ids(self, texts)

    def encode_tokens(self, flat, lengths, batch_size=64):
        if not overlapped:  # the first batch's embedding waits for batch 2's chunking
            overlapped.append(second_chunked.wait(WAIT_S))
        return real_tokens(self, flat, lengths, batch_size=batch_size)

    monkeypatch.setattr(type(emb), "token_ids_offsets", token_ids_offsets)
    monkeypatch.setattr(type(emb), "encode_tokens", encode_tokens)
    out = tmp_path / "overlap" / "index"
    Index.build(corpus, out, **OPTS).close()
    assert overlapped == [True]
    assert files(out) == files(reference)


def test_a_failure_while_preparing_a_batch_keeps_the_batches_before_and_resumes(
        tmp_path, monkeypatch, reference, corpus, like_reference):  # noqa: F811
    real = chunk_embed.chunk_batch
    calls: list[int] = []

    def chunk_batch(docs, embedder, cfg, seen):
        calls.append(len(docs))
        if len(calls) == 3:
            raise BoomError("unreadable batch")
        return real(docs, embedder, cfg, seen)

    out = tmp_path / "fail" / "index"
    with monkeypatch.context() as m:
        m.setattr(chunk_embed, "chunk_batch", chunk_batch)
        with pytest.raises(BoomError, match="unreadable batch"):
            Index.build(corpus, out, **OPTS)
    state = json.loads((out.parent / ".index.work" / "state.json").read_text())
    assert state["chunk_embed"]["parts"] == 2 and not state["chunk_embed"]["done"]
    Index.build(corpus, out, **OPTS).close()
    assert files(out) == files(reference)
