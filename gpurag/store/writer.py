"""Atomic writing of an index directory under a write lock."""

from __future__ import annotations

import ctypes
import datetime as dt
import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpurag.errors import IndexFormatError
from gpurag.store import layout
from gpurag.store.lock import WriteLock
from gpurag.store.manifest import Manifest, file_record, parse_manifest
from gpurag.store.parts import ROWS, merge_tail, part_number, part_rel, parts_of
from gpurag.store.reader import IndexDir, open_index_dir
from gpurag.store.verify import check_written

__all__ = ["IndexDir", "IndexWriter", "check_replaceable", "open_index_dir", "write_extra"]


def _gpurag_version() -> str:
    from gpurag._version import __version__

    return __version__


class IndexWriter:
    """Collects files in ``.<name>.tmp`` beside the target and swaps it into place on commit.

    Holds the target's :class:`WriteLock` (its own, or the build's passed as ``lock``). The swap
    is one atomic exchange of the two directories where the kernel offers it (Linux
    ``renameat2``), so the target path never goes missing; elsewhere two renames, which readers
    wait out. The previous version is then deleted; readers that opened it keep their files.
    """

    def __init__(self, target: str | os.PathLike, lock: WriteLock | None = None) -> None:
        self.target = Path(target).resolve()
        self.lock = lock if lock is not None else WriteLock(self.target)
        self._own_lock = lock is None
        self.tmp = layout.sibling(self.target, layout.TMP_SUFFIX)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        backup = layout.sibling(self.target, layout.OLD_SUFFIX)
        if backup.exists():  # left by a writer killed during a two-rename commit
            if not self.target.exists():
                os.rename(backup, self.target)
            else:
                shutil.rmtree(backup)
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir()
        self._kept: dict[str, dict[str, Any]] = {}  # rel -> the stored record, reused
        self._rows: dict[str, int] = {}  # appended part -> its rows (the merge rule reads them)

    def path(self, rel: str) -> Path:
        """Where to write ``rel`` of the new version (a file kept from the stored version is
        unlinked first: a write never reaches through a link into a committed version)."""
        p = self.tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if rel in self._kept:
            del self._kept[rel]
            p.unlink()
        return p

    def keep(self, d: IndexDir, rel: str) -> None:
        """Carry file ``rel`` of the stored version ``d`` into the new one unchanged: a hard
        link to the same inode (a copy where the file system cannot link), its manifest
        record reused."""
        dst = self.path(rel)
        pinned = d.file(rel)
        try:
            os.link(d.root / rel, dst)
            if not os.path.samestat(os.stat(dst), os.stat(pinned)):  # not the pinned version
                dst.unlink()
                raise OSError("the stored file changed")
        except OSError:
            shutil.copyfile(pinned, dst)
        self._kept[rel] = dict(d.manifest.files[rel])

    def append_table(self, d: IndexDir, rel: str, frame: pd.DataFrame | pa.Table) -> None:
        """Table ``rel`` of the new version = the stored one (its files kept) and then the rows
        of ``frame`` as a new part (:mod:`gpurag.store.parts`), cast to the stored schema."""
        if not d.has(rel):
            self.write_table(rel, frame)
            return
        schema = pq.read_schema(d.file(rel))
        table = (frame if isinstance(frame, pa.Table)
                 else pa.Table.from_pandas(frame, preserve_index=False))
        table = table.select(schema.names).cast(schema)
        self._append(d, rel, table, len(table), lambda names: pa.concat_tables(
            [pq.read_table(d.file(n)).cast(schema) for n in names] + [table]),
            lambda data, path: pq.write_table(data.combine_chunks(), path, compression="zstd"))

    def append_array(self, d: IndexDir, rel: str, array: np.ndarray) -> None:
        """Array ``rel`` of the new version = the stored one (its files kept) and then
        ``array`` (rows along the first axis, cast to the stored dtype) as a new part."""
        if not d.has(rel):
            self.write_array(rel, array)
            return
        dtype = np.load(d.file(rel), mmap_mode="r", allow_pickle=False).dtype
        array = np.ascontiguousarray(array, dtype=dtype)
        self._append(d, rel, array, len(array), lambda names: np.concatenate(
            [np.load(d.file(n), allow_pickle=False) for n in names] + [array]),
            lambda data, path: np.save(path, data, allow_pickle=False))

    def append_faiss(self, d: IndexDir, rel: str, vectors: np.ndarray,
                     make: Callable[[np.ndarray], Any]) -> None:
        """FAISS index ``rel`` of the new version = the stored one (its files kept) and then
        ``vectors`` as a new part, the index ``make(vectors)`` (a part absorbing trailing
        parts gets their decoded vectors first: :mod:`gpurag.vectors.parted`)."""
        from gpurag.vectors.faiss_index import save_index

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._append(d, rel, vectors, len(vectors), lambda names: np.concatenate(
            [d.decoded(n) for n in names] + [vectors]),
            lambda data, path: save_index(make(data), path))

    def append_part(self, d: IndexDir, rel: str, array: np.ndarray,
                    merged: Callable[[list[np.ndarray]], np.ndarray]) -> list[str]:
        """Array ``rel`` of the new version as parts only (no base file: a delta a full
        write drops): the stored parts kept and ``array`` a new part, which absorbs the
        trailing parts no longer than it (:func:`~gpurag.store.parts.merge_tail`); ``merged``
        combines the absorbed parts' arrays and ``array``, oldest first. Returns the parts of
        the new version, in order."""
        array = np.ascontiguousarray(array)
        self._append(d, rel, array, len(array), lambda names: merged(
            [np.load(d.file(n), allow_pickle=False) for n in names] + [array]),
            lambda data, path: np.save(path, np.ascontiguousarray(data), allow_pickle=False))
        return parts_of([*self._kept, *self._rows], rel)

    def _append(self, d: IndexDir, rel: str, new, rows: int, merged, save) -> None:
        parts = parts_of(d.manifest.files, rel)
        take = merge_tail(parts, d.manifest.files, rows) if rows else []
        base = [rel] if d.has(rel) else []  # a delta of parts only has no base file
        for name in [*base, *parts[: len(parts) - len(take)]]:
            self.keep(d, name)
        if not rows:
            return
        last = part_number(parts[-1])[1] if parts else 0  # type: ignore[index]
        name = part_rel(rel, last + 1)
        data = merged(take) if take else new
        save(data, self.path(name))
        self._rows[name] = len(data)

    def write_table(self, rel: str, frame: pd.DataFrame | pa.Table) -> None:
        table = frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(
            frame, preserve_index=False
        )
        # One chunk per column: Parquet cuts pages at the input's chunk boundaries, so the
        # same rows arriving in other pieces (a build's batches, an update's stored table plus
        # its new rows) would give other bytes, and compact would not equal the full build.
        pq.write_table(table.combine_chunks(), self.path(rel), compression="zstd")

    def write_array(self, rel: str, array: np.ndarray) -> None:
        np.save(self.path(rel), np.ascontiguousarray(array), allow_pickle=False)

    def commit(self, config: dict[str, Any], counts: dict[str, int], components: dict[str, str],
               extra: dict[str, Any] | None = None) -> Path:
        """Check the layout, write the manifest with checksums, fsync, swap into place."""
        if not self.lock.held:
            raise IndexFormatError(f"cannot commit {self.target}: the write lock was released")
        files = {}
        for p in sorted(self.tmp.rglob("*")):
            if p.is_symlink() or not p.is_file():
                continue
            rel = p.relative_to(self.tmp).as_posix()
            kept = self._kept.get(rel)
            if kept is not None and p.stat().st_size == kept.get("bytes"):
                files[rel] = kept  # linked from the stored version: checked when it was sealed
                continue
            check_written(p, rel)  # a short file (a write that failed quietly) is never sealed
            files[rel] = file_record(p)
            if rel in self._rows:
                files[rel][ROWS] = self._rows[rel]
        layout.check_file_set(files, config, self.target)
        manifest = Manifest(
            gpurag_version=_gpurag_version(),
            created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            config=config,
            counts=counts,
            components=components,
            files=files,
            extra=extra or {},
        )
        manifest_path = self.tmp / layout.MANIFEST
        manifest_path.write_text(manifest.to_json(), encoding="utf-8")
        _fsync_tree(self.tmp, skip={self.tmp / rel for rel in self._kept})
        check_written(manifest_path, layout.MANIFEST)
        if self.target.exists():
            check_replaceable(self.target)
            if _exchange(self.tmp, self.target):
                old = self.tmp
            else:
                old = layout.sibling(self.target, layout.OLD_SUFFIX)
                os.rename(self.target, old)
                os.rename(self.tmp, self.target)
            fsync_dir(self.target.parent)
            shutil.rmtree(old)
        else:
            os.rename(self.tmp, self.target)
            fsync_dir(self.target.parent)
        if self._own_lock:
            self.lock.release()
        return self.target

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self._own_lock:
            self.lock.release()


def check_replaceable(target: Path) -> None:
    """Refuse to replace ``target`` unless it is a gpurag index holding only files it wrote."""
    if not target.exists():
        return
    if target.is_symlink() or not target.is_dir():
        raise IndexFormatError(f"cannot write the index to {target}: it is not a directory")
    entries = [p for p in target.rglob("*") if p.is_symlink() or not p.is_dir()]
    if not entries and not any(target.iterdir()):
        return
    manifest_path = target / layout.MANIFEST
    if not manifest_path.is_file():
        raise IndexFormatError(
            f"refusing to replace {target}: it exists and is not a gpurag index")
    try:
        ours = set(parse_manifest(manifest_path.read_bytes(), target).files)
    except IndexFormatError:  # a corrupt index: the layout's own names are ours
        ours = set(layout.REQUIRED_DENSE + layout.REQUIRED_GRAPH + layout.OPTIONAL)
    ours.add(layout.MANIFEST)

    def foreign_name(rel: str) -> bool:
        part = part_number(rel)
        return rel not in ours and (part is None or part[0] not in ours)

    foreign = sorted(p.relative_to(target).as_posix() for p in entries
                     if foreign_name(p.relative_to(target).as_posix()))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5
                                          else "")
        raise IndexFormatError(
            f"refusing to replace the index {target}: it holds files gpurag did not write "
            f"({shown}); move them out of the index directory and run the build again")


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with Linux ``renameat2(RENAME_EXCHANGE)``; False if absent."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def fsync_dir(path: Path) -> None:
    """Make a directory entry change (create, rename) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path, skip: set[Path] | frozenset[Path] = frozenset()) -> None:
    """fsync every file below ``root`` but ``skip`` (links to files already durable) and
    every directory (the entries of new files and links)."""
    for p in root.rglob("*"):
        if p.is_dir():
            fsync_dir(p)
        elif p.is_file() and p not in skip:
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
    fsync_dir(root)


def write_extra(root: str | os.PathLike, key: str, value: Any) -> Manifest:
    """Set ``extra[key]`` (informational, outside the seal) in the manifest of the index at
    ``root``, under its write lock, by an atomic replace of ``manifest.json`` (fsynced); the
    manifest written is returned. No other file changes, so the seal still holds."""
    root = Path(root)
    lock = WriteLock(root)
    try:
        target = root / layout.MANIFEST
        manifest = parse_manifest(target.read_bytes(), root)
        manifest.extra = {**manifest.extra, key: value}
        tmp = layout.sibling(root, ".manifest-tmp")
        tmp.write_text(manifest.to_json(), encoding="utf-8")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        fsync_dir(root)
    finally:
        lock.release()
    return manifest
