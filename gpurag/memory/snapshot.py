"""The compacted state of a memory (vocabulary and tags), written atomically.

Files go to ``.compact.tmp`` beside the target, are fsynced, then ``snapshot.json`` (counts and
file sizes) last; the folder replaces ``compact`` by two renames, and a reader finding only
``.compact.old`` (a writer killed between them) uses that. *Optional* arrays (the scale index,
:mod:`gpurag.memory.scale_store`) are written and swapped in the same way, with their size
and CRC-32 under ``"optional"``: a damaged one does not make the snapshot unreadable, its
reader checks it with :func:`verify_optional` and rebuilds what it held. The index store's
writer checks the index layout, which a memory snapshot does not have, so this one is separate
and small.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpurag.errors import IndexFormatError
from gpurag.store.writer import fsync_dir

META = "snapshot.json"


def crc32_file(path: Path, chunk: int = 1 << 24) -> int:
    """CRC-32 of a file's bytes."""
    crc = 0
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            crc = zlib.crc32(block, crc)
    return crc


def write_snapshot(target: Path, tables: dict[str, pd.DataFrame],
                   arrays: dict[str, np.ndarray], counts: dict[str, int],
                   optional: dict[str, np.ndarray] | None = None,
                   extra: dict[str, Any] | None = None) -> None:
    """Write ``tables`` (Parquet), ``arrays`` and ``optional`` arrays (.npy) and swap them into
    ``target``; ``extra`` goes into ``snapshot.json`` as it is."""
    tmp = target.parent / f".{target.name}.tmp"
    old = target.parent / f".{target.name}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, frame in tables.items():
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp / name)
    for name, arr in arrays.items():
        np.save(tmp / name, np.ascontiguousarray(arr), allow_pickle=False)
    opt = {}
    for name, arr in (optional or {}).items():
        np.save(tmp / name, np.ascontiguousarray(arr), allow_pickle=False)
        opt[name] = {"size": (tmp / name).stat().st_size, "crc32": crc32_file(tmp / name)}
    sizes = {p.name: p.stat().st_size for p in tmp.iterdir() if p.name not in opt}
    (tmp / META).write_text(json.dumps({"counts": counts, "files": sizes, "optional": opt,
                                        **(extra or {})}), encoding="utf-8")
    for p in tmp.iterdir():
        with open(p, "rb") as fh:
            os.fsync(fh.fileno())
    fsync_dir(tmp)
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.rename(target, old)
    os.rename(tmp, target)
    fsync_dir(target.parent)
    shutil.rmtree(old, ignore_errors=True)


def read_snapshot(target: Path) -> tuple[dict[str, Any], Path] | None:
    """``(meta, folder)`` of the committed snapshot, or None when there is none."""
    old = target.parent / f".{target.name}.old"
    folder = target if (target / META).exists() else old if (old / META).exists() else None
    if folder is None:
        return None
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
        for name, size in meta["files"].items():
            if (folder / name).stat().st_size != size:
                raise ValueError(f"{name} has the wrong size")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise IndexFormatError(f"memory snapshot {folder} is damaged ({exc}); delete it and "
                               "run `gpurag memory compact`") from exc
    return meta, folder



def verify_optional(folder: Path, meta: dict[str, Any], names: list[str]) -> str | None:
    """None when every optional file ``names`` of the snapshot in ``folder`` has the size and
    CRC-32 it was written with; else what is wrong with the first that does not."""
    recorded = meta.get("optional") or {}
    for name in names:
        rec = recorded.get(name)
        path = folder / name
        if rec is None:
            return f"{name} is not recorded in {META}"
        if not path.exists():
            return f"{name} is missing"
        if path.stat().st_size != rec["size"]:
            return f"{name} has {path.stat().st_size} bytes, {rec['size']} were written"
        if crc32_file(path) != rec["crc32"]:
            return f"{name} fails its CRC-32 check"
    return None
