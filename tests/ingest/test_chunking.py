"""Token windows: exact spans on synthetic offsets, then real chunks through the tokenizer."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

from gpurag.config import IndexConfig
from gpurag.ingest import chunk_id, window_spans
from gpurag.ingest.readers import Document
from gpurag.pipeline.chunk_embed import chunk_documents, embed_text


def _offsets(n: int, width: int = 3, gap: int = 1) -> np.ndarray:
    """n tokens of ``width`` chars separated by ``gap`` chars: token i spans [i*(w+g), +w)."""
    starts = np.arange(n, dtype=np.int64) * (width + gap)
    return np.stack([starts, starts + width], axis=1)


def _token_windows(spans: np.ndarray, offsets: np.ndarray) -> list[tuple[int, int]]:
    """(first token, last token) of every window, recovered from its char span."""
    first = {int(s): i for i, s in enumerate(offsets[:, 0])}
    last = {int(e): i for i, e in enumerate(offsets[:, 1])}
    return [(first[int(s)], last[int(e)]) for s, e, _ in spans]


@pytest.mark.parametrize("n,max_tokens,overlap", [
    (10, 4, 1), (10, 4, 2), (8, 4, 1), (100, 16, 4), (17, 5, 0), (256, 256, 32), (257, 256, 32),
    (1000, 256, 32), (9, 3, 2),
])
def test_window_spans_cover_overlap_and_count(n, max_tokens, overlap):
    offs = _offsets(n)
    spans = window_spans(offs, max_tokens, overlap)
    assert spans.shape[1] == 3 and spans.dtype.kind == "i"
    stride = max_tokens - overlap
    expected_k = 1 if n <= max_tokens else 1 + int(np.ceil((n - max_tokens) / stride))
    assert len(spans) == expected_k
    windows = _token_windows(spans, offs)
    assert windows[0][0] == 0
    assert windows[-1][1] == n - 1, "the last window must reach the last token"
    assert spans[-1][1] == offs[-1, 1]
    for (a0, a1), (b0, _) in itertools.pairwise(windows):
        assert b0 - a0 == stride
        assert a1 - b0 + 1 == overlap, "consecutive windows share exactly `overlap` tokens"
        assert a1 - a0 + 1 == max_tokens, "every window but the last is full"
    for (t0, t1), (_, _, count) in zip(windows, spans, strict=True):
        assert count == t1 - t0 + 1 <= max_tokens
    assert spans[:, 2].sum() == n + overlap * (len(spans) - 1)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_short_text_is_one_window(n):
    offs = _offsets(n)
    spans = window_spans(offs, 8, 3)
    assert spans.tolist() == [[0, int(offs[-1, 1]), n]]


def test_empty_offsets_give_no_window():
    spans = window_spans(np.zeros((0, 2), dtype=np.int64), 8, 2)
    assert spans.shape == (0, 3)


@pytest.mark.parametrize("max_tokens,overlap", [(0, 0), (-1, 0), (4, 4), (4, 5), (4, -1)])
def test_invalid_window_args(max_tokens, overlap):
    with pytest.raises(ValueError):
        window_spans(_offsets(10), max_tokens, overlap)


# -- chunk ids ------------------------------------------------------------------------------
def test_chunk_id_whitespace_insensitive_and_content_sensitive():
    a = chunk_id("The  river\nfreezes \t in winter.")
    assert a == chunk_id("The river freezes in winter.")
    assert a == chunk_id("  The river freezes in winter.  \n")
    assert a != chunk_id("The river freezes in summer.")
    assert a != chunk_id("Theriver freezes in winter.")
    assert len(a) == 16 and int(a, 16) >= 0


def test_chunk_id_stable_across_processes():
    text = "A stable id for the same words, in any process."
    code = ("from gpurag.ingest import chunk_id; "
            f"print(chunk_id({text!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "12345", "PATH": ""})
    assert out.stdout.strip() == chunk_id(text)


# -- real chunking through the embedder's tokenizer ------------------------------------------
@pytest.fixture(scope="module")
def long_doc(sample_records) -> Document:
    text = "\n\n".join(r["text"] for r in sample_records[:20])
    text += "\nCafé naïve Ångström 東京 😀 — end."
    return Document("long", "A long title", text, "memory")


@pytest.mark.parametrize("chunk_tokens,overlap", [(64, 16), (100, 0), (50, 49)])
def test_real_chunks_are_exact_slices_with_overlap(embedder, long_doc, chunk_tokens, overlap):
    cfg = IndexConfig(chunk_tokens=chunk_tokens, chunk_overlap=overlap)
    chunks, dups = chunk_documents([long_doc], embedder, cfg, set())
    assert dups == 0
    offsets = embedder.token_offsets(long_doc.text)
    n_tokens = len(offsets)
    assert n_tokens > 3 * chunk_tokens, "the test text must need several windows"
    assert len(chunks) == 1 + int(np.ceil((n_tokens - chunk_tokens) / (chunk_tokens - overlap)))
    assert (chunks["doc_id"] == "long").all() and (chunks["title"] == "A long title").all()
    first_tok = {int(s): i for i, s in enumerate(offsets[:, 0])}
    last_tok = {int(e): i for i, e in enumerate(offsets[:, 1])}
    prev = None
    for row in chunks.itertuples():
        assert row.text == long_doc.text[row.char_start:row.char_end]
        assert row.chunk_id == chunk_id(row.text)
        assert 0 < row.n_tokens <= chunk_tokens
        t0, t1 = first_tok[row.char_start], last_tok[row.char_end]
        assert t1 - t0 + 1 == row.n_tokens
        if prev is not None:
            prev_t1, prev_end = prev
            assert prev_t1 - t0 + 1 == overlap, "consecutive chunks share `overlap` tokens"
            if overlap:
                assert row.char_start < prev_end, "overlapping chunks overlap in characters"
        prev = (t1, row.char_end)
    assert chunks["char_start"].iloc[0] == offsets[0, 0]
    assert chunks["char_end"].iloc[-1] == offsets[-1, 1] == len(long_doc.text.rstrip())


def test_chunk_ids_deterministic_across_runs(embedder, long_doc):
    cfg = IndexConfig(chunk_tokens=64, chunk_overlap=16)
    a, _ = chunk_documents([long_doc], embedder, cfg, set())
    b, _ = chunk_documents([long_doc], embedder, cfg, set())
    assert a["chunk_id"].tolist() == b["chunk_id"].tolist()
    assert a["chunk_id"].is_unique


def test_duplicate_chunks_dropped_within_batch(embedder):
    same = "Identical text in two documents about the harbour freezing in winter."
    docs = [Document("a", "A", same, "m"), Document("b", "B", same, "m"),
            Document("c", "C", "Something else entirely.", "m")]
    seen: set[str] = set()
    chunks, dups = chunk_documents(docs, embedder, IndexConfig(), seen)
    assert dups == 1
    assert chunks["doc_id"].tolist() == ["a", "c"]
    assert seen == set(chunks["chunk_id"])
    again, dups2 = chunk_documents(docs[:1], embedder, IndexConfig(), seen)
    assert len(again) == 0 and dups2 == 1


def test_duplicate_chunks_stored_once_in_index(tmp_path, sample_records):
    from gpurag import Index
    from tests.conftest import write_jsonl

    src = tmp_path / "src"
    base = sample_records[:3]
    write_jsonl(src / "one.jsonl", base)
    # The same texts again (spacing changed) under other ids, in another file.
    write_jsonl(src / "two.jsonl", [
        {"id": r["id"] + "-copy", "title": r["title"], "text": "  " + r["text"].replace(" ", "  ")}
        for r in base[:2]
    ])
    index = Index.build(src, tmp_path / "out", graph=False, show_progress=False)
    assert index.manifest.counts["documents"] == 5
    assert index.manifest.counts["chunks"] == len(index.chunks) == 3
    assert set(index.chunks["doc_id"]) == {r["id"] for r in base}
    assert index.manifest.extra["ingest"]["skipped"]["duplicate chunks"] == 2
    assert index.passage_index.ntotal == 3


def test_full_size_chunk_is_embedded_whole(embedder, long_doc):
    cfg = IndexConfig()
    doc = Document("long", long_doc.title, long_doc.text * 3, "m")
    chunks, _ = chunk_documents([doc], embedder, cfg, set())
    full = chunks[chunks["n_tokens"] == cfg.chunk_tokens]
    assert len(full) > 0
    row = full.iloc[0]
    needed = embedder.count_tokens([embed_text(row["title"], row["text"])])[0] + 2
    assert needed <= embedder.max_tokens
