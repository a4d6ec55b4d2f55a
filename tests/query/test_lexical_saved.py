"""The BM25 model is saved with a graph index and memory-mapped on open, not rebuilt from the
chunks on every opening (11 s at 148k passages on 2 cores); an index without the copy, or with
one this bm25s cannot read, still gets BM25, built in memory."""

from __future__ import annotations

import json
import shutil

import numpy as np

from gpurag import Index
from gpurag.query.lexical import BM25Index
from gpurag.store import layout
from gpurag.store import manifest as manifest_mod


def _hits(index: Index, questions: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return index.retriever.lexical.search(questions, 5)


def test_the_build_saves_bm25_and_queries_read_it(graph_index, questions):
    assert all(graph_index.dir.has(rel) for rel in layout.LEXICAL_FILES)
    assert graph_index.manifest.components["lexical"].startswith("bm25s")
    lexical = graph_index.retriever.lexical
    assert isinstance(lexical.model.scores["data"], np.memmap)  # loaded, not built
    built = BM25Index(graph_index.retriever.chunks)
    scores, rows = _hits(graph_index, questions)
    want_scores, want_rows = built.search(questions, 5)
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-6)


def test_an_index_without_the_copy_builds_bm25_in_memory(graph_index, questions, tmp_path):
    copy = tmp_path / "old"
    shutil.copytree(graph_index.path, copy)
    shutil.rmtree(copy / layout.LEXICAL_DIR)
    mpath = copy / layout.MANIFEST
    data = json.loads(mpath.read_text(encoding="utf-8"))
    for rel in layout.LEXICAL_FILES:  # as an index written before stop 13 lists its files
        data["files"].pop(rel)
    data["checksum"] = manifest_mod.seal(data)
    mpath.write_text(json.dumps(data), encoding="utf-8")
    with Index.open(copy) as old:
        assert not isinstance(old.retriever.lexical.model.scores["data"], np.memmap)
        np.testing.assert_array_equal(_hits(old, questions)[1], _hits(graph_index, questions)[1])
        assert [r.doc_ids for r in old.query_batch(questions[:3], k=5)] == \
            [r.doc_ids for r in graph_index.query_batch(questions[:3], k=5)]
