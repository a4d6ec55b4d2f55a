"""The compacted state of a memory (vocabulary and tags), written atomically.

Files go to ``.compact.tmp`` beside the target, are fsynced, then ``snapshot.json`` (counts and
file sizes) last; the folder replaces ``compact`` by two renames, and a reader finding only
``.compact.old`` (a writer killed between them) uses that. The index store's writer checks the
index layout, which a memory snapshot does not have, so this one is separate and small.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpurag.errors import IndexFormatError
from gpurag.store.writer import fsync_dir

META = "snapshot.json"


def write_snapshot(target: Path, tables: dict[str, pd.DataFrame],
                   arrays: dict[str, np.ndarray], counts: dict[str, int]) -> None:
    """Write ``tables`` (Parquet) and ``arrays`` (.npy) and swap them into ``target``."""
    tmp = target.parent / f".{target.name}.tmp"
    old = target.parent / f".{target.name}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, frame in tables.items():
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp / name)
    for name, arr in arrays.items():
        np.save(tmp / name, np.ascontiguousarray(arr), allow_pickle=False)
    sizes = {p.name: p.stat().st_size for p in tmp.iterdir()}
    (tmp / META).write_text(json.dumps({"counts": counts, "files": sizes}), encoding="utf-8")
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

