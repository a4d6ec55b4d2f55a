"""The checkpoint parts of a work folder: written durably, checked before a resume trusts them.

A part is written to a temporary name, flushed to disk and renamed into place before
``state.json`` counts it, so a counted part is whole even after a power loss. A resume still
checks the parts ``state.json`` counts (a disk that filled up under an older build, a copied
or damaged folder): the stage is cut back to the parts before the first unreadable one, which
a rerun makes again, instead of failing on it at every rerun.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow.parquet as pq

from gpurag.pipeline.workdir import WorkDir
from gpurag.store.diskio import naming

log = logging.getLogger(__name__)

EXTRACT_KINDS = ("mentions", "relations", "descriptions")
OPTIONAL_KINDS = ("descriptions",)  # written only where a batch has any


def chunk_part(i: int) -> str:
    return f"chunks/part-{i:05d}.parquet"


def emb_part(i: int) -> str:
    return f"emb/part-{i:05d}.npy"


def extract_part(kind: str, i: int) -> str:
    return f"extract/{kind}-{i:05d}.parquet"


def write_durably(work: WorkDir, rel: str, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write the work folder's file ``rel`` through ``write(file)``: to a temporary name,
    flushed to disk, then renamed into place (an error such as a full disk names ``rel``)."""
    final = work.path(rel)
    tmp = final.with_name(final.name + ".tmp")
    with naming(final):
        try:
            with open(tmp, "wb") as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(final.parent)
    return final


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a folder be opened
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def parquet_rows(path: Path) -> int | None:
    """The rows of a whole Parquet file at ``path``, or None when it is missing or cut short."""
    try:
        return pq.read_metadata(path).num_rows
    except (OSError, ValueError):  # ArrowInvalid is a ValueError
        return None


def npy_rows(path: Path) -> int | None:
    """The rows of a whole ``.npy`` file at ``path``, or None when it is missing or cut short."""
    try:
        return int(np.load(path, mmap_mode="r").shape[0])
    except (OSError, ValueError):
        return None


def count_chunk_part(stage: dict[str, Any], units: int, docs: int, duplicates: int,
                     reach: int | None = None) -> None:
    """Count the next chunk+embed part in ``stage``, with the totals after it (``marks``),
    so a resume can cut the stage back to any part, and the last input file the part depends
    on (``reach``: kept only while every part has one)."""
    stage["parts"] += 1
    stage["units"] += units
    stage["docs"] += docs
    stage["duplicates"] += duplicates
    stage.setdefault("marks", []).append([stage["units"], stage["docs"], stage["duplicates"]])
    reached = stage.get("reach", [])
    if reach is None or len(reached) != stage["parts"] - 1:
        stage.pop("reach", None)
    else:
        stage["reach"] = [*reached, int(reach)]


def keep_unchanged_files(files: list[list[str]]):
    """For :class:`WorkDir`'s ``partial``: when only the input files changed, the
    chunk+embed stage cut back to its parts made from the files before the first changed,
    added or removed one (None: not possible, the stage is redone)."""
    new_files = [list(f) for f in files]

    def cut(work: WorkDir, stage: dict[str, Any], old: dict[str, Any],
            new: dict[str, Any]) -> dict[str, Any] | None:
        if {k for k in set(old) | set(new) if old.get(k) != new.get(k)} != {"source"}:
            return None
        old_files, reach = stage.get("source_files"), stage.get("reach")
        n = int(stage.get("parts") or 0)
        if (not isinstance(old_files, list) or not isinstance(reach, list)
                or len(reach) != n or len(stage.get("marks") or []) != n):
            return None  # an older build's folder
        first = 0
        while (first < min(len(old_files), len(new_files))
               and list(old_files[first]) == new_files[first]):
            first += 1
        keep = 0
        while keep < n and int(reach[keep]) < first:
            keep += 1
        if not keep:
            return None
        if first < len(new_files) and first < len(old_files) and \
                old_files[first][0] == new_files[first][0]:
            what = f"{new_files[first][0]} changed"
        elif first < len(new_files):
            what = f"{new_files[first][0]} was added"
        else:
            what = f"{old_files[first][0]} was removed"
        _cut_chunk_parts(work, stage, keep)
        stage["source_files"] = new_files
        log.warning("resuming the build in %s after %d unchanged files (%d parts); %s, so "
                    "chunk+embed redoes from there (and extraction from the start)",
                    work.root, first, keep, what)
        return stage

    return cut


def first_bad_chunk_part(work: WorkDir, n: int) -> int | None:
    """The first of the ``n`` counted chunk+embed parts that is not whole (None: all are)."""
    for i in range(n):
        rows = parquet_rows(work.root / chunk_part(i))
        if rows is None or npy_rows(work.root / emb_part(i)) != rows:
            return i
    return None


def first_bad_extract_part(work: WorkDir, n: int) -> int | None:
    """The first of the ``n`` counted extraction parts that is not whole (None: all are)."""
    for i in range(n):
        for kind in EXTRACT_KINDS:
            path = work.root / extract_part(kind, i)
            if kind in OPTIONAL_KINDS and not path.exists():
                continue
            if parquet_rows(path) is None:
                return i
    return None


def repair(work: WorkDir) -> list[str]:
    """Cut each stage of ``work`` back to the parts before its first damaged one; what was
    cut, one line each (also logged)."""
    said = []
    chunked = work.state.get("chunk_embed")
    if isinstance(chunked, dict) and chunked.get("parts"):
        bad = first_bad_chunk_part(work, int(chunked["parts"]))
        if bad is not None:
            said.append(_cut_chunk_embed(work, chunked, bad))
    extracted = work.state.get("extract")
    if isinstance(extracted, dict) and extracted.get("parts"):
        bad = first_bad_extract_part(work, int(extracted["parts"]))
        if bad is not None:
            said.append(_cut_extract(work, extracted, bad))
    if said:
        work.save()
    for line in said:
        log.warning("%s", line)
    return said


def _cut_chunk_embed(work: WorkDir, stage: dict[str, Any], bad: int) -> str:
    marks = stage.get("marks") or []
    keep = bad if len(marks) >= bad else 0  # a folder of an older build has no marks
    _cut_chunk_parts(work, stage, keep)
    return (f"chunk+embed checkpoint {work.root / chunk_part(bad)} is damaged (cut short or "
            f"unreadable): resuming after the {keep} whole parts before it")


def _cut_chunk_parts(work: WorkDir, stage: dict[str, Any], keep: int) -> None:
    """Cut the chunk+embed ``stage`` back to its first ``keep`` parts (0 without marks)."""
    n = int(stage["parts"])
    marks = stage.get("marks") or []
    units, docs, dups = marks[keep - 1] if keep else (0, 0, 0)
    _remove(work, (rel for i in range(keep, n) for rel in (chunk_part(i), emb_part(i))))
    _remove(work, (str(p.relative_to(work.root)) for p in work.root.glob("shards/*")))
    stage.update(parts=keep, units=units, docs=docs, duplicates=dups, done=False, report=None,
                 marks=marks[:keep])
    if isinstance(stage.get("reach"), list):
        stage["reach"] = stage["reach"][:keep]
    stage.pop("shards", None)


def _cut_extract(work: WorkDir, stage: dict[str, Any], bad: int) -> str:
    n = int(stage["parts"])
    batches = list(stage.get("batch_stats") or [])
    keep = bad if len(batches) >= n else 0
    _remove(work, (extract_part(kind, i) for i in range(keep, n) for kind in EXTRACT_KINDS))
    shards = stage.pop("shards", None) or {}
    _remove(work, (extract_part(kind, int(i)) for i in shards for kind in EXTRACT_KINDS))
    stats: dict[str, int] = {}
    for b in batches[:keep]:
        for key, value in b["stats"].items():
            stats[key] = stats.get(key, 0) + int(value)
    # part ``keep`` starts where the kept ones end (keep <= bad < n <= len(batches))
    stage.update(parts=keep, done_rows=int(batches[keep]["start"]) if keep else 0,
                 stats=stats, batch_stats=batches[:keep])
    return (f"extraction checkpoint part {bad} in {work.root / 'extract'} is damaged (cut "
            f"short or unreadable): resuming after the {keep} whole parts before it")


def _remove(work: WorkDir, rels: Iterable[str]) -> None:
    for rel in rels:
        (work.root / rel).unlink(missing_ok=True)
