"""Atomic writing of an index directory and typed readers for its files."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpurag.errors import IndexFormatError
from gpurag.store.manifest import MANIFEST, Manifest, read_manifest, sha256_file, verify_files


def _gpurag_version() -> str:
    from gpurag._version import __version__

    return __version__


class IndexWriter:
    """Collects files in ``.<name>.tmp`` beside the target and renames it into place on commit.

    The previous index stays readable until the final rename; if the process dies before, the
    target is untouched and the temporary folder is removed by the next build.
    """

    def __init__(self, target: str | os.PathLike) -> None:
        self.target = Path(target).resolve()
        self.tmp = self.target.parent / f".{self.target.name}.tmp"
        self.target.parent.mkdir(parents=True, exist_ok=True)
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir()

    def path(self, rel: str) -> Path:
        p = self.tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_table(self, rel: str, frame: pd.DataFrame | pa.Table) -> None:
        table = frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(
            frame, preserve_index=False
        )
        pq.write_table(table, self.path(rel), compression="zstd")

    def write_array(self, rel: str, array: np.ndarray) -> None:
        np.save(self.path(rel), np.ascontiguousarray(array), allow_pickle=False)

    def commit(self, config: dict[str, Any], counts: dict[str, int], components: dict[str, str],
               extra: dict[str, Any] | None = None) -> Path:
        """Write the manifest with checksums, fsync, and swap the folder into place."""
        files = {}
        for p in sorted(self.tmp.rglob("*")):
            if p.is_file():
                rel = str(p.relative_to(self.tmp))
                files[rel] = {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        manifest = Manifest(
            gpurag_version=_gpurag_version(),
            created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            config=config,
            counts=counts,
            components=components,
            files=files,
            extra=extra or {},
        )
        manifest_path = self.tmp / MANIFEST
        manifest_path.write_text(manifest.to_json(), encoding="utf-8")
        _fsync_tree(self.tmp)
        backup = self.target.parent / f".{self.target.name}.old"
        if backup.exists():
            shutil.rmtree(backup)
        if self.target.exists():
            if not (self.target / MANIFEST).exists() and any(self.target.iterdir()):
                raise IndexFormatError(
                    f"refusing to replace {self.target}: it exists and is not a gpurag index"
                )
            os.rename(self.target, backup)
        os.rename(self.tmp, self.target)
        _fsync_dir(self.target.parent)
        if backup.exists():
            shutil.rmtree(backup)
        return self.target

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(root)


class IndexDir:
    """Read access to a committed index directory."""

    def __init__(self, path: Path, manifest: Manifest) -> None:
        self.path = path
        self.manifest = manifest

    def has(self, rel: str) -> bool:
        return rel in self.manifest.files

    def table(self, rel: str, columns: list[str] | None = None) -> pd.DataFrame:
        try:
            return pq.read_table(self.path / rel, columns=columns).to_pandas()
        except Exception as exc:
            raise IndexFormatError(f"corrupt table {self.path / rel}: {exc}") from exc

    def array(self, rel: str, mmap: bool = True) -> np.ndarray:
        try:
            return np.load(self.path / rel, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise IndexFormatError(f"corrupt array {self.path / rel}: {exc}") from exc


def open_index_dir(path: str | os.PathLike, verify: bool = False) -> IndexDir:
    """Open an index directory; a crash between the two renames of a commit is recovered."""
    target = Path(path).resolve()
    backup = target.parent / f".{target.name}.old"
    if not target.exists() and backup.exists():
        os.rename(backup, target)
    manifest = read_manifest(target)
    verify_files(target, manifest, checksums=verify)
    return IndexDir(target, manifest)
