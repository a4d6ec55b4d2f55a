"""The graph as three arrays (CSR), built, converted and stored without pickle.

A :class:`CSRGraph` is ``indptr`` (int64, n+1), ``indices`` (int32) and ``weights`` (float32):
row ``u`` holds the out-edges of node ``u``, column indices sorted, no duplicates, no self loops,
no zero weights. Undirected graphs are stored symmetrically (each edge twice), as cuGraph and
graspologic-native's ``leiden_csr`` expect.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import scipy.sparse as sp

_FILES = ("indptr", "indices", "weights")


@dataclass(frozen=True, eq=False)
class CSRGraph:
    """A weighted graph in compressed sparse row form (arrays may be memory-mapped)."""

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray

    def __post_init__(self) -> None:
        for name, dtype in (("indptr", np.int64), ("indices", np.int32), ("weights", np.float32)):
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype:
                object.__setattr__(self, name, np.asarray(arr).astype(dtype))
        if self.indptr.ndim != 1 or self.indptr.size < 1:
            raise ValueError("indptr must be a 1-D array of length n_nodes + 1")
        if self.indices.shape != self.weights.shape or self.indices.ndim != 1:
            raise ValueError("indices and weights must be 1-D arrays of the same length")
        if int(self.indptr[-1]) != self.indices.size or int(self.indptr[0]) != 0:
            raise ValueError("indptr must start at 0 and end at len(indices)")

    def __getstate__(self) -> dict:
        """The three arrays only: what solvers cache on the graph object (the walk's operator
        and its lock, :mod:`gpurag.graph.ppr`) is rebuilt on first use after a copy or pickle."""
        return {f.name: self.__dict__[f.name] for f in fields(self)}

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return self.indptr.size - 1

    @property
    def n_edges(self) -> int:
        """Number of stored (directed) entries; an undirected edge counts twice."""
        return self.indices.size

    def degree(self) -> np.ndarray:
        """Out-degree (number of out-edges) of every node, int64."""
        return np.diff(self.indptr)

    def out_weight(self) -> np.ndarray:
        """Sum of out-edge weights of every node, float64."""
        out = np.zeros(self.n_nodes, dtype=np.float64)
        nonempty = np.flatnonzero(np.diff(self.indptr) > 0)
        if nonempty.size:
            sums = np.add.reduceat(self.weights.astype(np.float64), self.indptr[nonempty])
            out[nonempty] = sums
        return out


def build_csr(
    src: np.ndarray,
    dst: np.ndarray,
    weight: np.ndarray | None,
    n_nodes: int,
    symmetric: bool = True,
) -> CSRGraph:
    """Build a :class:`CSRGraph` from an edge list.

    Duplicate edges are coalesced by summing their weights, self loops and zero-weight edges
    are dropped. With ``symmetric=True`` every edge ``(u, v)`` is also stored as ``(v, u)``
    (so an input holding both directions gets weight ``w_uv + w_vu`` on each). ``weight=None``
    means weight 1 per edge. Weights must be finite and nonnegative.
    """
    src = np.asarray(src)
    dst = np.asarray(dst)
    if src.shape != dst.shape or src.ndim != 1:
        raise ValueError("src and dst must be 1-D arrays of the same length")
    n_nodes = int(n_nodes)
    if n_nodes < 0:
        raise ValueError("n_nodes must be nonnegative")
    if weight is None:
        w = np.ones(src.size, dtype=np.float64)
    else:
        w = np.asarray(weight, dtype=np.float64)
        if w.shape != src.shape:
            raise ValueError("weight must have the same length as src and dst")
        if not np.all(np.isfinite(w)) or (w.size and w.min() < 0):
            raise ValueError("edge weights must be finite and nonnegative")
    if src.size:
        lo = min(int(src.min()), int(dst.min()))
        hi = max(int(src.max()), int(dst.max()))
        if lo < 0 or hi >= n_nodes:
            raise ValueError(f"node ids must lie in [0, {n_nodes}); got range [{lo}, {hi}]")
    keep = (src != dst) & (w > 0)
    src, dst, w = src[keep].astype(np.int64), dst[keep].astype(np.int64), w[keep]
    if symmetric:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        w = np.concatenate([w, w])
    mat = sp.coo_array((w, (src, dst)), shape=(n_nodes, n_nodes)).tocsr()
    mat.sum_duplicates()  # canonical: sorted indices, duplicates summed
    return CSRGraph(
        indptr=mat.indptr.astype(np.int64, copy=False),
        indices=mat.indices.astype(np.int32, copy=False),
        weights=mat.data.astype(np.float32),
    )


def from_scipy(mat: sp.sparray | sp.spmatrix) -> CSRGraph:
    """Wrap a square scipy sparse matrix (canonicalised: summed duplicates, no diagonal)."""
    coo = sp.coo_array(mat)
    if coo.shape[0] != coo.shape[1]:
        raise ValueError(f"adjacency matrix must be square, got {coo.shape}")
    return build_csr(coo.row, coo.col, coo.data, coo.shape[0], symmetric=False)


def to_scipy(g: CSRGraph) -> sp.csr_array:
    """The adjacency matrix as a ``scipy.sparse.csr_array`` (float32 weights)."""
    return sp.csr_array((g.weights, g.indices, g.indptr), shape=(g.n_nodes, g.n_nodes))


def save(g: CSRGraph, directory: str | os.PathLike[str]) -> None:
    """Write ``indptr.npy``, ``indices.npy``, ``weights.npy`` into ``directory`` (created)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    for name in _FILES:
        np.save(path / f"{name}.npy", np.ascontiguousarray(getattr(g, name)), allow_pickle=False)


_DTYPES = {"indptr": np.int64, "indices": np.int32, "weights": np.float32}


def validate_arrays(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray,
                    where: str | os.PathLike[str] = "graph") -> None:
    """Check stored CSR arrays before any SciPy or native code sees them.

    Exact dtypes, 1-D shapes, ``indptr`` starting at 0, nondecreasing and ending at
    ``len(indices)``, every column index in ``[0, n_nodes)`` and every weight finite and
    nonnegative. Raises :class:`~gpurag.errors.IndexFormatError` naming the offending file.
    """
    from gpurag.errors import IndexFormatError

    def bad(name: str, why: str) -> IndexFormatError:
        return IndexFormatError(f"corrupt graph array {Path(where) / f'{name}.npy'}: {why}")

    for name, arr in (("indptr", indptr), ("indices", indices), ("weights", weights)):
        if arr.dtype != _DTYPES[name] or arr.ndim != 1:
            raise bad(name, f"expected a 1-D {np.dtype(_DTYPES[name])} array, found "
                            f"{arr.ndim}-D {arr.dtype}")
    if indptr.size < 1 or int(indptr[0]) != 0 or int(indptr[-1]) != indices.size:
        raise bad("indptr", f"must run from 0 to {indices.size} (the number of edges)")
    if indptr.size > 1 and bool(np.any(indptr[1:] < indptr[:-1])):
        raise bad("indptr", "is not nondecreasing")
    if weights.size != indices.size:
        raise bad("weights", f"has {weights.size} entries, indices has {indices.size}")
    n = indptr.size - 1
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= n):
        raise bad("indices", f"holds node ids outside [0, {n})")
    if weights.size and not (bool(np.isfinite(weights).all()) and float(weights.min()) >= 0):
        raise bad("weights", "holds negative, infinite or NaN weights")


def load(directory: str | os.PathLike[str], mmap: bool = True,
         shown: str | os.PathLike[str] | None = None) -> CSRGraph:
    """Read a graph written by :func:`save`; ``mmap=True`` maps the arrays read-only; errors
    name the folder as ``shown`` (an index's own folder rather than its private view).

    The arrays are validated (:func:`validate_arrays`) before use; an unreadable or malformed
    file is an :class:`~gpurag.errors.IndexFormatError` naming it, never a crash in native code.
    """
    from gpurag.errors import IndexFormatError

    path = Path(directory)
    named = Path(shown) if shown is not None else path
    mode = "r" if mmap else None
    arrays = {}
    for name in _FILES:
        file = path / f"{name}.npy"
        try:
            arrays[name] = np.load(file, mmap_mode=mode, allow_pickle=False)
        except Exception as exc:
            detail = str(exc).replace(str(path), str(named))
            raise IndexFormatError(f"corrupt graph array {named / f'{name}.npy'}: {detail}"
                                   ) from exc
    validate_arrays(arrays["indptr"], arrays["indices"], arrays["weights"], named)
    from gpurag.graph import delta as delta_mod

    try:
        meta = delta_mod.read_meta(path)
    except (OSError, ValueError) as exc:
        raise IndexFormatError(f"corrupt graph delta {named / delta_mod.META}: {exc}"
                               ) from exc
    if meta is None:
        return CSRGraph(**arrays)
    # a local insert's delta beside the base (gpurag.graph.delta): merged on read, in memory
    delta_mod.check_meta(meta, arrays["indptr"].size - 1, named)
    parts = delta_mod.load_parts(path, meta, named)
    indptr, indices, weights = delta_mod.merge(arrays["indptr"], arrays["indices"],
                                               arrays["weights"], meta, parts)
    validate_arrays(indptr, indices, weights, named)
    if indices.size != meta["edges"]:
        raise IndexFormatError(f"corrupt graph delta {named / delta_mod.META}: the merged "
                               f"graph has {indices.size} entries, it says {meta['edges']}")
    return CSRGraph(indptr=indptr, indices=indices, weights=weights)


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for each pair, vectorized."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    offsets = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - counts), counts)
    return offsets + np.arange(total, dtype=np.int64)
