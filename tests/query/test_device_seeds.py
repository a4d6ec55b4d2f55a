"""Seed and dense searches at query time go through one searcher per opened index: host FAISS
on the CPU (results unchanged), the device searcher on cuda; the device path, run on CPU
torch, gives the same retrieval."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpurag import Index
from gpurag.backends.searcher import searcher_for_index
from gpurag.vectors import search
from gpurag.vectors.grouped import GroupedIndex
from gpurag.vectors.searcher import TorchSearcher

torch = pytest.importorskip("torch")


def _fresh(index):
    """The same opened index with its query-time searchers forgotten."""
    index.__dict__.pop("passage_search", None)
    index.retriever.__dict__.pop("_searchers", None)
    return index


def test_cpu_queries_search_the_faiss_indexes_themselves(graph_index, questions):
    index = _fresh(graph_index)
    qvecs = index.embedder.encode(questions[:8])
    r = index.retriever
    assert index.passage_search is index.passage_index
    for which in ("entity", "fact"):
        want = search(getattr(r, f"{which}_index"), qvecs, 7)
        got = r.search(which, qvecs, 7)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
        assert r._searchers[which][1] is getattr(r, f"{which}_index")


@pytest.mark.parametrize("mode", ["graph", "dense"])
def test_device_searchers_on_cpu_torch_give_the_same_retrieval(graph_index, questions,
                                                               mode):
    index = _fresh(graph_index)
    want = index.query_batch(questions, k=5, mode=mode)
    made = []

    def on_torch(idx):  # the runtime's searcher part, replaced by the torch one
        if isinstance(idx, GroupedIndex):  # the entity index: names on the device searcher
            return idx.searched_by(on_torch)
        made.append(idx)
        return searcher_for_index(idx, "cpu", backend="torch", dtype=torch.float32)

    index = Index.open(graph_index.path,
                       runtime=dataclasses.replace(graph_index.runtime, searcher=on_torch))
    got = index.query_batch(questions, k=5, mode=mode)
    got_again = index.query_batch(questions[:3], k=5, mode=mode)
    # the same confidence up to float32 rounding (torch and FAISS sum in another order)
    assert got[0].confidence == pytest.approx(want[0].confidence, abs=1e-6)
    # one searcher per opened index: passages, and in graph mode entities and facts (the
    # confidence reads only passage cosines and BM25)
    assert len(made) == (3 if mode == "graph" else 1)
    assert isinstance(index.passage_search, TorchSearcher)
    if mode == "graph":
        held = [s[1] for s in index.retriever._searchers.values()]
        assert held and all(isinstance(getattr(s, "index", s), TorchSearcher) for s in held)
    for a, b in zip(got, want, strict=True):
        assert [p.chunk_id for p in a.passages] == [p.chunk_id for p in b.passages]
        np.testing.assert_allclose([p.score for p in a.passages],
                                   [p.score for p in b.passages], atol=1e-4)
        assert [s.entity_id for s in a.seeds] == [s.entity_id for s in b.seeds]
    assert [p.chunk_id for p in got_again[0].passages] == [p.chunk_id for p in want[0].passages]


def _cuda() -> bool:
    return bool(torch.cuda.is_available())


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_cuda_runtime_searches_on_the_device(graph_index, questions):
    from gpurag import Index
    from gpurag.runtime import Runtime

    host = graph_index.query_batch(questions, k=5, mode="graph")
    dev_index = Index.open(graph_index.path, runtime=Runtime.create(device="cuda"))
    got = dev_index.query_batch(questions, k=5, mode="graph")
    assert not isinstance(dev_index.passage_search, type(graph_index.passage_index))
    for which in ("entity", "fact"):
        held = dev_index.retriever._searchers.get(which)
        assert held is None or held[1] is not held[0]  # a device searcher, not host FAISS
    same = np.mean([[p.chunk_id for p in a.passages][:3] == [p.chunk_id for p in b.passages][:3]
                    for a, b in zip(got, host, strict=True)])
    assert same >= 0.9
