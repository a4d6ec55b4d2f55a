"""The walk's local-push threshold and size rule come from the ranking profile (``push_eps``,
``push_min_edges``, ``push_max_seeds``) and reach the PPR component; below the size rule the
walk stays power iteration, so no threshold changes a small graph's ranking (issue 26)."""

from __future__ import annotations

import gpurag.graph.ppr as ppr_module
from gpurag import Index
from gpurag.backends.part import PPR_WALK_KEYWORDS
from gpurag.graph.ppr_top import host_ppr_topk
from gpurag.profile import RankingProfile
from gpurag.runtime import Runtime


class _Recorder:
    """The host PPR component, recording the ``eps`` and ``method`` it was handed."""

    implementation = "recording ppr"

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.keywords: set[str] = set()

    def __call__(self, *args, **kwargs):
        self.keywords |= set(kwargs)
        self.calls.append((kwargs["eps"], kwargs["method"], kwargs["push_min_edges"],
                           kwargs["push_max_seeds"]))
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
    profile = RankingProfile()
    assert rec.calls[-1] == (profile.push_eps, "auto", profile.push_min_edges,
                             profile.push_max_seeds)
    index.query_batch(qs, k=5, evidence=False, push_eps=0.25, push_min_edges=7,
                      push_max_seeds=9)
    assert rec.calls[-1] == (0.25, "auto", 7, 9)
    assert rec.keywords == set(PPR_WALK_KEYWORDS)  # what a user's own part is checked for
    # a small graph: power iteration whatever the threshold (the default ranks unchanged)
    assert index.retriever.graph.n_edges < profile.push_min_edges
    power = index.query_batch(qs, k=5, evidence=False, ppr_method="power")
    coarse = index.query_batch(qs, k=5, evidence=False, push_eps=0.25)
    assert _ranked(coarse) == _ranked(power) and _scores(coarse) == _scores(power)
    # past the size rule the walk pushes, with the profile's threshold; the module's
    # default rule does not reach the query (the profile's does)
    monkeypatch.setattr(ppr_module, "AUTO_PUSH_MIN_EDGES", 0)
    assert _scores(index.query_batch(qs, k=5, evidence=False)) == _scores(power)
    monkeypatch.setattr(ppr_module, "AUTO_PUSH_MIN_EDGES", 500_000)
    fine = index.query_batch(qs, k=5, evidence=False, push_min_edges=0)
    assert _scores(fine) == _scores(index.query_batch(qs, k=5, evidence=False,
                                                      ppr_method="push"))
    assert _scores(index.query_batch(qs, k=5, evidence=False, push_eps=0.25,
                                     push_min_edges=0)) != _scores(fine)
    # a seed cap below every question's seed count: power iteration again
    assert _scores(index.query_batch(qs, k=5, evidence=False, push_min_edges=0,
                                     push_max_seeds=0)) == _scores(power)
