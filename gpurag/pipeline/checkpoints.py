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


def count_chunk_part(stage: dict[str, Any], units: int, docs: int, duplicates: int) -> None:
    """Count the next chunk+embed part in ``stage``, with the totals after it (``marks``),
    so a resume can cut the stage back to any part."""
    stage["parts"] += 1
    stage["units"] += units
    stage["docs"] += docs
    stage["duplicates"] += duplicates
    stage.setdefault("marks", []).append([stage["units"], stage["docs"], stage["duplicates"]])


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
    n = int(stage["parts"])
    marks = stage.get("marks") or []
    keep = bad if len(marks) >= bad else 0  # a folder of an older build has no marks
    units, docs, dups = marks[keep - 1] if keep else (0, 0, 0)
    _remove(work, (rel for i in range(keep, n) for rel in (chunk_part(i), emb_part(i))))
    _remove(work, (str(p.relative_to(work.root)) for p in work.root.glob("shards/*")))
    stage.update(parts=keep, units=units, docs=docs, duplicates=dups, done=False, report=None,
                 marks=marks[:keep])
    stage.pop("shards", None)
    return (f"chunk+embed checkpoint {work.root / chunk_part(bad)} is damaged (cut short or "
            f"unreadable): resuming after the {keep} whole parts before it")


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
    stage.update(parts=keep, done_rows=int(batches[keep]["start"]) if keep < len(batches)
                 and keep else 0, stats=stats, batch_stats=batches[:keep])
    return (f"extraction checkpoint {work.root / extract_part('mentions', bad)} (part {bad}) "
            f"is damaged (cut short or unreadable): resuming after the {keep} whole parts "
            "before it")


def _remove(work: WorkDir, rels: Iterable[str]) -> None:
    for rel in rels:
        (work.root / rel).unlink(missing_ok=True)
