"""Cross-file consistency of an opened index: row counts and index ranges that must agree.

Checksums catch damage; these catch an index whose files disagree (a crafted or resealed
manifest, a bug in a writer) before SciPy or FAISS index one array with another. Cheap: Parquet
row counts come from metadata and arrays are memory-mapped.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from gpurag.errors import IndexFormatError
from gpurag.store import layout
from gpurag.store.reader import IndexDir


def table_rows(d: IndexDir, rel: str) -> int:
    """Row count of a Parquet table of the index, from its metadata."""
    try:
        return pq.ParquetFile(d.file(rel)).metadata.num_rows
    except Exception as exc:
        raise IndexFormatError(f"corrupt table {d.root / rel}: {exc}") from exc


def table_columns(d: IndexDir, rel: str) -> list[str]:
    """Column names of a Parquet table of the index, from its schema."""
    try:
        return list(pq.ParquetFile(d.file(rel)).schema_arrow.names)
    except Exception as exc:
        raise IndexFormatError(f"corrupt table {d.root / rel}: {exc}") from exc


def _rows(d: IndexDir, rel: str, n: int, what: str) -> np.ndarray:
    arr = d.array(rel)
    if arr.ndim < 1 or arr.shape[0] != n:
        raise IndexFormatError(f"index {d.root} is inconsistent: {rel} has {arr.shape[:1]} rows, "
                               f"expected {n} ({what})")
    return arr


def check_vectors(d: IndexDir, rel: str, index, n: int, what: str) -> None:
    """A loaded FAISS file of the index holds ``n`` vectors (``what`` says of which rows)."""
    if int(index.ntotal) != n:
        raise IndexFormatError(f"index {d.root} is inconsistent: {rel} holds {index.ntotal} "
                               f"vectors, expected {n} ({what})")


def check_ids(d: IndexDir, rel: str, ids: np.ndarray, n: int, what: str) -> None:
    """Integer ids read from ``rel`` all lie in ``[0, n)``."""
    if ids.dtype.kind not in "iu" or (ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n)):
        raise IndexFormatError(f"corrupt table {d.root / rel}: {what} outside [0, {n})")


def check_dense(d: IndexDir, n_chunks: int, passage_index) -> None:
    """Passage vectors: one per chunk."""
    check_vectors(d, layout.PASSAGES_FAISS, passage_index, n_chunks, "one per chunk")


def check_graph(d: IndexDir, n_chunks: int) -> None:
    """Graph part: node count and fact-to-entity CSR agree with the tables (the vector files
    and the names' entity ids are checked as they are loaded: :func:`check_vectors`,
    :func:`check_ids`)."""
    n_ent = table_rows(d, layout.ENTITIES)
    n_facts = table_rows(d, layout.FACTS)
    _rows(d, layout.GRAPH_INDPTR, n_ent + n_chunks + 1,
          f"{n_ent} entities + {n_chunks} chunks + 1")
    indptr = _rows(d, layout.FACT_ENTITY_INDPTR, n_facts + 1, "facts + 1")
    indices = d.array(layout.FACT_ENTITY_INDICES)
    rel_ptr, rel_idx = layout.FACT_ENTITY_INDPTR, layout.FACT_ENTITY_INDICES
    if indptr.ndim != 1 or indptr.dtype.kind not in "iu" or indices.ndim != 1 \
            or indices.dtype.kind not in "iu":
        raise IndexFormatError(f"corrupt array {d.root / rel_ptr}: expected 1-D integer arrays")
    if int(indptr[0]) != 0 or int(indptr[-1]) != indices.size or bool(
            np.any(indptr[1:] < indptr[:-1])):
        raise IndexFormatError(f"corrupt array {d.root / rel_ptr}: not a CSR row pointer "
                               f"from 0 to {indices.size}")
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= n_ent):
        raise IndexFormatError(f"corrupt array {d.root / rel_idx}: entity ids outside "
                               f"[0, {n_ent})")
