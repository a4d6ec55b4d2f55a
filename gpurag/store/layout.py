"""Every path of the index layout, in one place, and which of them an index must hold.

An index directory holds ``manifest.json`` and the files below; paths are relative to the
index, with ``/`` separators. Beside the index (``<parent>/.<name>.<suffix>``) live the build's
transient siblings: the write lock, the resumable work folder and the temporary folder of a
commit. Code that reads or writes an index names its files through these constants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from gpurag.errors import IndexFormatError

MANIFEST = "manifest.json"

# Dense part: always present. Each vector set is stored once, as a FAISS file (its codes in the
# build's ``vector_precision``); code that needs the vectors decodes them from it.
CHUNKS = "tables/chunks.parquet"
PASSAGES_FAISS = "vectors/passages.faiss"

# Knowledge-graph part: present when the index was built with ``graph=True``.
NAMES_FAISS = "vectors/names.faiss"
FACTS_FAISS = "vectors/facts.faiss"
ENTITIES = "tables/entities.parquet"
ALIASES = "tables/aliases.parquet"
MENTIONS = "tables/mentions.parquet"
RELATIONS = "tables/relations.parquet"
FACTS = "tables/facts.parquet"
COMMUNITIES = "tables/communities.parquet"
GRAPH_DIR = "graph"
LEXICAL_DIR = "lexical"  # the BM25 model over the chunks (bm25s files); optional
LEXICAL_FILES = tuple(f"{LEXICAL_DIR}/{name}" for name in (
    "params.index.json", "vocab.index.json", "data.csc.index.npy", "indices.csc.index.npy",
    "indptr.csc.index.npy"))
GRAPH_INDPTR = "graph/indptr.npy"
GRAPH_INDICES = "graph/indices.npy"
GRAPH_WEIGHTS = "graph/weights.npy"
FACT_ENTITY_INDPTR = "arrays/fact_entity_indptr.npy"
FACT_ENTITY_INDICES = "arrays/fact_entity_indices.npy"
# Every resolved surface name (``name``, its ``entity``, its ``count`` of occurrences) and its
# vector: the entity index (an entity scores as its best name) and what incremental updates
# resolve new names against.
NAMES = "tables/names.parquet"

# Tombstones: the sorted ids of the chunks a local delete removed (int64, cumulative over
# deletes). The chunk table, the passage vectors and the stored extraction keep their rows
# (ids are never renumbered); readers treat these chunks as blank and never return them
# (:meth:`~gpurag.store.reader.IndexDir.deleted_chunks`). Their text stays on disk in the kept
# files until ``gpurag compact`` (or any full write) drops them.
DELETED_CHUNKS = "arrays/deleted_chunks.npy"
# The same for the rows of the name and fact vector indexes a delete left unused (their table
# rows blank): searches skip them, decoding gives them as zero vectors.
DELETED_NAMES = "arrays/deleted_names.npy"
DELETED_FACTS = "arrays/deleted_facts.npy"
TOMBSTONES: dict[str, str] = {PASSAGES_FAISS: DELETED_CHUNKS, NAMES_FAISS: DELETED_NAMES,
                              FACTS_FAISS: DELETED_FACTS}

# Optional files: written only by some extractors (or not yet by any stage).
DESCRIPTIONS = "tables/descriptions.parquet"
REPORTS = "tables/reports.parquet"

# What incremental updates reuse (optional: an index without them is re-extracted): the raw
# extractor output per chunk position and its per-batch counters.
EXTRACT_MENTIONS = "extract/mentions.parquet"
EXTRACT_RELATIONS = "extract/relations.parquet"
EXTRACT_DESCRIPTIONS = "extract/descriptions.parquet"
EXTRACT_STATS = "extract/stats.parquet"
EXTRACT_FILES: tuple[str, ...] = (EXTRACT_MENTIONS, EXTRACT_RELATIONS, EXTRACT_DESCRIPTIONS,
                                  EXTRACT_STATS)

REQUIRED_DENSE: tuple[str, ...] = (CHUNKS, PASSAGES_FAISS)
REQUIRED_GRAPH: tuple[str, ...] = (
    ENTITIES, ALIASES, MENTIONS, RELATIONS, FACTS, COMMUNITIES, NAMES,
    GRAPH_INDPTR, GRAPH_INDICES, GRAPH_WEIGHTS,
    FACT_ENTITY_INDPTR, FACT_ENTITY_INDICES, NAMES_FAISS, FACTS_FAISS,
)
OPTIONAL: tuple[str, ...] = (DESCRIPTIONS, REPORTS, *EXTRACT_FILES, DELETED_CHUNKS,
                           DELETED_NAMES, DELETED_FACTS)

# Siblings of an index directory ``<parent>/<name>``.
LOCK_SUFFIX = "lock"
WORK_SUFFIX = "work"
TMP_SUFFIX = "tmp"
OLD_SUFFIX = "old"
EMBED_CACHE_SUFFIX = "embcache"  # the build's embedding cache beside the index


def sibling(target: Path, suffix: str) -> Path:
    """``<parent>/.<name>.<suffix>``: the lock, work, tmp or old sibling of an index."""
    return target.parent / f".{target.name}.{suffix}"


def required_files(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The files an index built with ``config`` (the manifest's ``config``) must hold."""
    return REQUIRED_DENSE + (REQUIRED_GRAPH if config.get("graph", True) else ())


def check_file_set(files: Iterable[str], config: Mapping[str, Any], where: str | Path) -> None:
    """Raise :class:`IndexFormatError` naming the first required file missing from ``files``."""
    present = set(files)
    missing = [rel for rel in required_files(config) if rel not in present]
    if missing:
        raise IndexFormatError(
            f"index {where} is incomplete: {missing[0]} is missing"
            + (f" (and {len(missing) - 1} more required files)" if len(missing) > 1 else ""))


def check_relpath(rel: object, where: str | Path) -> str:
    """A manifest file key must be a plain relative path inside the index (no ``..``)."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        raise IndexFormatError(f"manifest of {where} lists an invalid file name {rel!r}")
    parts = PurePosixPath(rel).parts
    if (rel.startswith("/") or any(p in ("..", ".") for p in rel.split("/"))
            or "/".join(parts) != rel or rel == MANIFEST):
        raise IndexFormatError(
            f"manifest of {where} lists {rel!r}, which is not a path inside the index")
    return rel
