"""Graph queries with the GAT reranker: the PPR component is asked for the scores around the
candidates (``local_fanout``), never the (q, n) rows, and the result equals the former path
where the reranker read the full rows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpurag.graph.ppr_local import DenseScores, LocalScores

pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("safetensors")


def _spy(given, calls: list, old_path: bool, real=None):
    """Wrap the PPR part (``real``, default the retriever's ``given`` one): record what it is
    asked; also compute the full rows, and in ``old_path`` hand the reranker those instead of
    the local scores."""
    real = real or given

    def ppr(g, reset, **kw):
        calls.append(dict(kw))
        top = real(g, reset, **{**kw, "full": True})
        full = top.full
        if old_path:
            top = dataclasses.replace(top, local=DenseScores(full))
        return dataclasses.replace(top, full=None)

    return ppr


@pytest.mark.parametrize("component", ["host", "device-on-cpu-torch"])
def test_gat_reranking_reads_local_scores_and_equals_the_full_rows(graph_index, questions,
                                                                   component):
    from gpurag.backends.ppr import make_device_ppr_topk, make_kernels_ppr
    from gpurag.rerank import get_reranker, using_reranker

    r = graph_index.retriever
    given = r.ppr
    real = (given if component == "host" else
            make_device_ppr_topk(make_kernels_ppr("cpu"), "cpu"))
    seen = []
    gat = get_reranker("gat", r)

    class Spy:  # the real reranker, recording what it was handed
        fanout = gat.fanout

        def score(self, qvecs, cand, ppr_scores, dense):
            seen.append(ppr_scores)
            return gat.score(qvecs, cand, ppr_scores, dense)

    with using_reranker(r, "spy", Spy()):
        try:
            calls_new, calls_old = [], []
            r.ppr = _spy(given, calls_new, old_path=False, real=real)
            new = graph_index.query_batch(questions, k=5, mode="graph", rerank="spy")
            r.ppr = _spy(given, calls_old, old_path=True, real=real)
            old = graph_index.query_batch(questions, k=5, mode="graph", rerank="spy")
        finally:
            r.ppr = given
    assert [c.get("full", False) for c in calls_new] == [False]  # never the (q, n) rows
    assert calls_new[0]["local_fanout"] == gat.fanout == (5, 2)
    want = DenseScores if component == "host" else LocalScores  # on the device: recorded
    assert isinstance(seen[0], want) and isinstance(seen[1], DenseScores)
    assert seen[0].n_rows == len(questions)
    for a, b in zip(new, old, strict=True):
        assert [p.chunk_id for p in a.passages] == [p.chunk_id for p in b.passages]
        np.testing.assert_array_equal([p.score for p in a.passages],
                                      [p.score for p in b.passages])
    # and the reranker did change the order somewhere (the comparison is not vacuous)
    plain = graph_index.query_batch(questions, k=5, mode="graph")
    assert any([p.chunk_id for p in a.passages] != [p.chunk_id for p in b.passages]
               for a, b in zip(new, plain, strict=True))


def test_no_reranker_asks_for_nothing_more(graph_index, questions):
    r = graph_index.retriever
    given = r.ppr
    calls: list = []
    try:
        r.ppr = _spy(given, calls, old_path=False)
        graph_index.query_batch(questions[:4], k=5, mode="graph")
    finally:
        r.ppr = given
    assert calls[0].get("local_fanout") is None and not calls[0].get("full", False)
