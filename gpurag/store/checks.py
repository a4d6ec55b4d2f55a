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
    """Row count of a Parquet table of the index (its parts summed), from their metadata."""
    rows = 0
    for name in d.parts(rel):
        try:
            rows += pq.ParquetFile(d.file(name)).metadata.num_rows
        except Exception as exc:
            raise IndexFormatError(f"corrupt table {d.root / name}: {exc}") from exc
    return rows


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
    check_graph_nodes(d, n_ent, n_chunks)
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
    check_graph_tables(d, n_chunks)


def check_graph_nodes(d: IndexDir, n_ent: int, n_chunks: int) -> None:
    """The CSR graph has a node per entity and chunk: its rows, or, with a local insert's
    delta beside it (:mod:`gpurag.graph.delta`), the delta's node counts (its base's rows
    checked against them, its parts listed in the manifest)."""
    from gpurag.graph import delta as delta_mod

    meta_rel = f"{layout.GRAPH_DIR}/{delta_mod.META}"
    if not d.has(meta_rel):
        _rows(d, layout.GRAPH_INDPTR, n_ent + n_chunks + 1,
              f"{n_ent} entities + {n_chunks} chunks + 1")
        return
    try:
        meta = delta_mod.read_meta(d.file(layout.GRAPH_DIR))
    except (OSError, ValueError) as exc:
        raise IndexFormatError(f"corrupt graph delta {d.root / meta_rel}: {exc}") from exc
    indptr = d.array(layout.GRAPH_INDPTR)
    delta_mod.check_meta(meta, indptr.shape[0] - 1, d.root / layout.GRAPH_DIR)
    if (meta["entities"], meta["passages"]) != (n_ent, n_chunks):
        raise IndexFormatError(
            f"index {d.root} is inconsistent: {meta_rel} covers {meta['entities']} entities "
            f"and {meta['passages']} passages, the tables {n_ent} and {n_chunks}")
    for name in meta["parts"]:
        if not d.has(f"{layout.GRAPH_DIR}/{name}"):
            raise IndexFormatError(f"index {d.root} is inconsistent: {meta_rel} names the "
                                   f"part {name}, which the manifest does not list")


# Columns each table must have, and which of them hold ids of what ("entity" or "chunk" rows).
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    layout.CHUNKS: ("chunk_id", "doc_id", "title", "text", "char_start", "char_end"),
    layout.ENTITIES: ("name", "n_passages"),
    layout.ALIASES: ("name", "entity_id"),
    layout.MENTIONS: ("entity", "chunk"),
    layout.RELATIONS: ("head_entity", "tail_entity", "chunk"),
    layout.FACTS: ("chunk", "text"),
    layout.COMMUNITIES: ("node", "level", "community"),
    layout.NAMES: ("name", "entity", "count"),
}
ID_COLUMNS: dict[str, dict[str, str]] = {
    layout.ALIASES: {"entity_id": "entity"},
    layout.MENTIONS: {"entity": "entity", "chunk": "chunk"},
    layout.RELATIONS: {"head_entity": "entity", "tail_entity": "entity", "chunk": "chunk"},
    layout.FACTS: {"chunk": "chunk"},
    layout.COMMUNITIES: {"node": "entity"},
}
TEXT_COLUMNS = {layout.CHUNKS: ("chunk_id", "doc_id", "text")}


def check_columns(d: IndexDir, rel: str) -> None:
    """Table ``rel`` has the columns readers use (a resealed table without ``text`` used to
    fail at query time with a KeyError)."""
    names = set(table_columns(d, rel))
    missing = [c for c in TABLE_COLUMNS.get(rel, ()) if c not in names]
    if missing:
        raise IndexFormatError(f"corrupt table {d.root / rel}: no {', '.join(missing)} "
                               f"column{'s' if len(missing) > 1 else ''}")


def check_chunks(d: IndexDir, chunks) -> None:
    """The chunks table: its columns, and text columns that hold text."""
    check_columns(d, layout.CHUNKS)
    for col in TEXT_COLUMNS[layout.CHUNKS]:
        kinds = {type(v) for v in chunks[col].head(1000)}
        if kinds - {str}:
            raise IndexFormatError(f"corrupt table {d.root / layout.CHUNKS}: column {col!r} "
                                   "does not hold text")


def check_graph_tables(d: IndexDir, n_chunks: int) -> None:
    """Every graph table has its columns and every id it holds is a row of the entities or
    chunks table (checked on open, like the CSR, not at the query that would index with it)."""
    n = {"entity": table_rows(d, layout.ENTITIES), "chunk": n_chunks}
    for rel in TABLE_COLUMNS:
        if rel != layout.CHUNKS and d.has(rel):
            check_columns(d, rel)
    for rel, columns in ID_COLUMNS.items():
        if not d.has(rel):
            continue
        frame = d.table(rel, columns=list(columns))
        for col, kind in columns.items():
            check_ids(d, rel, frame[col].to_numpy(), n[kind], f"{col} ({kind} ids)")
