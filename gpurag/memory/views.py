"""The two graph views of a memory search, as array operations over the tag matrix.

``tags`` is a ``(n_traces, n_entities)`` 0/1 CSR matrix of canonical entity tags. The
relational view runs one personalized PageRank per anchor entity (all anchors of all questions
in one batch) and scores a trace by the weighted geometric mean over anchors of its best
entity's mass; the temporal view scores sessions by how many anchors they cover, favours the
most recent best-covering session, and traces close in turns to an anchor mention.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from gpurag.arrays import unique_sorted
from gpurag.graph.csr import CSRGraph

MASS_FLOOR = 1e-6


def anchor_mass(graph: CSRGraph, anchors: np.ndarray, ppr: Callable, damping: float) -> np.ndarray:
    """``(len(anchors), n_entities)`` PPR mass, one personalized PageRank per anchor."""
    if len(anchors) == 0:
        return np.zeros((0, graph.n_nodes), dtype=np.float32)
    reset = sp.csr_array((np.ones(len(anchors)), (np.arange(len(anchors)), anchors)),
                         shape=(len(anchors), graph.n_nodes))
    mass = ppr(graph, reset, damping=damping)
    mass = np.asarray(mass.toarray() if sp.issparse(mass) else mass, dtype=np.float32)
    # mass relative to the anchor's own: comparable across anchors of different degree
    return mass / np.maximum(mass[np.arange(len(anchors)), anchors][:, None], MASS_FLOOR)


def best_entity_mass(tags: sp.csr_array, mass: np.ndarray) -> np.ndarray:
    """``(n_anchors, n_traces)``: for each anchor, the largest mass among a trace's entities."""
    n = tags.shape[0]
    out = np.zeros((mass.shape[0], n), dtype=np.float32)
    if tags.nnz == 0 or mass.shape[0] == 0:
        return out
    indptr, indices = tags.indptr, tags.indices
    nonempty = np.flatnonzero(np.diff(indptr) > 0)
    vals = mass[:, indices]
    out[:, nonempty] = np.maximum.reduceat(vals, indptr[nonempty], axis=1)
    return out


def relational_scores(best: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted geometric mean over anchors (rows of ``best``); ``weights`` sum to 1."""
    if best.shape[0] == 0:
        return np.zeros(best.shape[1], dtype=np.float32)
    logm = np.log(np.maximum(best, MASS_FLOOR))
    return np.exp(weights @ logm).astype(np.float32)


def anchor_hits(tags_csc: sp.csc_array, anchors: np.ndarray) -> sp.csr_array:
    """``(n_anchors, n_traces)`` 0/1: which traces mention each anchor (the inverted index)."""
    return sp.csr_array(tags_csc[:, anchors].T)


def coverage_deficit(hits: sp.csr_array, weights: np.ndarray) -> float:
    """1 - the largest weighted share of the anchors that one trace holds."""
    if hits.shape[0] <= 1 or hits.nnz == 0:
        return 0.0
    per_trace = np.asarray(hits.T @ weights).ravel()
    return float(1.0 - per_trace.max())


def temporal_scores(hits: sp.csr_array, weights: np.ndarray, session: np.ndarray,
                    turn: np.ndarray, time: np.ndarray, n_sessions: int,
                    tau: float, recency: float) -> np.ndarray:
    """Per trace: session anchor coverage x (1 + recency bonus of the best-covering session)
    x closeness in turns to the nearest anchor mention of its session."""
    n = len(session)
    if hits.shape[0] == 0 or hits.nnz == 0:
        return np.zeros(n, dtype=np.float32)
    coo = sp.coo_array(hits)
    a, t = coo.row, coo.col
    covered = np.zeros((hits.shape[0], n_sessions), dtype=bool)
    covered[a, session[t]] = True
    cov = weights @ covered  # (n_sessions,)
    best = cov >= cov.max() - 1e-9
    s_time = np.full(n_sessions, -np.inf)
    np.maximum.at(s_time, session, np.nan_to_num(time, nan=-np.inf))
    bonus = np.zeros(n_sessions)
    if recency and np.isfinite(s_time[best]).any():
        newest = np.flatnonzero(best)[np.argmax(s_time[best])]
        bonus[newest] = recency
    # closeness: distance in turns to the nearest anchor-mentioning trace of the same session
    mention = unique_sorted(t)
    key_m = session[mention].astype(np.int64) * (1 << 32) + turn[mention]
    order = np.argsort(key_m)
    key_m, mention = key_m[order], mention[order]
    key = session.astype(np.int64) * (1 << 32) + turn
    pos = np.searchsorted(key_m, key)
    dist = np.full(n, np.inf)
    for cand in (pos - 1, pos):
        ok = (cand >= 0) & (cand < len(key_m))
        c = np.clip(cand, 0, len(key_m) - 1)
        same = ok & (session[mention[c]] == session)
        dist = np.where(same, np.minimum(dist, np.abs(turn[mention[c]] - turn)), dist)
    close = np.exp(-dist / max(tau, 1e-6))
    return (cov[session] * (1.0 + bonus[session]) * close).astype(np.float32)
