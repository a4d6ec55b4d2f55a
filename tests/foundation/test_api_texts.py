"""The Python API from texts: ``Index.build([...], out)`` and ``index.insert([...])`` take
strings or ``{"id", "text", "title"}`` records; a useful ``repr``; the embedding cache on by
default beside the index, bounded and reported by ``info``."""

from __future__ import annotations

import numpy as np
import pytest

from gpurag import Index
from gpurag.backends.embed import load_embedder
from gpurag.embed.cache import CachedEmbedder
from gpurag.errors import InputError
from gpurag.ingest.texts import text_id
from gpurag.store import layout

TEXTS = [
    "The Skerryvore lighthouse was designed by Alan Stevenson and first lit in 1844.",
    "The Bell Rock lighthouse, built by Robert Stevenson, stands on the Inchcape reef.",
    "Hynish on Tiree was the shore station of the Skerryvore keepers.",
]


@pytest.fixture(autouse=True)
def _default_cache(monkeypatch):
    monkeypatch.delenv("GPURAG_EMBED_CACHE", raising=False)


def _count_encodes(monkeypatch) -> list[int]:
    inner = load_embedder()  # the instance every build in this process shares
    calls: list[int] = []
    real = inner.encode
    monkeypatch.setattr(inner, "encode", lambda t, batch_size=64: calls.append(len(t))
                        or real(t, batch_size))
    return calls


def test_build_from_strings_and_insert_strings(tmp_path):
    index = Index.build(TEXTS, tmp_path / "idx", show_progress=False, graph=False)
    assert sorted(index.chunks["doc_id"]) == sorted(text_id(t) for t in TEXTS)
    assert index.info()["extra"]["source"] == "<texts given to Index.build>"
    assert not list(tmp_path.glob(".idx.texts-*")), "the temporary texts file is removed"
    hit = index.query("Who designed Skerryvore?", k=1, mode="dense").passages[0]
    assert hit.text == TEXTS[0] and hit.char_start == 0

    new = index.insert(["Smeaton's tower at Eddystone was rebuilt on Plymouth Hoe."],
                       show_progress=False)
    assert new.last_update.documents == [text_id(
        "Smeaton's tower at Eddystone was rebuilt on Plymouth Hoe.")]
    assert len(new.chunks) == len(TEXTS) + 1
    again = new.insert([TEXTS[1]], show_progress=False)  # the same text: the same id
    assert again.last_update.version is None
    assert again.last_update.skipped == {"already in the index": 1}


def test_build_from_records_with_ids_and_titles(tmp_path):
    records = [{"id": "sk", "title": "Skerryvore", "text": TEXTS[0]},
               {"title": "Bell Rock", "text": TEXTS[1]},
               {"id": "empty", "text": "   "}]
    index = Index.build(records, tmp_path / "idx", show_progress=False, graph=False)
    by_id = dict(zip(index.chunks["doc_id"], index.chunks["title"], strict=True))
    assert by_id == {"sk": "Skerryvore", text_id(TEXTS[1]): "Bell Rock"}
    ingest = index.info()["extra"]["ingest"]
    assert ingest["skipped"]["empty text"] == 1  # reported like a file's bad record
    new = index.insert([{"id": "hy", "text": TEXTS[2]}], show_progress=False)
    assert new.last_update.documents == ["hy"]


def test_bad_texts_are_clear_errors(tmp_path):
    with pytest.raises(InputError, match=r"texts\[1\]: expected a string or a dict"):
        Index.build(["fine", 42], tmp_path / "a", show_progress=False)
    with pytest.raises(InputError, match=r"texts\[0\]: a record needs a 'text'"):
        Index.build([{"body": "x"}], tmp_path / "b", show_progress=False)
    with pytest.raises(InputError, match="no texts given"):
        Index.build([], tmp_path / "c", show_progress=False)
    index = Index.build(TEXTS[:1], tmp_path / "d", show_progress=False, graph=False)
    with pytest.raises(InputError, match=r"input not found: new_docs/more\.jsonl"):
        index.insert(["new_docs/more.jsonl"])  # a typo'd path is not indexed as a text
    (tmp_path / "real.txt").write_text("A real file.", encoding="utf-8")
    with pytest.raises(InputError, match="either paths or texts"):
        index.insert([str(tmp_path / "real.txt"), "and a text"])
    inserted = index.insert([str(tmp_path / "real.txt")], show_progress=False)
    assert inserted.last_update.documents == ["real.txt"]  # a list of paths still works


def test_repr_names_path_counts_and_embedder(tmp_path):
    index = Index.build(TEXTS, tmp_path / "idx", show_progress=False, graph=False)
    text = repr(index)
    assert text.startswith("<gpurag.Index ") and str(index.path) in text
    assert "3 documents, 3 chunks, dense only, embedder 'minilm'" in text


def test_embedding_cache_is_on_by_default_beside_the_index(tmp_path, monkeypatch):
    out = tmp_path / "idx"
    first = Index.build(TEXTS, out, show_progress=False)
    cache = first.info()["embed_cache"]
    assert cache["path"] == str(layout.sibling(first.path, layout.EMBED_CACHE_SUFFIX))
    assert cache["vectors"] >= len(TEXTS) and cache["bytes"] > 0
    vectors = first.passage_vectors()
    first.close()
    calls = _count_encodes(monkeypatch)
    again = Index.build(TEXTS, out, show_progress=False)  # a rebuild embeds nothing
    assert sum(calls) == 0
    np.testing.assert_array_equal(again.passage_vectors(), vectors)
    from gpurag.info import format_info, index_info

    shown = format_info({"environment": {"gpurag": "x", "python": "y", "device": "cpu",
                                         "components": {}},
                         "index": index_info(str(out))})
    assert "embedding cache: " in shown and "vectors" in shown


def test_embedding_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("GPURAG_EMBED_CACHE", "off")
    index = Index.build(TEXTS, tmp_path / "idx", show_progress=False, graph=False)
    assert index.info()["embed_cache"] is None
    assert not layout.sibling(index.path, layout.EMBED_CACHE_SUFFIX).exists()


def test_embedding_cache_is_bounded_oldest_out(tmp_path):
    inner = load_embedder()
    row = 4 * inner.dim + 48
    cache = CachedEmbedder(inner, tmp_path / "c", max_bytes=3 * row)
    assert cache.max_rows == 3
    texts = [f"text number {i}" for i in range(5)]
    for t in texts:
        cache.encode([t])
    assert cache.evicted == 2
    cache.close()
    again = CachedEmbedder(inner, tmp_path / "c", max_bytes=3 * row)
    again.encode(texts[2:])  # the newest three are still there
    assert again.hits == 3 and again.misses == 0
