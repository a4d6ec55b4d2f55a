"""GPURAG_EMBED_CACHE: a rebuild embeds nothing it has embedded before, with equal vectors."""

from __future__ import annotations

import numpy as np

from gpurag.backends.embed import load_embedder
from gpurag.embed.cache import CachedEmbedder


def test_cached_vectors_equal_fresh_ones_and_are_not_recomputed(tmp_path, monkeypatch):
    inner = load_embedder()
    cache = CachedEmbedder(inner, tmp_path / "cache")
    texts = ["the river Sedge", "Kestrel Dynamics", "the river Sedge", "Zoë Ødegård"]
    first = cache.encode(texts)
    np.testing.assert_allclose(first, inner.encode(texts), atol=1e-6)

    calls: list[int] = []
    real = inner.encode
    monkeypatch.setattr(inner, "encode", lambda t, batch_size=64: calls.append(len(t))
                        or real(t, batch_size))
    again = CachedEmbedder(inner, tmp_path / "cache")  # a new process would reopen the file
    second = again.encode([*texts, "a new text"])
    assert calls == [1]
    np.testing.assert_array_equal(second[:4], first)


def test_index_rebuild_with_cache_only_embeds_new_texts(tmp_path, monkeypatch):
    import json

    from gpurag import Index

    monkeypatch.setenv("GPURAG_EMBED_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "title": f"Harbour {i}",
                                          "text": f"Harbour {i} was built by Ada Quill{i}."})
                              + "\n" for i in range(5)), encoding="utf-8")
    a = Index.build(corpus, tmp_path / "a", show_progress=False)
    inner = load_embedder()
    calls: list[int] = []
    real = inner.encode
    monkeypatch.setattr(inner, "encode", lambda t, batch_size=64: calls.append(len(t))
                        or real(t, batch_size))
    b = Index.build(corpus, tmp_path / "b", show_progress=False)
    assert sum(calls) == 0
    np.testing.assert_array_equal(a.passage_vectors(),
                                  b.passage_vectors())
