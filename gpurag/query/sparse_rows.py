"""Row operations over CSR arrays shared by the query stages (seeds, second hop, shared-entity
pages, lexical, paths, evidence): flattened slices, what rows reach through a matrix,
ragged per-question values packed into padded rows, and pages ranked by value and cosine.
NumPy/SciPy only; no stage imports."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

try:  # the kernels behind SciPy's ``csr_array((data, (rows, cols)))`` and ``sum_duplicates``
    from scipy.sparse._sparsetools import coo_tocsr, csr_sort_indices, csr_sum_duplicates
except ImportError:  # pragma: no cover - renamed in some future SciPy: SciPy's own calls
    coo_tocsr = csr_sort_indices = csr_sum_duplicates = None


def summed_csr(vals: np.ndarray, rows: np.ndarray, cols: np.ndarray,
               shape: tuple[int, int]) -> sp.csr_array:
    """``csr_array((vals, (rows, cols)), shape)`` then ``sum_duplicates()``, canonical: the
    same kernels in the same order (so the same sums, bit for bit: the index sort is not
    stable, so repeats are summed in the order it leaves them, as SciPy's calls do), without
    the constructors' checks and set-up (~30 us a call, several a query). Indices int64."""
    m, n = shape
    vals = np.asarray(vals)
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    if coo_tocsr is None or vals.dtype.kind != "f":
        out = sp.csr_array((vals, (rows, cols)), shape=shape)
        out.sum_duplicates()
        return out
    if rows.shape != cols.shape or rows.shape != vals.shape or rows.ndim != 1:
        raise ValueError("rows, cols and values must be 1-D arrays of one length")
    if rows.size and (min(rows.min(), cols.min()) < 0 or rows.max() >= m or cols.max() >= n):
        raise ValueError(f"an entry lies outside the ({m}, {n}) matrix")
    nnz = rows.size
    indptr = np.empty(m + 1, np.int64)
    indices = np.empty(nnz, np.int64)
    data = np.empty(nnz, vals.dtype)
    coo_tocsr(m, n, nnz, rows, cols, vals, indptr, indices, data)
    csr_sort_indices(m, indptr, indices, data)
    csr_sum_duplicates(m, n, indptr, indices, data)
    kept = int(indptr[-1])
    out = sp.csr_array((data[:kept], indices[:kept], indptr), shape=shape, copy=False)
    out.has_canonical_format = True
    return out


def reached(top: np.ndarray, matrix: sp.csr_array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the rows ``top`` (``(q, m)``, -1 padded) reach through ``matrix`` (CSR, ``(n, c)``,
    nonnegative): ``(question, column, summed weight)`` of each nonzero entry of the product
    of ``top``'s 0/1 rows with ``matrix``, sorted by question then column (the sums are the
    product's to the bit for integer weights, as the bridge matrix's 0/1). The rows' slices of
    the matrix are gathered and summed (no sparse product: its set-up cost about a
    millisecond a call, whatever the batch)."""
    r, c = np.nonzero(top >= 0)
    rows = top[r, c]
    indptr = matrix.indptr
    lo = indptr[rows].astype(np.int64)
    owner, at = csr_positions(r, lo, indptr[rows + 1] - lo)
    weight = matrix.data[at]
    hit = weight != 0  # an explicit zero reaches nothing (a product's zero sum is dropped)
    key = owner[hit] * matrix.shape[1] + matrix.indices[at[hit]]
    uniq, inv = np.unique(key, return_inverse=True)
    value = np.bincount(inv, weights=weight[hit], minlength=len(uniq))
    return uniq // matrix.shape[1], uniq % matrix.shape[1], value


def pack_rows(qr: np.ndarray, values: np.ndarray, q: int, depth: int) -> np.ndarray:
    """``(q, depth)`` rows, -1 padded, from ``values`` grouped by ascending question ``qr``
    (in their order within each question)."""
    pos = np.arange(len(qr)) - np.searchsorted(qr, np.arange(q))[qr]
    keep = pos < depth
    out = np.full((q, depth), -1, np.int64)
    out[qr[keep], pos[keep]] = values[keep]
    return out


def csr_rows(owner: np.ndarray, lo: np.ndarray, size: np.ndarray, values: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """The CSR slices ``values[lo[i] : lo[i] + size[i]]`` flattened, each value with its
    ``owner[i]``."""
    owner, at = csr_positions(owner, lo, size)
    return owner, values[at]


def csr_positions(owner: np.ndarray, lo: np.ndarray, size: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The positions ``lo[i] .. lo[i] + size[i] - 1`` of CSR slices flattened, each with its
    ``owner[i]``."""
    size = size.astype(np.int64)
    pos = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
    return np.repeat(owner, size), np.repeat(lo.astype(np.int64), size) + pos


def cosine_ranking(qr: np.ndarray, page: np.ndarray, value: np.ndarray, qvecs: np.ndarray,
                   passage_emb, temperature: float, q: int, depth: int) -> np.ndarray:
    """Per question, the pages ``page`` of the questions ``qr`` by ``value`` times
    ``exp((cos(question, page) - the question's best cosine) / temperature)`` (``temperature``
    0: by ``value``), ties by the lower page: ``(q, depth)`` -1 padded. The bridge pages'
    and the shared-entity pages' ranking (the same float64 operations in the same order)."""
    if temperature > 0 and len(qr):
        sim = np.einsum("ij,ij->i", qvecs[qr].astype(np.float64),
                        np.asarray(passage_emb[page], np.float64))
        best = np.full(q, -np.inf)
        np.maximum.at(best, qr, sim)
        value = value * np.exp((sim - best[qr]) / temperature)  # the best page weighs 1
    order = np.lexsort((page, -value, qr))
    return pack_rows(qr[order], page[order], q, depth)
