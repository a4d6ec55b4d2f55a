"""Per-query top-k over score matrices and over CSR-segmented score vectors (torch, any device).

Two shapes of input:

* a dense ``(q, n)`` score matrix, one row per query (:func:`topk_dense`, ``torch.topk`` along
  rows; on CUDA a radix select that reads the matrix once);
* a flat score vector cut into ``s`` segments by CSR offsets (``offsets[i]:offsets[i+1]`` is
  segment ``i``), e.g. candidate subgraphs of different sizes (:func:`segmented_topk`). Two
  strategies, chosen by shape: segments padded into a ``(s, max_len)`` matrix and
  ``torch.topk`` when that wastes little memory, otherwise one global stable sort by score
  followed by a stable sort by segment (segment ``i`` then occupies the same positions it had
  on input, best first), so skewed segment sizes cost ``O(m log m)`` and no padding.

Results are padded to ``k`` columns: index ``-1`` and score ``-inf`` (``+inf`` for
``largest=False``) where a segment has fewer than ``k`` entries. Order among tied scores is
unspecified. NaN scores are not supported. The NumPy references beside each function are the
specification the tests check against.
"""

from __future__ import annotations

import numpy as np
import torch

# Use the padded strategy while the padded matrix holds at most this many times the entries.
PAD_WASTE_MAX = 4.0


def _pad_value(largest: bool) -> float:
    return float("-inf") if largest else float("inf")


def topk_dense(
    scores: torch.Tensor, k: int, largest: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` of every row of a ``(q, n)`` score matrix: ``(values, indices)``, each ``(q, k)``.

    Rows are sorted best first; when ``k > n`` the missing columns are padded (index -1).
    """
    if scores.ndim != 2:
        raise ValueError(f"scores must be 2-D (q, n), got shape {tuple(scores.shape)}")
    if k < 0:
        raise ValueError("k must be nonnegative")
    q, n = scores.shape
    kk = min(k, n)
    values, indices = torch.topk(scores, kk, dim=1, largest=largest, sorted=True)
    if kk == k:
        return values, indices
    pad_v = torch.full((q, k - kk), _pad_value(largest), dtype=scores.dtype, device=scores.device)
    pad_i = torch.full((q, k - kk), -1, dtype=torch.int64, device=scores.device)
    return torch.cat([values, pad_v], dim=1), torch.cat([indices, pad_i], dim=1)


def _check_offsets(values: torch.Tensor, offsets: torch.Tensor) -> None:
    if values.ndim != 1 or offsets.ndim != 1 or offsets.numel() < 1:
        raise ValueError("values must be 1-D and offsets 1-D of length n_segments + 1")
    first, last = int(offsets[0]), int(offsets[-1])
    if first != 0 or last != values.numel():
        raise ValueError("offsets must start at 0 and end at len(values)")
    if offsets.numel() > 1 and bool((offsets[1:] < offsets[:-1]).any()):
        raise ValueError("offsets must be nondecreasing")


def segmented_topk(
    values: torch.Tensor,
    offsets: torch.Tensor,
    k: int,
    largest: bool = True,
    strategy: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` of each CSR segment of ``values``: ``(scores, positions)``, each ``(s, k)``.

    ``positions`` index into ``values`` (int64, -1 as padding); rows are sorted best first.
    ``strategy`` is ``"auto"``, ``"pad"`` or ``"sort"`` (see the module docstring).
    """
    if k < 0:
        raise ValueError("k must be nonnegative")
    offsets = offsets.to(device=values.device, dtype=torch.int64)
    _check_offsets(values, offsets)
    s, m = offsets.numel() - 1, values.numel()
    lengths = offsets[1:] - offsets[:-1]
    max_len = int(lengths.max()) if s else 0
    if strategy == "auto":
        strategy = "pad" if s * max_len <= PAD_WASTE_MAX * max(m, 1) else "sort"
    if s == 0 or k == 0 or m == 0:
        return (
            torch.full((s, k), _pad_value(largest), dtype=values.dtype, device=values.device),
            torch.full((s, k), -1, dtype=torch.int64, device=values.device),
        )
    seg = torch.repeat_interleave(torch.arange(s, device=values.device), lengths, output_size=m)
    if strategy == "pad":
        local = torch.arange(m, device=values.device) - offsets[:-1][seg]
        padded = torch.full(
            (s, max_len), _pad_value(largest), dtype=values.dtype, device=values.device
        )
        padded[seg, local] = values
        top_v, top_local = topk_dense(padded, k, largest)
        valid = (top_local >= 0) & (top_local < lengths[:, None])
        pos = torch.where(valid, offsets[:-1, None] + top_local.clamp(min=0), -1)
        return torch.where(valid, top_v, _pad_value(largest)), pos
    if strategy != "sort":
        raise ValueError(f"unknown strategy {strategy!r}")
    order = torch.sort(values, descending=largest, stable=True).indices
    order = order[torch.sort(seg[order], stable=True).indices]  # grouped by segment, best first
    pos = offsets[:-1, None] + torch.arange(k, device=values.device)[None, :]
    valid = pos < offsets[1:, None]
    idx = torch.where(valid, order[pos.clamp(max=m - 1)], -1)
    top_v = torch.where(valid, values[idx.clamp(min=0)], _pad_value(largest))
    return top_v, idx


def topk_dense_reference(
    scores: np.ndarray, k: int, largest: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy reference of :func:`topk_dense` (ties broken by lower index)."""
    scores = np.asarray(scores)
    q, n = scores.shape
    offsets = np.arange(q + 1, dtype=np.int64) * n
    values, pos = segmented_topk_reference(scores.ravel(), offsets, k, largest)
    return values, np.where(pos >= 0, pos - offsets[:-1, None], -1)


def segmented_topk_reference(
    values: np.ndarray, offsets: np.ndarray, k: int, largest: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy reference of :func:`segmented_topk`: one stable argsort per segment."""
    values = np.asarray(values)
    offsets = np.asarray(offsets, dtype=np.int64)
    s = offsets.size - 1
    pad = _pad_value(largest)
    out_v = np.full((s, k), pad, dtype=np.result_type(values.dtype, np.float32))
    out_i = np.full((s, k), -1, dtype=np.int64)
    for i in range(s):
        lo, hi = offsets[i], offsets[i + 1]
        seg = values[lo:hi]
        order = np.argsort(-seg if largest else seg, kind="stable")[:k]
        out_v[i, : order.size] = seg[order]
        out_i[i, : order.size] = lo + order
    return out_v, out_i


def topk_dense_stable(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` (largest) of every row of a ``(q, n)`` matrix with ties, also at the cut, going
    to the lower index (as a stable sort of the whole row would, and as
    :func:`gpurag.graph.ppr_top.numpy_topk` does): ``(values, indices)``, best first, padded
    with ``-inf`` and -1 where ``k > n``. One ``torch.topk`` and, for the ties at each row's
    cut, one pass over the row (no full sort)."""
    if scores.ndim != 2:
        raise ValueError(f"scores must be 2-D (q, n), got shape {tuple(scores.shape)}")
    q, n = scores.shape
    kk = min(max(k, 0), n)
    dev = scores.device
    values = torch.full((q, k), float("-inf"), dtype=scores.dtype, device=dev)
    ids = torch.full((q, k), -1, dtype=torch.int64, device=dev)
    if kk == 0 or q == 0:
        return values, ids
    cut = torch.topk(scores, kk, dim=1, largest=True, sorted=False).values.min(
        dim=1, keepdim=True).values
    above = scores > cut
    at_cut = scores == cut
    need = kk - above.sum(dim=1, keepdim=True)
    keep = above | (at_cut & (torch.cumsum(at_cut, dim=1, dtype=torch.int32) <= need))
    sel = torch.nonzero(keep)[:, 1].reshape(q, kk)  # kk per row, ascending index
    vals = scores.gather(1, sel)
    order = torch.sort(vals, dim=1, descending=True, stable=True).indices
    values[:, :kk] = vals.gather(1, order)
    ids[:, :kk] = sel.gather(1, order)
    return values, ids
