"""The PPR component's result and its host implementation: :class:`PPRTop` (only each
question's top-``k`` and gathered scores come back, never a dense ``(q, n)`` array),
:func:`host_ppr_topk` (the CPU walk of :func:`gpurag.graph.ppr.ppr`, each row by power
iteration or the local push as ``ppr`` routes it, then the top-``k`` in host memory) and
:func:`numpy_topk`. The device implementations live in :mod:`gpurag.backends.ppr`, which
chooses between them once per runtime."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from gpurag.arrays import sorted_lookup
from gpurag.graph import ppr as host_ppr
from gpurag.graph.csr import CSRGraph
from gpurag.graph.ppr_local import DenseScores, LocalScores, rank_within


@dataclass
class PPRTop:
    """What the PPR component returns per question: the top-``k`` ``values`` (float32) and
    node ``ids`` (int64, relative to ``lo``; -1 and ``-inf`` pad rows with fewer nodes), the
    scores at the requested ``gathered`` ids (0 where the id is -1), ``local`` (the scores
    recorded around the top-k and gathered nodes for ``local_fanout``) and ``full`` (the
    whole ``(q, n)`` scores on the host), each only when asked for."""

    values: np.ndarray
    ids: np.ndarray
    gathered: np.ndarray
    full: np.ndarray | None = None
    local: LocalScores | DenseScores | None = None


def numpy_topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of each row of a 2-D array, best first; ties, also at the cut, go to the lower
    id (as a stable sort of the whole row would); padded with -1 ids and ``-inf`` values where
    a row has fewer than ``k`` entries. O(n) per row plus a sort of the ``k`` kept."""
    scores = np.asarray(scores)
    q, n = scores.shape
    kk = min(k, n)
    values = np.full((q, k), -np.inf, dtype=np.float32)
    ids = np.full((q, k), -1, dtype=np.int64)
    if kk > 0 and q:
        part = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
        cut = np.take_along_axis(scores, part, axis=1).min(axis=1, keepdims=True)
        above = scores > cut
        at_cut = scores == cut
        need = kk - above.sum(axis=1, keepdims=True)
        keep = above | (at_cut & (np.cumsum(at_cut, axis=1) <= need))
        _, c = np.nonzero(keep)  # kk per row, by id
        sel = c.reshape(q, kk)
        vals = np.take_along_axis(scores, sel, axis=1)
        order = np.lexsort((sel, -vals), axis=-1)
        ids[:, :kk] = np.take_along_axis(sel, order, axis=1)
        values[:, :kk] = np.take_along_axis(vals, order, axis=1)
    return values, ids


def gather_at(part: Any, gather: Any) -> Any:
    """Scores of ``part`` (q, m) at ``gather`` (q, g) ids (-1: 0), NumPy or torch alike."""
    safe = gather.clip(0) if isinstance(gather, np.ndarray) else gather.clamp(min=0)
    if isinstance(part, np.ndarray):
        got = np.take_along_axis(part, safe, axis=1)
    else:
        got = part.gather(1, safe)
    return got * (gather >= 0)


def local_roots(ids: np.ndarray, gather: np.ndarray | None, lo: int) -> np.ndarray:
    """Global node ids (-1 padded) of the top-k and gathered nodes (both relative to ``lo``)."""
    parts = [ids] if gather is None else [ids, np.asarray(gather, np.int64)]
    rel = np.concatenate(parts, axis=1)
    return np.where(rel >= 0, rel + lo, -1)


def sparse_topk(rows: sp.csr_array, k: int, lo: int = 0, hi: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`numpy_topk` of ``rows[:, lo:hi]`` (CSR, nonnegative) without the dense rows:
    the same values and ids (ties by id), from the stored entries alone; a row with fewer than
    ``k`` positive entries in the range is completed as the dense row would be (its zeros by
    id), through the dense form of those rows only."""
    q, n = rows.shape
    hi = n if hi is None else hi
    kk = min(k, max(hi - lo, 0))
    values = np.full((q, k), -np.inf, dtype=np.float32)
    ids = np.full((q, k), -1, dtype=np.int64)
    if kk <= 0 or q == 0:
        return values, ids
    row = np.repeat(np.arange(q, dtype=np.int64), np.diff(rows.indptr))
    col = np.asarray(rows.indices, dtype=np.int64)
    val = np.asarray(rows.data, dtype=np.float32)
    keep = (col >= lo) & (col < hi) & (val > 0)
    row, col, val = row[keep], col[keep] - lo, val[keep]
    col_bits = max(int(max(hi - lo, 1) - 1).bit_length(), 1)
    row_bits = max(int(q - 1).bit_length(), 1)
    if row_bits + 31 + col_bits <= 63:
        # one sort of int64 keys (row, inverted score bits, column): a positive float32's
        # bits order as it does, so the order is the lexsort's (row, score down, column)
        key = row << (31 + col_bits)
        key |= (np.int64(0x7FFFFFFF) - val.view(np.int32)).astype(np.int64) << col_bits
        key |= col
        key.sort()
        row = key >> (31 + col_bits)
        col = key & ((1 << col_bits) - 1)
        val = (np.int64(0x7FFFFFFF) - ((key >> col_bits) & 0x7FFFFFFF)).astype(
            np.int32).view(np.float32)
    else:
        order = np.lexsort((col, -val, row))
        row, col, val = row[order], col[order], val[order]
    rank = rank_within(row)
    sel = rank < kk
    values[row[sel], rank[sel]] = val[sel]
    ids[row[sel], rank[sel]] = col[sel]
    short = np.flatnonzero(np.bincount(row[sel], minlength=q) < kk)
    if short.size:  # the dense row's zeros complete it
        v, i = numpy_topk(rows[short].toarray()[:, lo:hi], k)
        values[short], ids[short] = v, i
    return values, ids


def sparse_gather(rows: sp.csr_array, gather: np.ndarray, lo: int) -> np.ndarray:
    """:func:`gather_at` of ``rows[:, lo:]`` (CSR with sorted column ids per row) at the
    ``(q, g)`` ids ``gather`` (relative to ``lo``; -1 and unstored entries: 0), float32."""
    q, n = rows.shape
    gather = np.asarray(gather, dtype=np.int64)
    keys = (np.repeat(np.arange(q, dtype=np.int64), np.diff(rows.indptr)) * n
            + np.asarray(rows.indices, dtype=np.int64))
    want = np.arange(q, dtype=np.int64)[:, None] * n + lo + gather.clip(0)
    pos, hit = sorted_lookup(keys, want)
    hit &= gather >= 0
    data = np.asarray(rows.data, dtype=np.float32)
    return np.where(hit, data[pos] if keys.size else 0, 0).astype(np.float32)


def host_ppr_topk(g: CSRGraph, reset: Any, *, k: int, lo: int = 0, hi: int | None = None,
                  gather: np.ndarray | None = None, damping: float, tol: float,
                  max_iter: int = 100, method: str = "auto", eps: float = 1e-6,
                  full: bool = False, local_fanout: Sequence[int] | None = None,
                  push_min_edges: int | None = None, push_max_seeds: int | None = None
                  ) -> PPRTop:
    """The host PPR component: :func:`gpurag.graph.ppr.ppr` (``method``, ``eps``,
    ``push_min_edges`` and ``push_max_seeds`` as there), then the top-``k`` over ``[lo, hi)``
    (the scores are computed in host memory, where they already live). Pushed rows stay
    sparse: their top-``k`` and gathered scores are read from the touched nodes
    (:func:`sparse_topk`, :func:`sparse_gather`: the dense rows' values).

    A batch whose ``(q, n)`` iterate would outgrow :data:`HOST_CHUNK_BYTES` runs in chunks of
    questions (each question's arithmetic is its own, so the scores are the same): at 1,024
    questions on a 2k-passage graph one block cost 3.5x more per question than blocks of 64."""
    r = sp.csr_array(reset) if sp.issparse(reset) else sp.csr_array(np.atleast_2d(reset))
    q_all = r.shape[0]
    rows = max(HOST_CHUNK_MIN_ROWS, HOST_CHUNK_BYTES // max(4 * g.n_nodes, 1))
    if q_all > rows and not full and local_fanout is None:
        parts = [host_ppr_topk(g, r[c0:c0 + rows], k=k, lo=lo, hi=hi,
                               gather=None if gather is None else gather[c0:c0 + rows],
                               damping=damping, tol=tol, max_iter=max_iter, method=method,
                               eps=eps, push_min_edges=push_min_edges,
                               push_max_seeds=push_max_seeds)
                 for c0 in range(0, q_all, rows)]
        return PPRTop(np.concatenate([p.values for p in parts]),
                      np.concatenate([p.ids for p in parts]),
                      np.concatenate([p.gathered for p in parts]), None, None)
    if not full and local_fanout is None:
        return _split_topk(g, r, k, lo, hi, gather, damping, tol, max_iter, method, eps,
                           push_min_edges=push_min_edges, push_max_seeds=push_max_seeds)
    scores = host_ppr.ppr(g, r, method=method, damping=damping, tol=tol,
                          max_iter=max_iter, eps=eps, output="dense",
                          push_min_edges=push_min_edges, push_max_seeds=push_max_seeds)
    part = scores[:, lo:hi]
    values, ids = numpy_topk(part, k)
    q = scores.shape[0]
    gathered = (gather_at(part, np.asarray(gather, np.int64)).astype(np.float32)
                if gather is not None else np.zeros((q, 0), np.float32))
    # The rows are in host memory already: a reranker reads them where they are (recording
    # the local scores would only redo its own neighbour selection over more roots).
    local = DenseScores(scores) if local_fanout is not None else None
    return PPRTop(values, ids, gathered, scores if full else None, local)


def _split_topk(g: CSRGraph, r: sp.csr_array, k: int, lo: int, hi: int | None,
                gather: np.ndarray | None, damping: float, tol: float, max_iter: int,
                method: str, eps: float, *, push_min_edges: int | None = None,
                push_max_seeds: int | None = None) -> PPRTop:
    """:func:`host_ppr_topk` without the full rows: each row by the method ``ppr`` gives it
    (with ``push_min_edges`` and ``push_max_seeds`` as there), pushed rows' top-``k`` from
    their sparse scores, power rows' from their dense ones."""
    rn, push = host_ppr.routed_rows(g, r, method, damping, eps, push_min_edges,
                                    push_max_seeds)
    q = rn.shape[0]
    n_gather = 0 if gather is None else np.asarray(gather).shape[1]
    values = np.full((q, k), -np.inf, dtype=np.float32)
    ids = np.full((q, k), -1, dtype=np.int64)
    gathered = np.zeros((q, n_gather), np.float32)
    for rows, pushed in ((np.flatnonzero(push), True), (np.flatnonzero(~push), False)):
        if rows.size == 0:
            continue
        sub = rn if rows.size == q else rn[rows]  # one method for all: no row copy
        want = None if gather is None else np.asarray(gather, np.int64)[rows]
        if pushed:
            x = host_ppr._push_batch(g, sub, damping, eps)
            values[rows], ids[rows] = sparse_topk(x, k, lo, hi)
            if want is not None:
                gathered[rows] = sparse_gather(x, want, lo)
        else:
            part = host_ppr._power(g, sub, damping, tol, max_iter, np.dtype(np.float32))[:, lo:hi]
            values[rows], ids[rows] = numpy_topk(part, k)
            if want is not None:
                gathered[rows] = gather_at(part, want)
    return PPRTop(values, ids, gathered, None, None)


# Host memory one chunk of a batch's (rows, n) PPR iterate may take (at least the rows below):
# the iterate and its buffer near the cache (2k prefix, batch of 1,024: 2.9 ms per question in
# 8 MiB chunks, 1.9 in 2 MiB ones; bench/walk_replay.py, load 5.6).
HOST_CHUNK_BYTES = 2 << 20
HOST_CHUNK_MIN_ROWS = 64
