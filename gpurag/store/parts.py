"""Tables and arrays in parts: an update appends its rows as a new file, not a rewrite.

A table or array ``rel`` of the index (``tables/chunks.parquet``) may have parts beside it
(``tables/chunks.part00001.parquet``, ...), listed like every file in the sealed manifest;
readers concatenate ``rel`` and its parts in part-number order
(:meth:`~gpurag.store.reader.IndexDir.table`, :meth:`~gpurag.store.reader.IndexDir.array`).
A writer appending rows (:meth:`~gpurag.store.writer.IndexWriter.append_table`) hard-links the
stored files into the new version (the same inodes, their manifest records reused: nothing of
them is rewritten or hashed again) and writes only the new rows as a part. The part absorbs the
trailing parts no longer than what it holds so far (a binary-counter merge): after ``n``
appends a table has ``O(log n)`` parts and each appended row was rewritten ``O(log n)`` times,
so the cost of an append does not grow with the number of appends before it. The base file (a
full build's) is never merged: ``gpurag compact`` and every full write give one file again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

_PART = re.compile(r"^(?P<stem>.+)\.part(?P<n>\d{5})(?P<suffix>\.[A-Za-z0-9]+)$")
ROWS = "rows"  # the manifest record key of a part's row count (written by the writer)


def part_rel(rel: str, n: int) -> str:
    """The name of part ``n`` (1, 2, ...) of ``rel``."""
    suffix = PurePosixPath(rel).suffix
    return f"{rel[: len(rel) - len(suffix)]}.part{n:05d}{suffix}"


def part_number(rel: str) -> tuple[str, int] | None:
    """``(base rel, part number)`` of a part's name, None for a name that is not a part."""
    m = _PART.match(rel)
    if m is None:
        return None
    return m["stem"] + m["suffix"], int(m["n"])


def parts_of(files: Iterable[str], rel: str) -> list[str]:
    """The parts of ``rel`` among ``files``, in part-number order (``rel`` itself excluded)."""
    found = []
    for name in files:
        got = part_number(name)
        if got is not None and got[0] == rel:
            found.append((got[1], name))
    return [name for _, name in sorted(found)]


def merge_tail(parts: list[str], files: Mapping[str, Mapping[str, Any]], rows: int
               ) -> list[str]:
    """Which trailing ``parts`` a new part of ``rows`` rows absorbs: from the last one back,
    while that part holds no more rows than the new part so far (a part without a row count,
    never written by an append, is never merged)."""
    take: list[str] = []
    acc = rows
    for name in reversed(parts):
        n = files[name].get(ROWS)
        if not isinstance(n, int) or n > acc:
            break
        take.append(name)
        acc += n
    return take[::-1]
