"""``rerank="auto"``: whether the GAT reranker pays on this corpus, decided from the index.

The GAT helps encyclopedic corpora (pages titled by the entities other pages mention) and hurts
others (chat logs). No labels are needed to tell which: :func:`decide` generates synthetic
multi-hop questions from the index's own graph (:mod:`gpurag.query.synthetic`), ranks them
with graph mode with and without the GAT, and picks the GAT only where it gains at least
``margin`` on R@5 + all-gold@8 (mean over the questions) and loses on fewer questions than it
wins. The decision is recorded in the manifest (``extra["rerank_auto"]``, an informational
field outside the seal) by :func:`record`, at build time with ``IndexConfig.rerank_decision``
or later with ``gpurag decide-rerank INDEX``; a query with ``rerank="auto"`` reads it
(:func:`resolve`), and an index without one is decided once in memory when first asked.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpurag.metrics import all_gold_per_question, gold_ranks, recall_per_question
from gpurag.store.manifest import Manifest
from gpurag.store.writer import write_extra

log = logging.getLogger(__name__)

KEY = "rerank_auto"


@dataclass(frozen=True)
class AutoProfile:
    """Constants of the decision (see docs/RECALL.md "rerank=auto"): ``questions`` synthetic
    questions (seed ``seed``), ranked to depth ``k``; the GAT is chosen when its mean gain in
    R@5 + all-gold@8 is at least ``margin`` and it wins more questions than it loses."""

    questions: int = 120
    seed: int = 0
    k: int = 8
    margin: float = 0.02


PROFILE = AutoProfile()


def _per_question(ranked: list[list[str]], gold: list[tuple[str, ...]], k: int) -> np.ndarray:
    """Per question, R@5 + all-gold@k of the ranked document ids."""
    ranks = [gold_ranks(docs, g) for docs, g in zip(ranked, gold, strict=True)]
    return recall_per_question(ranks, 5) + all_gold_per_question(ranks, k)


def decision_questions(index, profile: AutoProfile = PROFILE):
    """The synthetic questions :func:`decide` ranks (a :class:`SyntheticSet`; seeded, so the
    same for the same index and profile)."""
    from gpurag.query.synthetic import generate

    return generate(index, profile.questions, seed=profile.seed)


def depth(profile: AutoProfile = PROFILE) -> int:
    """How deep the decision ranks: R@5 and all-gold@k read ``max(k, 5)`` documents."""
    return max(profile.k, 5)


def ranked(index, syn, profile: AutoProfile = PROFILE, rerank: str = "none",
           candidates: int | None = None) -> list[list[str]]:
    """Graph mode's ranked document ids of ``syn``'s questions, as :func:`decide` ranks them:
    to :func:`depth`, reranked by ``rerank`` from ``candidates`` candidates (None: the
    index's ``rerank_candidates``)."""
    options = {} if candidates is None else {"rerank_candidates": candidates}
    texts = [q.question for q in syn.questions]
    return [r.doc_ids for r in index.query_batch(texts, k=depth(profile), mode="graph",
                                                 evidence=False, rerank=rerank, **options)]


def no_questions(syn) -> dict[str, Any] | None:
    """The decision where ``syn`` holds no question (``"none"``, saying why), else None."""
    if not syn.empty_reason:
        return None
    return {"rerank": "none", "reason": f"no synthetic questions: {syn.empty_reason}"}


def verdict(index, syn, base: list[list[str]], profile: AutoProfile = PROFILE,
            reranker: str = "gat", candidates: int | None = None) -> dict[str, Any]:
    """The decision on ``syn``'s questions (not empty) from graph mode's ranking of them
    (``base``: :func:`ranked` without a reranker) and ``reranker``'s, ranked now from
    ``candidates`` candidates (None: the index's ``rerank_candidates``); both recorded."""
    from gpurag.profile import get_profile

    n = int(candidates if candidates is not None else index.query_config.rerank_candidates)
    got = ranked(index, syn, profile, reranker, n)
    # the ranking profile and candidate count the two rankings ran on (the decision holds
    # for them)
    return {**judge(base, got, syn, profile, reranker), "candidates": n,
            "query_profile": get_profile(index.query_config.profile).label}


def judge(base: list[list[str]], reranked: list[list[str]], syn, profile: AutoProfile = PROFILE,
          reranker: str = "gat") -> dict[str, Any]:
    """The decision from graph mode's (``base``) and the reranker's ranked document ids of
    ``syn``'s questions: ``reranker`` when its mean gain in R@5 + all-gold@k is at least the
    margin and it wins more questions than it loses, else ``"none"``."""
    gold = [q.gold_ids for q in syn.questions]
    k = depth(profile)
    a, b = _per_question(base, gold, k), _per_question(reranked, gold, k)
    gain = float((b - a).mean())
    wins, losses = int((b > a).sum()), int((b < a).sum())
    pays = gain >= profile.margin and wins > losses
    return {"rerank": reranker if pays else "none",
            "reason": (f"{reranker} {'gains' if pays else 'does not gain'} {gain:+.3f} "
                       f"R@5 + all-gold@{k} on {len(gold)} synthetic questions "
                       f"({wins} won, {losses} lost; margin {profile.margin})"),
            "questions": len(gold), "gain": gain, "wins": wins, "losses": losses,
            "graph": float(a.mean()), reranker: float(b.mean()),
            "kinds": {kind: s.get("kept", 0) for kind, s in syn.stats.items()}}


def decide(index, profile: AutoProfile = PROFILE, reranker: str = "gat",
           candidates: int | None = None) -> dict[str, Any]:
    """Whether ``reranker`` pays on ``index``, reranking ``candidates`` candidates (None: the
    index's ``rerank_candidates``, what its ``rerank="auto"`` queries use):
    ``{"rerank": "gat" | "none", "reason", ...}`` with the synthetic questions' scores. An
    index without a graph, without synthetic questions, or without the reranker's packages
    gets ``"none"`` and says why."""
    from gpurag.errors import ConfigError

    if index.retriever is None:
        return {"rerank": "none", "reason": "the index has no knowledge graph"}
    try:
        from gpurag.rerank import require_gnn

        require_gnn()
    except ConfigError as exc:
        return {"rerank": "none", "reason": str(exc)}
    syn = decision_questions(index, profile)
    empty = no_questions(syn)
    if empty is not None:
        return empty
    return verdict(index, syn, ranked(index, syn, profile), profile, reranker, candidates)


def record(path: str | os.PathLike, decision: dict[str, Any]) -> Manifest:
    """Write ``decision`` into the manifest of the index at ``path`` (``extra``, outside the
    seal: :func:`gpurag.store.writer.write_extra`); returns the manifest written."""
    return write_extra(path, KEY, decision)


def resolve(index) -> str:
    """The reranker ``rerank="auto"`` stands for on ``index``: the manifest's decision, or one
    made now (kept for this opened index, not written) when the index has none."""
    recorded = (index.manifest.extra or {}).get(KEY)
    if isinstance(recorded, dict) and isinstance(recorded.get("rerank"), str) and (
            recorded["rerank"] == "none" or recorded["rerank"].startswith("gat")):
        return str(recorded["rerank"])
    def decided() -> str:  # once per opened index, however many threads ask (it costs)
        decision = decide(index)
        log.info("index %s: rerank=auto decided now (record it with `gpurag decide-rerank`): "
                 "%s", index.path, decision["reason"])
        return decision["rerank"]

    from gpurag.once import built_once

    return built_once(index, "_rerank_auto", decided)


def settle(index, plan, mode: str):
    """``plan`` (a :data:`gpurag.config.QueryPlan`) with ``rerank="auto"`` replaced by what it
    stands for on ``index`` in ``mode``: :func:`resolve` in graph mode, ``"none"`` in the
    others (they do not rerank); any other plan as it is."""
    if plan.rerank != "auto":
        return plan
    return dataclasses.replace(plan, rerank=resolve(index) if mode == "graph" else "none")
