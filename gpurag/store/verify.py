"""Read back what a commit is about to seal: every file must be complete in its own format.

A write that failed without raising (a full disk under a library that only prints its close
error) leaves a short or empty file; sealing it would replace a good index by one that fails
on every query. Each file is read back by its format before the manifest is written: Parquet
footer and metadata, ``.npy`` header against the file size, FAISS header and vector count,
JSON text. Cheap: metadata and headers only (FAISS files are memory-mapped).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from gpurag.errors import WriteError


def check_written(path: Path, rel: str) -> None:
    """Raise :class:`WriteError` unless ``path`` (``rel`` in the index) reads back whole."""
    try:
        _check(path)
    except WriteError:
        raise
    except Exception as exc:  # any reader's complaint means the file is not what was written
        raise WriteError(f"{rel} ({path}) did not read back after writing it "
                         f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                         "the previous version is kept") from exc


def _check(path: Path) -> None:
    size = path.stat().st_size
    name = path.name
    if name.endswith(".parquet"):
        if size < 12:
            raise ValueError(f"{size} bytes is shorter than any Parquet file")
        with open(path, "rb") as fh:
            head = fh.read(4)
            fh.seek(-4, os.SEEK_END)
            tail = fh.read(4)
        if head != b"PAR1" or tail != b"PAR1":
            raise ValueError("no Parquet magic at both ends")
        pq.ParquetFile(path).metadata  # noqa: B018 - parses the footer
    elif name.endswith(".npy"):
        fmt = np.lib.format
        with open(path, "rb") as fh:
            version = fmt.read_magic(fh)
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = read(fh)
            expected = fh.tell() + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if size != expected:
            raise ValueError(f"{size} bytes, a {shape} {dtype} array needs {expected}")
    elif name.endswith(".faiss"):
        if size == 0:
            raise ValueError("empty file")
        from gpurag.vectors.faiss_index import load_index

        load_index(path)
    elif name.endswith(".json"):
        json.loads(path.read_text(encoding="utf-8"))
