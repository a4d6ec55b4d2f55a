"""Fusion of a batch's candidate passages in torch (any device): the walk's candidates, the
reciprocal-rank fusion of the head sources, the lifted head and the best candidates.

Each function is the torch twin of the NumPy one in :mod:`gpurag.query.fusion` /
:mod:`gpurag.query.walk` (the specification the tests check against), over ``(q, ·)`` tensors
of passage rows (int64, -1 padded) and float64 scores: the same rows, ties broken the same way
(lower row first), float64 sums taken in the same order. Nothing loops over questions; the
only Python loops are over the few sources of a fusion.
"""

from __future__ import annotations

import torch

_NO_ROW = torch.iinfo(torch.int64).max


def minmax(x: torch.Tensor) -> torch.Tensor:
    """Each row scaled to [0, 1] (as :func:`gpurag.query.fusion.minmax`, in ``x``'s dtype)."""
    lo = x.min(dim=1, keepdim=True).values
    hi = x.max(dim=1, keepdim=True).values
    return (x - lo) / torch.clamp(hi - lo, min=1e-9)


def candidate_scores(top_values: torch.Tensor, top_ids: torch.Tensor, gathered: torch.Tensor,
                     gather: torch.Tensor, dense_scores: torch.Tensor, dense_ids: torch.Tensor,
                     dense_blend: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The walk's candidates ``(q, k + g)`` (-1 where padded or repeated) and their float64
    scores (``-inf`` there), as :func:`gpurag.query.walk.candidate_scores`: PPR mass over the
    question's largest, plus ``dense_blend`` times the min-max dense score; one copy per row
    (the dense one first, then the other gathered ones, then the top-k one)."""
    k, dd = top_ids.shape[1], dense_ids.shape[1]
    denom = torch.clamp(top_values[:, :1].double(), min=1e-30)
    cand = torch.cat([top_ids, gather], dim=1)
    score = torch.cat([top_values, gathered], dim=1).double() / denom
    if dense_blend:
        blend = torch.where(dense_ids >= 0, minmax(dense_scores), 0.0).double()
        score[:, k:k + dd] += dense_blend * blend
    q, c = cand.shape
    dev = cand.device
    priority = torch.cat([torch.full((k,), 2, device=dev), torch.zeros(dd, device=dev,
                                                                       dtype=torch.int64),
                          torch.ones(c - k - dd, device=dev, dtype=torch.int64)])
    order = torch.sort((cand + 1) * 3 + priority, dim=1, stable=True).indices
    sorted_cand = cand.gather(1, order)
    repeat = torch.zeros((q, c), dtype=torch.bool, device=dev)
    repeat[:, 1:] = sorted_cand[:, 1:] == sorted_cand[:, :-1]
    valid = torch.empty_like(repeat).scatter_(1, order, ~repeat) & (cand >= 0)
    score = score.masked_fill(~valid, float("-inf"))
    return torch.where(valid, cand, -1), score


def best_candidates(cand: torch.Tensor, score: torch.Tensor, k: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best candidates per row by score (ties: lower row first; -1 where the score
    is not finite), as :func:`gpurag.query.fusion.best_candidates`."""
    key = torch.where(cand >= 0, cand, _NO_ROW)
    by_row = torch.sort(key, dim=1, stable=True).indices
    by_score = torch.sort(score.gather(1, by_row), dim=1, descending=True, stable=True).indices
    order = by_row.gather(1, by_score)[:, :k]
    rows = cand.gather(1, order)
    scores = score.gather(1, order)
    return torch.where(torch.isfinite(scores), rows, -1), scores


def rrf_order(rankings: list[torch.Tensor], n: int, c: float = 60.0) -> torch.Tensor:
    """Rows fused by reciprocal rank, best first (ties: lower row first), -1 padded to the
    widest ranking, as :func:`gpurag.query.fusion.rrf_order` (each row's gains summed in the
    order of the rankings)."""
    q = rankings[0].shape[0]
    depth = max(r.shape[1] for r in rankings)
    dev = rankings[0].device
    rows = torch.cat(rankings, dim=1)
    gain = torch.cat([(1.0 / (c + 1.0 + torch.arange(r.shape[1], device=dev,
                                                      dtype=torch.float64))).expand(q, -1)
                      for r in rankings], dim=1)
    key = torch.where(rows >= 0, rows, n)
    order = torch.sort(key, dim=1, stable=True).indices  # a row's entries in ranking order
    skey = key.gather(1, order)
    sgain = gain.gather(1, order).masked_fill(skey == n, 0.0)
    width = skey.shape[1]
    start = torch.ones_like(skey, dtype=torch.bool)
    start[:, 1:] = skey[:, 1:] != skey[:, :-1]
    # the most entries one (question, row) has: how far the sums below must reach
    run = torch.cumsum(start.flatten().long(), 0)[(skey != n).flatten()]
    longest = int(torch.bincount(run).max()) if run.numel() else 0
    total = sgain.clone()
    for t in range(1, min(longest, width)):  # left to right, as np.add.at adds them
        same = skey[:, t:] == skey[:, :-t]
        total[:, :-t] += torch.where(same, sgain[:, t:], 0.0)
    total = total.masked_fill(~start | (skey == n), float("-inf"))
    best = torch.sort(total, dim=1, descending=True, stable=True).indices[:, :depth]
    out = skey.gather(1, best)
    return torch.where(torch.isfinite(total.gather(1, best)), out, -1)


def union_head(rankings: list[torch.Tensor], ppr: torch.Tensor, per_source: int, n: int
               ) -> torch.Tensor:
    """The first ``per_source`` rows of each ranking, each once, in the order of the
    reciprocal-rank fusion of the rankings and ``ppr`` (:func:`gpurag.query.fusion.union_head`)."""
    fused = rrf_order([*rankings, ppr], n=n)
    tops = torch.cat([r[:, :per_source] for r in rankings], dim=1)
    chosen = (fused[:, :, None] == tops[:, None, :]).any(dim=2) & (fused >= 0)
    order = torch.sort((~chosen).to(torch.uint8), dim=1, stable=True).indices[:, :tops.shape[1]]
    rows = fused.gather(1, order)
    return torch.where(chosen.gather(1, order), rows, -1)


def head_rows(rankings: dict[str, torch.Tensor], ppr: torch.Tensor, *, sources: list[str],
              mode: str, head: int, n: int) -> torch.Tensor:
    """Passage rows for the head of the list, ``(q, h)`` -1 padded, best first
    (:func:`gpurag.query.fusion.head_rows`)."""
    chosen = [ppr if s == "ppr" else rankings[s] for s in sources
              if s == "ppr" or s in rankings]
    if mode == "union" and len(chosen) > 1:
        return union_head(chosen, ppr, head, n)
    fused = chosen[0] if len(chosen) == 1 else rrf_order(chosen, n=n)
    return fused[:, :head]


def lift_head(cand: torch.Tensor, score: torch.Tensor, head_rows: torch.Tensor, head: int
              ) -> torch.Tensor:
    """``score`` with ``head_rows`` (q, <= head) lifted above every other candidate, in their
    order (:func:`gpurag.query.fusion.lift_head`, which works in place; this returns a copy)."""
    if not head_rows.shape[1]:
        return score
    dev = score.device
    lift = score.max(dim=1, keepdim=True).values + 1.0 + (
        head - torch.arange(head_rows.shape[1], device=dev)).double()
    match = (cand[:, :, None] == head_rows[:, None, :]) & (head_rows[:, None, :] >= 0)
    hit = match.any(dim=2)
    at = match.to(torch.uint8).argmax(dim=2)
    lifted = lift.expand(head_rows.shape).gather(1, at)
    return torch.where(hit, lifted, score)
