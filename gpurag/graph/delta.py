"""The graph of a local insert as a delta beside the stored CSR: written in parts, merged on read.

A local insert used to write the whole CSR graph again (36.9 MB of a 50k index, most of what it
wrote). Now the stored CSR files (the last full write's: a build, a compact, a delete or a
fold) are kept as they are (hard links) and the insert writes only the entries it changes:

* ``graph/delta.json``: the node counts (the base's entities; the entities, passages and
  stored entries now) and the delta's parts, in order;
* ``graph/delta.partNNNNN.npy``: entries ``(key, weight)`` sorted by ``key``, one per changed
  directed pair (both directions of an edge), its **resulting** weight (not an increment), or
  :data:`REMOVED` (NaN) for a pair the change takes out of the graph (a local delete: the
  removed passages' edges, the edges of the entities it blanks, a relation pair whose weight
  went to nothing).

Node ids of a graph put the entities first and the passages after them, so every new entity
shifts every passage id. A part names a node by a code that does not move: entity ``e`` is
``2e``, passage ``p`` is ``2p + 1``; a pair's key is ``code(u) << 32 | code(v)``. A part
holds the weight the whole rewrite would have given the pair (``float32(float64(stored) +
float64(new))``, the sum :func:`~gpurag.pipeline.incremental_local.merged_graph` takes), so
merging is "the latest part's value wins", exact and in any grouping: the parts merge as
table parts do (a binary counter, :func:`~gpurag.store.parts.merge_tail`; ``O(log n)`` parts
after ``n`` inserts) and :func:`merge` gives the graph a whole rewrite after each insert gives,
entry for entry and bit for bit. When the delta holds more than :data:`FOLD_FRACTION` of the
base's entries (:func:`folds`, the one rule of inserts and deletes) the insert folds it: the
merged graph is written as the new base, without a delta (so the cost of an insert, amortized,
does not grow with the inserts before it, and a reader's merge stays a fraction of the base). A
local delete writes its change the same way
(:func:`gpurag.pipeline.incremental_delete.write_graph`: the entries whose weight changed and
the removed ones, folded past the same bound). A full write (build, compact, fold) writes the
three CSR files alone, as before.

:func:`gpurag.graph.csr.load` merges on read (vectorized, ``O(E)`` once per open, into arrays
allocated once and filled block by block: :func:`merge`; the merged
arrays are in memory, not mapped).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

META = "delta.json"
PART_REL = "graph/delta.npy"  # the parts' base name (:mod:`gpurag.store.parts`); never written
ENTRY = np.dtype([("key", "<i8"), ("weight", "<f4")])
# A delta holding more entries than this share of the base's is folded into a new base: a
# reader's merge and every insert's lookups stay within a fraction of the base, and each stored
# entry is rewritten once per growth of the graph by this share (the amortized cost per insert
# is the new entries times 1 / FOLD_FRACTION, independent of how many inserts came before).
FOLD_FRACTION = 0.125
# The weight of an entry that takes its pair out of the graph (a stored edge's weight is
# finite and positive, so NaN names nothing else).
REMOVED = np.float32(np.nan)
_SHIFT = np.int64(32)
_LOW = np.int64((1 << 32) - 1)


def folds(stored_entries: int, new_entries: int, base_edges: int, fraction: float) -> bool:
    """Whether a delta of ``stored_entries`` (its parts' entries now) plus a change of
    ``new_entries`` outgrows ``fraction`` of a base CSR of ``base_edges`` entries: the one fold
    rule of a local insert and a local delete (either then writes the merged graph whole)."""
    return int(stored_entries) + int(new_entries) > fraction * max(int(base_edges), 1)


def codes(nodes: np.ndarray, n_ent: int) -> np.ndarray:
    """The position-free codes of node ids of a graph with ``n_ent`` entities."""
    nodes = np.asarray(nodes, np.int64)
    return np.where(nodes < n_ent, 2 * nodes, 2 * (nodes - n_ent) + 1)


def nodes_of(code: np.ndarray, n_ent: int) -> np.ndarray:
    """Node ids (of a graph with ``n_ent`` entities) of ``codes``."""
    code = np.asarray(code, np.int64)
    return np.where(code % 2 == 0, code // 2, n_ent + code // 2)


def keys(rows: np.ndarray, cols: np.ndarray, n_ent: int) -> np.ndarray:
    """The part keys of the pairs ``(rows, cols)`` of a graph with ``n_ent`` entities."""
    return (codes(rows, n_ent) << _SHIFT) | codes(cols, n_ent)


def union(parts: list[np.ndarray]) -> np.ndarray:
    """The entries of ``parts`` (oldest first), one per key, the latest part's weight; sorted."""
    if not parts:
        return np.zeros(0, ENTRY)
    if len(parts) == 1:
        return np.ascontiguousarray(parts[0], ENTRY)
    allp = np.concatenate([np.asarray(p, ENTRY) for p in parts])
    order = np.argsort(allp["key"], kind="stable")  # equal keys: older parts first
    allp = allp[order]
    k = allp["key"]
    last = np.r_[k[1:] != k[:-1], True] if k.size else np.zeros(0, bool)
    return np.ascontiguousarray(allp[last])


def read_meta(folder: str | Path) -> dict[str, Any] | None:
    """The delta's ``delta.json`` in the graph ``folder``, None without one."""
    path = Path(folder) / META
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def check_meta(meta: Any, base_nodes: int, where: str | Path) -> None:
    """The meta names what :func:`merge` needs, consistently with the base's node count."""
    from gpurag.errors import IndexFormatError

    need = ("base_entities", "entities", "passages", "edges", "parts")
    if not isinstance(meta, dict) or any(k not in meta for k in need):
        raise IndexFormatError(f"corrupt graph delta {Path(where) / META}: expected the keys "
                               f"{', '.join(need)}")
    ints = [meta[k] for k in need[:4]]
    if any(not isinstance(v, int) or v < 0 for v in ints) or not isinstance(
            meta["parts"], list) or not all(isinstance(p, str) for p in meta["parts"]):
        raise IndexFormatError(f"corrupt graph delta {Path(where) / META}: bad values")
    n_eb = meta["base_entities"]
    if n_eb > base_nodes or meta["entities"] < n_eb or (
            meta["passages"] < base_nodes - n_eb):
        raise IndexFormatError(f"corrupt graph delta {Path(where) / META}: its node counts "
                               f"do not extend the stored graph's {base_nodes} nodes")


def load_parts(folder: Path, meta: dict[str, Any], shown: Path) -> list[np.ndarray]:
    """The delta's parts (oldest first), read into memory and checked."""
    from gpurag.errors import IndexFormatError

    out = []
    for name in meta["parts"]:
        file = folder / Path(name).name
        try:
            arr = np.load(file, allow_pickle=False)
        except Exception as exc:
            raise IndexFormatError(f"corrupt graph delta part {shown / Path(name).name}: "
                                   f"{exc}") from exc
        if arr.dtype != ENTRY or arr.ndim != 1:
            raise IndexFormatError(f"corrupt graph delta part {shown / Path(name).name}: "
                                   f"expected a 1-D {ENTRY} array")
        out.append(arr)
    return out


# Base entries copied into the merged arrays per step of :func:`merge`: its temporaries are a
# few arrays of this many entries, whatever the graph's size.
MERGE_BLOCK = 1 << 16


def merge(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray, meta: dict[str, Any],
          parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR arrays of the base graph with the delta's entries applied (their weights
    replace the base's for the same pair), in the node ids of now. ``O(E)``, vectorized.

    The three output arrays are allocated once, at their final size, and the base's entries
    (its arrays may be memory-mapped) are copied into them :data:`MERGE_BLOCK` at a time: a
    reader holds the merged graph and, besides it, temporaries of the delta's size and of one
    block (no full-size key, row or copy arrays)."""
    n_eb, n_e, n_p = meta["base_entities"], meta["entities"], meta["passages"]
    n = n_e + n_p
    indptr = np.asarray(indptr)
    n_base = len(indptr) - 1
    shift = n_e - n_eb
    n_stored = int(indptr[-1])
    d = union(parts)
    code = d["key"]
    u = nodes_of(code >> _SHIFT, n_e)
    v = nodes_of(code & _LOW, n_e)
    if d.size and ((u >= n).any() or (v >= n).any() or (u == v).any()):
        from gpurag.errors import IndexFormatError

        raise IndexFormatError(f"corrupt graph delta: entries outside the {n} nodes")
    order = np.argsort(u * n + v, kind="stable")
    u, v, dw = u[order], v[order], d["weight"][order]
    del d, code, order
    gone = np.isnan(dw)  # REMOVED: the pair leaves the graph
    # each entry's place among the base's (in the merged order): the base row of u (a new
    # node: the empty run where its row goes), then a binary search of v's base id in it
    bu = _base_node(u, n_e, n_eb, n_base)
    bv = _base_node(v, n_e, n_eb, n_base)
    ip = np.asarray(indptr, np.int64)
    at_row = np.where(u < n_e, n_eb, n_base)  # a new node's row: after the base's rows before
    lo = np.where(bu >= 0, ip[np.maximum(bu, 0)], ip[at_row])
    hi = np.where(bu >= 0, ip[np.maximum(bu, 0) + 1], lo)
    # in base ids: a new entity's column sorts before the base's passages, a new passage's
    # after every base column
    target = np.where(bv >= 0, bv, np.where(v < n_e, n_eb, n_base))
    row_end = hi
    while True:
        open_ = lo < hi
        if not open_.any():
            break
        mid = (lo + hi) // 2
        less = np.zeros(lo.size, bool)
        less[open_] = np.asarray(indices[mid[open_]], np.int64) < target[open_]
        lo = np.where(open_ & less, mid + 1, lo)
        hi = np.where(open_ & ~less, mid, hi)
    pos = lo
    hit = np.zeros(pos.size, bool)
    can = (bu >= 0) & (bv >= 0) & (pos < row_end)  # in its row: the next row's is no hit
    hit[can] = np.asarray(indices[pos[can]], np.int64) == bv[can]
    removed = pos[hit & gone]  # sorted, distinct: base entries taken out
    override = hit & ~gone
    new = ~hit & ~gone
    new_pos = pos[new]  # sorted: each goes before the base entry at its place
    # the merged rows' counts: the base's, re-numbered, less the removed, plus the new
    counts = np.zeros(n, np.int64)
    base_rows = np.arange(n_base, dtype=np.int64)
    base_rows[n_eb:] += shift
    counts[base_rows] = np.diff(ip)
    del base_rows
    counts -= np.bincount(u[hit & gone], minlength=n)
    counts += np.bincount(u[new], minlength=n)
    out_indptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=out_indptr[1:])
    del counts
    total = int(out_indptr[-1])
    out_indices = np.empty(total, np.int32)
    out_weights = np.empty(total, np.float32)

    def out_of(at: np.ndarray) -> np.ndarray:
        """The merged place of the kept base entries at ``at`` (sorted)."""
        return (at - np.searchsorted(removed, at, "left")
                + np.searchsorted(new_pos, at, "right"))

    for start in range(0, n_stored, MERGE_BLOCK):
        stop = min(start + MERGE_BLOCK, n_stored)
        at = np.arange(start, stop, dtype=np.int64)
        cols = np.array(indices[start:stop], np.int32)
        if shift:
            cols[cols >= n_eb] += shift
        w = np.array(weights[start:stop], np.float32)
        a, b = np.searchsorted(removed, [start, stop])
        if b > a:
            keep = np.ones(at.size, bool)
            keep[removed[a:b] - start] = False
            at, cols, w = at[keep], cols[keep], w[keep]
        dst = out_of(at)
        out_indices[dst] = cols
        out_weights[dst] = w
    if override.any():
        out_weights[out_of(pos[override])] = dw[override]
    if new.any():
        dst = new_pos - np.searchsorted(removed, new_pos, "left") + np.arange(new_pos.size)
        out_indices[dst] = v[new]
        out_weights[dst] = dw[new]
    return out_indptr, out_indices, out_weights


def stored_weights(graph_dir: Path, n_base_entities: int, parts: list[Path],
                   rows: np.ndarray, cols: np.ndarray, n_ent: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(weight, found)`` of the pairs ``(rows, cols)`` (node ids of a graph with ``n_ent``
    entities, at least the stored ones) in the stored graph (the CSR files in ``graph_dir``,
    whose first ``n_base_entities`` nodes are entities, and the delta ``parts``, oldest
    first): the
    latest part's weight, else the base's (a pair the latest part naming it removed is not
    found: weight 0); only the base rows of these pairs are read (the base is
    memory-mapped)."""
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    w = np.zeros(rows.size, np.float32)
    found = np.zeros(rows.size, bool)
    named = np.zeros(rows.size, bool)  # a part names the pair: the base is not asked
    want = keys(rows, cols, n_ent)
    for path in reversed(parts):  # the latest part wins
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        pk = arr["key"]
        open_ = ~named
        pos = np.searchsorted(pk, want[open_])
        ok = pos < pk.size
        ok[ok] = pk[pos[ok]] == want[open_][ok]
        at = np.flatnonzero(open_)[ok]
        pw = np.asarray(arr["weight"][pos[ok]], np.float32)
        live = ~np.isnan(pw)
        w[at[live]] = pw[live]
        found[at[live]] = True
        named[at] = True
    # the base: node ids of the last full write
    indptr = np.load(graph_dir / "indptr.npy", mmap_mode="r", allow_pickle=False)
    indices = np.load(graph_dir / "indices.npy", mmap_mode="r", allow_pickle=False)
    weights = np.load(graph_dir / "weights.npy", mmap_mode="r", allow_pickle=False)
    n_base = len(indptr) - 1
    n_eb = int(n_base_entities)
    br = _base_node(rows, n_ent, n_eb, n_base)
    bc = _base_node(cols, n_ent, n_eb, n_base)
    look = np.flatnonzero(~named & (br >= 0) & (bc >= 0))
    if look.size:
        from gpurag.arrays import unique_sorted

        ur = unique_sorted(br[look])
        ip = np.asarray(indptr, np.int64)
        starts, ends = ip[ur], ip[ur + 1]
        at = _ranges(starts, ends - starts)
        seg_rows = np.repeat(ur, ends - starts)
        seg_keys = seg_rows * n_base + np.asarray(indices[at], np.int64)
        q = br[look] * n_base + bc[look]
        pos = np.searchsorted(seg_keys, q)
        ok = pos < seg_keys.size
        ok[ok] = seg_keys[pos[ok]] == q[ok]
        w[look[ok]] = np.asarray(weights[at[pos[ok]]], np.float32)
        found[look[ok]] = True
    return w, found


def _base_node(nodes: np.ndarray, n_ent: int, n_eb: int, n_base: int) -> np.ndarray:
    """The base graph's node id of each node (-1: a node the base does not hold)."""
    p = nodes - n_ent
    out = np.where(nodes < n_ent, np.where(nodes < n_eb, nodes, -1),
                   np.where(n_eb + p < n_base, n_eb + p, -1))
    return out.astype(np.int64)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` per pair (:func:`gpurag.graph.csr.ranges`, which
    imports this module: no import circle)."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    return np.repeat(starts - (ends - counts), counts) + np.arange(total, dtype=np.int64)
