"""Tokenize once: the chunker's token ids give exactly the model inputs (hence the embeddings)
the text path tokenizes afresh, and the same chunks; windows starting inside a word, long
titles (truncation), empty titles, accents and Markdown documents included."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpurag.backends.embed import load_embedder
from gpurag.config import IndexConfig
from gpurag.ingest.chunker import window_spans
from gpurag.ingest.parts import DocPart
from gpurag.ingest.readers import Document
from gpurag.pipeline.chunk_embed import chunk_batch, embed_texts
from gpurag.pipeline.chunk_tokens import batch_windows, concat_ranges, tokenizes_once

REPO = Path(__file__).resolve().parents[2]
WIKI = REPO.parent / "shared" / "data" / "enwiki_passages" / "passages.jsonl.gz"


class TextOnly:
    """The embedder without its token-id path (as a wrapper such as the embedding cache)."""

    def __init__(self, inner):
        self.inner = inner
        self.max_tokens, self.dim = inner.max_tokens, inner.dim

    def token_offsets_batch(self, texts):
        return self.inner.token_offsets_batch(texts)


@pytest.fixture(scope="module")
def embedder():
    return load_embedder("onnx-minilm")


def sample_docs() -> list[Document]:
    lines = (REPO / "examples" / "sample" / "corpus.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines if x.strip()]
    docs = [Document(str(r["id"]), r.get("title", ""), r["text"], "sample") for r in rows]
    if WIKI.is_file():
        with gzip.open(WIKI, "rt", encoding="utf-8") as fh:
            for line in itertools.islice(fh, 300):
                r = json.loads(line)
                docs.append(Document(r["id"], r["title"], r["text"], "wiki"))
    return docs


def tricky_docs() -> list[DocPart]:
    long_words = " ".join(["unbelievably incomprehensibilities Zürich naïve Ångström"] * 40)
    return [
        DocPart("a", "Unquestionably", long_words, "x"),
        DocPart("b", "", "Pseudopseudohypoparathyroidism " * 60, "x", offset=7, last=False),
        DocPart("c", "A title " * 300, "Short text after a very long title.", "x"),
        DocPart("d", "Notes", "# Heading\n\nSome *emphasis* and `code` here. " * 30, "x",
                markup="markdown"),
        DocPart("e", "Empty", "", "x"),
        DocPart("f", "东京 Tokyo", "東京都は日本の首都です。 Tokyo is the capital. " * 20, "x"),
    ]


@pytest.mark.parametrize("tokens,overlap", [(256, 32), (24, 5), (7, 3)])
def test_token_ids_are_the_text_paths_model_inputs(embedder, tokens, overlap):
    assert tokenizes_once(embedder) and not tokenizes_once(TextOnly(embedder))
    cfg = IndexConfig(chunk_tokens=tokens, chunk_overlap=overlap)
    docs = [*sample_docs(), *tricky_docs()]
    chunks, dups, inputs = chunk_batch(docs, embedder, cfg, set())
    assert inputs is not None
    flat, lengths = embedder.model_inputs(embed_texts(chunks, docs))
    assert np.array_equal(inputs[1], lengths)
    assert np.array_equal(inputs[0], flat)
    # the same chunks as the text path's chunker (offsets only), duplicates included
    old, old_dups, none = chunk_batch(docs, TextOnly(embedder), cfg, set())
    assert none is None and old_dups == dups
    pd.testing.assert_frame_equal(chunks, old)


def test_windows_match_window_spans_per_text(embedder):
    docs = tricky_docs()
    per_doc = embedder.token_offsets_batch([d.text for d in docs])
    counts = np.array([len(o) for o in per_doc])
    win = batch_windows(counts, 9, 4)
    flat = np.concatenate(per_doc)
    got = np.stack([flat[win.start, 0], flat[win.stop - 1, 1], win.stop - win.start], axis=1)
    want = np.concatenate([window_spans(o, 9, 4) for o in per_doc])
    assert np.array_equal(got, want)
    assert np.array_equal(concat_ranges(np.array([5, 0, 9]), np.array([2, 0, 3])),
                          np.array([5, 6, 9, 10, 11]))
    with pytest.raises(ValueError):
        batch_windows(counts, 4, 4)


def test_duplicates_against_seen_and_within_the_batch(embedder):
    doc = Document("d1", "T", "Same words here.", "x")
    twin = Document("d2", "T", "Same   words here.", "x")  # the same chunk id
    seen: set[str] = set()
    chunks, dups, _ = chunk_batch([doc, twin], embedder, IndexConfig(), seen)
    assert list(chunks["doc_id"]) == ["d1"] and dups == 1 and len(seen) == 1
    again, dups2, inputs = chunk_batch([twin], embedder, IndexConfig(), seen)
    assert len(again) == 0 and dups2 == 1 and len(inputs[1]) == 0


def test_the_embedding_cache_takes_the_token_ids_and_keys_by_text(embedder, tmp_path):
    from gpurag.embed.cache import CachedEmbedder

    cached = CachedEmbedder(embedder, tmp_path / "cache")
    assert tokenizes_once(cached)
    docs = tricky_docs()
    chunks, _, inputs = chunk_batch(docs, cached, IndexConfig(chunk_tokens=24, chunk_overlap=5),
                                    set())
    texts = embed_texts(chunks, docs)
    got = cached.encode_inputs_for(texts, *inputs)
    assert cached.misses == len(texts) and cached.hits == 0
    assert np.array_equal(got, embedder.encode(texts))
    again = cached.encode(texts)  # all from the cache, keyed by the same texts
    assert np.array_equal(again, got) and cached.hits == len(texts)
    cached.close()
