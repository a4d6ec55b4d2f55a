"""A user's own parts, put into the runtime (``Runtime.create(embedder=..., reranker=...)``),
are what build, query and serve run: the index is embedded by the user's embedder, the
questions too, the user's reranker orders the head of a reranked graph query, and a real HTTP
request to ``gpurag serve`` over that runtime gets the same, with ``/v1/info`` naming them."""

from __future__ import annotations

import dataclasses
import re
import zlib

import httpx
import numpy as np
import pytest

from tests.serve.conftest import SAMPLE_CORPUS, _clean_env

QUESTION = "Who designed the Corven Lighthouse?"


class HashEmbedder:
    """The user's own embedder: each word hashed (CRC-32) into one of 64 buckets, the counts
    scaled to unit length. Deterministic, no model; counts the texts it embedded."""

    name = "hash-words-64"
    implementation = "hash-words-64 (the user's own)"
    dim = 64
    max_tokens = 512

    def __init__(self) -> None:
        self.texts = 0

    @staticmethod
    def _words(text: str) -> list[re.Match]:
        return list(re.finditer(r"\w+", text))

    def token_offsets_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.array([m.span() for m in self._words(t)], np.int64).reshape(-1, 2)
                for t in texts]

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(self._words(t)) for t in texts]

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        self.texts += len(texts)
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for m in self._words(text):
                out[i, zlib.crc32(m.group().lower().encode()) % self.dim] += 1.0
            out[i, 0] += 1e-3  # a text without words still has a direction
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class HighestRowFirst:
    """The user's own reranker: a candidate's score is its passage row, so the reranked head
    comes back in descending row order. Records the candidate blocks it was given."""

    implementation = "highest-row-first (the user's own)"
    fanout = (2, 1)

    def __init__(self) -> None:
        self.calls: list[np.ndarray] = []

    def score(self, qvecs, cand, ppr_scores, dense) -> np.ndarray:
        self.calls.append(np.array(cand))
        return np.asarray(cand, np.float32)


@pytest.fixture(scope="module")
def parts_index(tmp_path_factory):
    """The sample corpus built (with its graph) on a runtime holding the user's parts."""
    from gpurag import Index
    from gpurag.runtime import Runtime

    with pytest.MonkeyPatch.context() as mp:
        _clean_env(mp)
        embedder, reranker = HashEmbedder(), HighestRowFirst()
        runtime = Runtime.create(device="cpu", embedder=embedder, reranker=reranker)
        out = tmp_path_factory.mktemp("parts") / "index"
        index = Index.build(SAMPLE_CORPUS, out, show_progress=False, runtime=runtime)
    return index, runtime, embedder, reranker


def _rows(index, result) -> list[int]:
    row = {c: i for i, c in enumerate(index.chunks["chunk_id"])}
    return [row[p.chunk_id] for p in result.passages]


def test_the_build_embeds_with_the_users_embedder(parts_index):
    index, _, embedder, _ = parts_index
    assert embedder.texts >= len(index.chunks)  # every passage (and the names and facts)
    assert index.passage_index.d == HashEmbedder.dim
    assert index.manifest.components["embed"] == HashEmbedder.implementation
    from gpurag.pipeline.chunk_embed import embed_text

    head = index.chunks.head(5)
    texts = [embed_text(t, x) for t, x in zip(head["title"], head["text"], strict=True)]
    np.testing.assert_allclose(index.passage_vectors()[:5], embedder.encode(texts), atol=1e-2)


def test_queries_embed_with_it_and_rerank_with_the_users_reranker(parts_index):
    index, _, embedder, reranker = parts_index
    assert index.embedder is embedder
    before = embedder.texts
    [dense] = index.query_batch([QUESTION], k=5, mode="dense")
    assert embedder.texts > before
    from gpurag.vectors import search

    _, ids = search(index.passage_index, embedder.encode([QUESTION]), 5)
    assert _rows(index, dense) == ids[0].tolist()

    [plain] = index.query_batch([QUESTION], k=6, mode="graph")
    assert not reranker.calls
    [ranked] = index.query_batch([QUESTION], k=6, mode="graph", rerank="gat",
                                 rerank_candidates=10)
    [head] = reranker.calls
    assert head.shape == (1, 10)
    rows, kept = _rows(index, ranked), max(1, index.query_config.plan().dense_head)
    # the user's order decided the head (the second hop keeps it and fills in the rest)
    assert rows[:kept] == sorted(head[0].tolist(), reverse=True)[:kept]
    assert rows != _rows(index, plain)


def test_replacing_one_part_keeps_the_others(parts_index):
    _, runtime, embedder, _ = parts_index
    other = HighestRowFirst()
    swapped = dataclasses.replace(runtime, reranker=other)
    assert swapped.reranker is other and swapped.embedder is embedder
    assert swapped.ppr is runtime.ppr and swapped.searcher is runtime.searcher
    assert swapped.describe()["rerank"] == other.implementation
    assert swapped.describe()["embed"] == HashEmbedder.implementation


def test_serve_runs_the_users_parts_over_http(parts_index, start_server):
    from gpurag.serve.holder import IndexHolder

    index, runtime, embedder, reranker = parts_index
    holder = IndexHolder(index.path, runtime=runtime)
    assert holder.current.index.runtime is runtime
    server = start_server(holder)
    want = holder.current.index.query_batch([QUESTION], k=6, mode="graph", rerank="gat",
                                            rerank_candidates=10)[0]
    texts, calls = embedder.texts, len(reranker.calls)
    with httpx.Client(base_url=server.url, timeout=60) as client:
        r = client.post("/v1/query", json={"question": QUESTION, "k": 6, "mode": "graph",
                                           "rerank": "gat", "rerank_candidates": 10})
        assert r.status_code == 200, r.text
        info = client.get("/v1/info").json()
    [got] = r.json()["results"]
    assert [p["chunk_id"] for p in got["passages"]] == [p.chunk_id for p in want.passages]
    assert embedder.texts > texts and len(reranker.calls) == calls + 1
    parts = info["environment"]["components"]
    assert parts["embed"] == HashEmbedder.implementation
    assert parts["rerank"] == HighestRowFirst.implementation
