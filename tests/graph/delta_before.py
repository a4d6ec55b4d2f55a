"""The graph delta's merge on read before it was blocked (gpurag/graph/delta.py at 21109dc): the
reference the blocked merge must equal bit for bit (tests/graph/test_delta_merge.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpurag.graph import delta as delta_mod


def merge_reference(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray,
                    meta: dict[str, Any], parts: list[np.ndarray]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`gpurag.graph.delta.merge` as it was before the blocked merge (whole-array keys,
    ``np.insert``): the tests' reference, bit for bit."""
    n_eb, n_e, n_p = meta["base_entities"], meta["entities"], meta["passages"]
    n = n_e + n_p
    n_base = len(indptr) - 1
    shift = n_e - n_eb
    counts = np.diff(np.asarray(indptr, np.int64))
    rows = np.repeat(np.arange(n_base, dtype=np.int64), counts)
    cols = np.asarray(indices, np.int64)
    if shift:
        rows[rows >= n_eb] += shift
        cols = np.where(cols >= n_eb, cols + shift, cols)
    base_keys = rows * n + cols  # sorted: the remap keeps the order
    del rows, cols
    w = np.array(weights, np.float32)  # a copy: the overrides land in it
    d = delta_mod.union(parts)
    if d.size:
        code = d["key"]
        u = delta_mod.nodes_of(code >> delta_mod._SHIFT, n_e)
        v = delta_mod.nodes_of(code & delta_mod._LOW, n_e)
        if (u >= n).any() or (v >= n).any() or (u == v).any():
            from gpurag.errors import IndexFormatError

            raise IndexFormatError(f"corrupt graph delta: entries outside the {n} nodes")
        dk = u * n + v
        order = np.argsort(dk, kind="stable")
        dk, dw = dk[order], d["weight"][order]
        gone = np.isnan(dw)  # REMOVED: the pair leaves the graph
        pos = np.searchsorted(base_keys, dk)
        hit = pos < base_keys.size
        hit[hit] = base_keys[pos[hit]] == dk[hit]
        w[pos[hit]] = dw[hit]
        if gone.any():
            stay = np.ones(base_keys.size, bool)
            stay[pos[hit & gone]] = False
            base_keys, w = base_keys[stay], w[stay]
            keep = ~gone
            dk, dw, hit = dk[keep], dw[keep], hit[keep]
            pos = np.searchsorted(base_keys, dk)
        new = ~hit
        base_keys = np.insert(base_keys, pos[new], dk[new])
        w = np.insert(w, pos[new], dw[new])
    out_rows = base_keys // n
    out_indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(out_rows, minlength=n), out=out_indptr[1:])
    return out_indptr, (base_keys - out_rows * n).astype(np.int32), w
