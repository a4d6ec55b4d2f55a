"""The walk's local-push threshold comes from the ranking profile (``push_eps``) and reaches
the PPR component; below the size rule (``AUTO_PUSH_MIN_EDGES``) the walk stays power
iteration, so no threshold changes a small graph's ranking (issue 26)."""

from __future__ import annotations

import gpurag.graph.ppr as ppr_module
from gpurag import Index
from gpurag.graph.ppr_top import host_ppr_topk
from gpurag.profile import RankingProfile
from gpurag.runtime import Runtime


class _Recorder:
    """The host PPR component, recording the ``eps`` and ``method`` it was handed."""

    implementation = "recording ppr"

    def __init__(self) -> None:
        self.calls: list[tuple[float, str]] = []

    def __call__(self, *args, **kwargs):
        self.calls.append((kwargs["eps"], kwargs["method"]))
        return host_ppr_topk(*args, **kwargs)


def _ranked(results) -> list[list[str]]:
    return [[p.chunk_id for p in r.passages] for r in results]


def _scores(results) -> list[list[float]]:
    return [[p.score for p in r.passages] for r in results]


def test_the_profiles_push_eps_reaches_the_walk(graph_index_path, questions, monkeypatch):
    rec = _Recorder()
    index = Index.open(graph_index_path, runtime=Runtime(device="cpu", ppr=rec))
    qs = questions[:4]
    index.query_batch(qs, k=5, evidence=False)
    assert rec.calls[-1] == (RankingProfile().push_eps, "auto")
    index.query_batch(qs, k=5, evidence=False, push_eps=0.25)
    assert rec.calls[-1] == (0.25, "auto")
    # a small graph: power iteration whatever the threshold (the default ranks unchanged)
    assert index.retriever.graph.n_edges < ppr_module.AUTO_PUSH_MIN_EDGES
    power = index.query_batch(qs, k=5, evidence=False, ppr_method="power")
    coarse = index.query_batch(qs, k=5, evidence=False, push_eps=0.25)
    assert _ranked(coarse) == _ranked(power) and _scores(coarse) == _scores(power)
    # past the size rule the walk pushes, with the profile's threshold
    monkeypatch.setattr(ppr_module, "AUTO_PUSH_MIN_EDGES", 0)
    fine = index.query_batch(qs, k=5, evidence=False)
    assert _scores(fine) == _scores(index.query_batch(qs, k=5, evidence=False,
                                                      ppr_method="push"))
    assert _scores(index.query_batch(qs, k=5, evidence=False, push_eps=0.25)) != _scores(fine)
