"""Chains longer than two hops: bounded rounds after the second hop.

The second hop (:mod:`gpurag.query.second_hop`) walks once from the first round's top
passages to the pages of the entities they mention. A three-hop question ("in which county is
the city where the performers of Brother were formed?") needs one more step: from the page
found (Pearl Jam) to the pages of what it mentions (Seattle, then King County). Each further
round starts from the best pages the previous hop reached that no round started from yet and
adds, for the whole batch at once, (1) their bridge pages ranked by how well each fits the
question and (2) the BM25 hits of the question expanded by each entity they mention (as the
second hop's expansions). Both are fused by reciprocal rank below the first ``keep``
documents, so the head the earlier rounds settled stays where it is.

How many rounds a question gets comes from the question itself: each relation phrase or
nested possessive ("the city where", "whose", "the performers of", "Hello Love's") is one
relation, and a question with ``n`` of them gets ``n - 1`` rounds beyond the second hop, at
most ``RankingProfile.chain_rounds`` (0, the default, turns the rounds off: on the shared sets
they moved all-gold@8 by at most one question, docs/RECALL.md "Chains longer than two"). A
question with one relation ("in what county is the city where X was born?") gets none and
keeps its ranking.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpurag.query import second_hop as hop

# A relation phrase: a relative word, "the <noun> of", or a possessive. Lower case only: a
# question's opening "Who"/"Which" asks, it does not nest.
RELATION = r"\b(?:where|which|whose|who|whom|that)\b|\bthe\s+[a-z\-]+\s+of\b|['’]s\s"


@dataclass(frozen=True)
class ChainProfile:
    """Constants of the rounds: the best variant of the sweep of 2026-12-01 on the three shared
    sets (in-sample, musique_train100 0.720 -> 0.730 all-gold@8, hotpotqa_train100 and
    lihua_world unchanged; docs/RECALL.md "Chains longer than two"). Each round starts from
    the ``sources`` best pages the previous hop reached (``beam``; else the best ranks no
    round started from, within the first ``source_depth``); their bridge pages, weighted by
    ``exp(cos / temperature)`` against the question less ``residual`` times the mean of the
    passages walked through, are fused at ``weight`` (reciprocal rank, constant
    ``rank_constant``) below the first ``keep`` documents, beside the BM25 hits of the
    question expanded by the entities of ``expand_sources`` pages at ``expand_weight``."""

    sources: int = 3
    beam: bool = True
    source_depth: int = 10
    temperature: float = 0.05
    residual: float = 0.0
    weight: float = 0.25
    rank_constant: float = 2.0
    keep: int = 5
    bridges: bool = True
    # expanded questions per round: the question plus each entity of `expand_sources` fresh
    # pages (of the previous hop's with `expand_beam`, else of the ranking), BM25 (0: none)
    expand_sources: int = 3
    expand_weight: float = 0.25
    expand_beam: bool = True  # expand the pages the previous hop reached, not the ranking's


PROFILE = ChainProfile()


def relation_counts(questions: list[str]) -> np.ndarray:
    """Per question, the number of relation phrases and nested possessives it holds."""
    return pd.Series(questions, dtype=object).astype(str).str.count(RELATION).to_numpy(np.int64)


def rounds_for(questions: list[str], budget: int) -> np.ndarray:
    """Rounds beyond the second hop per question: one per relation past the second, at most
    ``budget``."""
    if budget <= 0:
        return np.zeros(len(questions), np.int64)
    return np.clip(relation_counts(questions) - 1, 0, budget)


def fresh_sources(rows: np.ndarray, used: np.ndarray, depth: int, take: int) -> np.ndarray:
    """Per question, the first ``take`` of its first ``depth`` rows (``(q, d)``, -1 padded) not
    in ``used`` (``(q, u)``, -1 padded), ``(q, take)`` -1 padded."""
    top = rows[:, :depth]
    new = (top >= 0) & ~(top[:, :, None] == used[:, None, :]).any(axis=2)
    order = np.argsort(~new, axis=1, kind="stable")[:, :take]
    picked = np.take_along_axis(top, order, axis=1)
    return np.where(np.take_along_axis(new, order, axis=1), picked, -1)


def residual_vectors(qvecs: np.ndarray, used: np.ndarray, passage_emb, amount: float
                     ) -> np.ndarray:
    """The question vectors less ``amount`` times the mean vector of the passages ``used``
    (``(q, u)``, -1 padded), unit length: what the question still asks for."""
    if amount <= 0:
        return qvecs
    r, c = np.nonzero(used >= 0)
    vecs = np.asarray(passage_emb[used[r, c]], np.float64)
    total = np.zeros((len(qvecs), qvecs.shape[1]))
    np.add.at(total, r, vecs)
    count = np.bincount(r, minlength=len(qvecs))[:, None]
    out = qvecs.astype(np.float64) - amount * total / np.maximum(count, 1)
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out.astype(np.float32)


def chain_rounds(pages: hop.BridgePages, rows: np.ndarray, scores: np.ndarray,
                 qvecs: np.ndarray, questions: list[str], cfg,
                 profile: ChainProfile | None = None, *, tokens=None, linked=None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The second hop's ranking (``rows``/``scores``, ``(q, d)``) with the bridge pages of
    each question's further rounds (:func:`rounds_for`) fused in; a question with no round
    keeps its rows and scores unchanged (``profile``: default :data:`PROFILE`)."""
    profile = profile or PROFILE
    rounds = rounds_for(questions, cfg.chain_rounds)
    if not rounds.any():
        return rows, scores
    matrix = pages.matrix(cfg.second_hop_max_pages)
    used = rows[:, :cfg.second_hop_from]  # the second hop started from these
    emb = pages.passage_emb
    # the pages the second hop reached, best first: the first round's sources
    reached = hop.bridge_ranking(used, matrix, qvecs, emb, cfg.second_hop_from,
                                 cfg.second_hop_temperature)
    depth = rows.shape[1]
    for r in range(1, int(rounds.max()) + 1):
        active = rounds >= r
        src = fresh_sources(reached if profile.beam else rows, used,
                            reached.shape[1] if profile.beam else profile.source_depth,
                            profile.sources)
        src[~active] = -1
        rankings, weights = [rows], [1.0]
        if profile.expand_sources > 0 and profile.expand_weight > 0:
            ex_src = (fresh_sources(reached, used, reached.shape[1], profile.expand_sources)
                      if profile.expand_beam else
                      fresh_sources(rows, used, profile.source_depth, profile.expand_sources))
            ex_src[~active] = -1
            rankings.append(pages.expanded(ex_src, questions, ex_src.shape[1], qvecs,
                                           cfg.second_hop_triples, tokens=tokens,
                                           linked=linked))
            weights.append(profile.expand_weight)
            src_all = np.concatenate([src, ex_src], axis=1)
        else:
            src_all = src
        walked = np.concatenate([used, src_all], axis=1)
        qres = residual_vectors(qvecs, walked, emb, profile.residual)
        reached = hop.bridge_ranking(src, matrix, qres, emb, profile.sources,
                                     profile.temperature)
        if profile.bridges:
            rankings.append(reached)
            weights.append(profile.weight)
        rankings.append(hop.document_head(rows, pages.doc_codes, profile.keep))
        weights.append(hop._HEAD)
        new_rows, new_scores = hop.fuse(rankings, weights, matrix.shape[0],
                                        profile.rank_constant, depth)
        rows = np.where(active[:, None], new_rows, rows)
        scores = np.where(active[:, None], new_scores, scores)
        used = walked
    return rows, scores
