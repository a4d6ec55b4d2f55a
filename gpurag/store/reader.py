"""Opening a committed index: checked, confined to its directory, and pinned to one version.

Opening takes a directory descriptor of the index, reads the manifest through it and opens every
listed file through it too, so all of them come from the one directory a commit put in place
(a commit swaps directories, never files). The open descriptors keep that version's files alive
after a rebuild replaces and deletes them; reads go through ``/proc/self/fd`` links gathered in
a private view folder (:attr:`IndexDir.path`), so an :class:`IndexDir` held across a rebuild
keeps reading its own version. An open that races a commit (its directory deleted under it) starts
again on the new version. Without ``/proc/self/fd`` the view is the directory itself.

Every check names the file: manifest keys must be plain paths inside the index (no ``..``,
absolute paths or symlinks), the required layout must be present, sizes must match, and content
is checked (see :mod:`gpurag.store.manifest`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpurag.errors import IndexFormatError
from gpurag.store import layout
from gpurag.store.lock import writer_active
from gpurag.store.manifest import Manifest, check_content, parse_manifest
from gpurag.store.parts import parts_of

_PROC_FD = Path("/proc/self/fd")
_ATTEMPTS = 50
_VIEW_PREFIX = "gpurag-view-"
_swept = False
T = TypeVar("T")


class _MovedError(Exception):
    """The directory being opened was replaced by a commit: open again."""


class IndexDir:
    """Read access to one committed version of an index directory."""

    def __init__(self, root: Path, manifest: Manifest, view: Path | None = None,
                 fds: list[int] | None = None) -> None:
        self.root = root
        self.path = view or root
        self.manifest = manifest
        self._finalizer = weakref.finalize(self, _release, list(fds or ()),
                                           view if view != root else None, os.getpid())

    def has(self, rel: str) -> bool:
        return rel in self.manifest.files

    def deleted_chunks(self) -> np.ndarray:
        """The sorted ids of the chunks local deletes removed (:data:`~gpurag.store.layout.
        DELETED_CHUNKS`; empty when there are none). Their rows stay in the chunk table and
        the passage vectors; :meth:`table` gives them blank and queries never return them."""
        return self.deleted_rows(layout.DELETED_CHUNKS)

    def deleted_rows(self, rel: str) -> np.ndarray:
        """The sorted row ids a tombstone array ``rel`` lists (empty when it is absent)."""
        held = self.__dict__.setdefault("_deleted", {})
        if rel not in held:
            rows = np.zeros(0, np.int64)
            if self.has(rel):
                arr = self.array(rel, mmap=False)
                if arr.ndim != 1 or arr.dtype.kind not in "iu" or (
                        arr.size and (int(arr[0]) < 0 or bool(np.any(arr[1:] <= arr[:-1])))):
                    raise IndexFormatError(f"corrupt array {self.root / rel}: not sorted "
                                           "distinct row ids")
                rows = arr.astype(np.int64)
            held[rel] = rows
        return held[rel]

    def searchable(self, rel: str):
        """The vector index ``rel`` as queries search it: :meth:`faiss`, without the rows
        its tombstones list (:class:`~gpurag.vectors.masked.MaskedIndex`: never returned,
        decoded as zero vectors)."""
        from gpurag.vectors.masked import masked

        index = self.faiss(rel)
        tomb = layout.TOMBSTONES.get(rel)
        gone = self.deleted_rows(tomb) if tomb else np.zeros(0, np.int64)
        if gone.size and int(gone[-1]) >= int(index.ntotal):
            raise IndexFormatError(f"index {self.root} is inconsistent: {tomb} names rows "
                                   f"outside [0, {index.ntotal})")
        return masked(index, gone)

    def live_chunks(self, n: int) -> np.ndarray:
        """``(n,)`` bool: which of the ``n`` chunk ids are not deleted."""
        live = np.ones(n, bool)
        gone = self.deleted_chunks()
        if gone.size and int(gone[-1]) >= n:
            raise IndexFormatError(f"index {self.root} is inconsistent: "
                                   f"{layout.DELETED_CHUNKS} names chunks outside [0, {n})")
        live[gone] = False
        return live

    def file(self, rel: str) -> Path:
        """The path to read ``rel`` of this version from."""
        return self.path / rel

    def faiss(self, rel: str):
        """The FAISS index ``rel`` of this version; errors name the index's own file. With
        appended parts (local inserts' new vectors) a :class:`~gpurag.vectors.parted.
        PartedIndex` over all of them, searched as one index."""
        from gpurag.vectors.faiss_index import load_index

        pieces = [load_index(self.file(name), shown=self.root / name)
                  for name in self.parts(rel)]
        if len(pieces) == 1:
            return pieces[0]
        from gpurag.vectors.parted import PartedIndex

        return PartedIndex(pieces[0], pieces[1:])

    def decoded(self, name: str) -> np.ndarray:
        """Float32 vectors of the one FAISS file ``name`` (a base or one part, not the parts
        after it), decoded from its codec."""
        from gpurag.vectors.codec import decode_all
        from gpurag.vectors.faiss_index import load_index

        return decode_all(load_index(self.file(name), shown=self.root / name))

    def parts(self, rel: str) -> list[str]:
        """``rel`` and its appended parts (:mod:`gpurag.store.parts`), in reading order."""
        return [rel, *parts_of(self.manifest.files, rel)]

    def table(self, rel: str, columns: list[str] | None = None) -> pd.DataFrame:
        """Table ``rel`` (its parts concatenated)."""
        table = self.arrow_table(rel, columns)
        try:
            return table.to_pandas()
        except Exception as exc:  # e.g. a part's pandas metadata that does not parse
            raise IndexFormatError(f"corrupt table {self.root / rel}: {exc}") from exc

    def arrow_table(self, rel: str, columns: list[str] | None = None) -> pa.Table:
        """Table ``rel`` as Arrow (its parts concatenated; the schema, pandas metadata
        included, is the first file's). Chunks a local delete removed are blank in the chunk
        table and absent from the stored extraction and the mention and relation tables
        (:data:`CHUNK_KEYED`; their rows are still in the files)."""
        by_chunk = rel in CHUNK_KEYED and self.deleted_chunks().size
        wanted = columns
        if by_chunk and columns is not None and "chunk" not in columns:
            columns = [*columns, "chunk"]
        tables = []
        for name in self.parts(rel):
            try:
                tables.append(pq.read_table(self.file(name), columns=columns))
            except Exception as exc:
                raise IndexFormatError(f"corrupt table {self.root / name}: {exc}") from exc
        if len(tables) == 1:
            table = tables[0]
        else:
            try:
                table = pa.concat_tables(tables)
            except Exception as exc:
                raise IndexFormatError(f"corrupt table {self.root / rel}: its parts do not "
                                       f"agree ({exc})") from exc
        if rel == layout.CHUNKS and self.deleted_chunks().size:
            table = blanked_chunks(table, ~self.live_chunks(len(table)))
        elif by_chunk and "chunk" in table.schema.names:
            chunk = table.column("chunk").to_numpy().astype(np.int64)
            gone = self.deleted_chunks()
            pos = np.minimum(np.searchsorted(gone, chunk), len(gone) - 1)
            table = table.filter(pa.array(gone[pos] != chunk))
            if wanted is not None:
                table = table.select(wanted)
        return table

    def array(self, rel: str, mmap: bool = True) -> np.ndarray:
        """Array ``rel`` (memory-mapped when ``mmap`` and it has no parts; parts are
        concatenated along the first axis)."""
        arrays = []
        for name in self.parts(rel):
            try:
                arrays.append(np.load(self.file(name), mmap_mode="r" if mmap else None,
                                      allow_pickle=False))
            except Exception as exc:
                raise IndexFormatError(f"corrupt array {self.root / name}: {exc}") from exc
        if len(arrays) == 1:
            return arrays[0]
        if any(a.dtype != arrays[0].dtype or a.shape[1:] != arrays[0].shape[1:]
               for a in arrays):
            raise IndexFormatError(f"corrupt array {self.root / rel}: its parts do not agree "
                                   "in dtype or shape")
        return np.concatenate(arrays)

    def close(self) -> None:
        """Release the pinned files now (also done when the object is collected)."""
        self._finalizer()


BLANKED_COLUMNS = ("chunk_id", "doc_id", "title", "text")
# Tables by chunk a local delete keeps as stored: a reader never sees a deleted chunk's rows
# (the stored extraction, and the mention and relation tables of the graph)
CHUNK_KEYED = (layout.EXTRACT_MENTIONS, layout.EXTRACT_RELATIONS, layout.EXTRACT_DESCRIPTIONS,
               layout.MENTIONS, layout.RELATIONS)


def blanked_chunks(table: pa.Table, gone: np.ndarray) -> pa.Table:
    """The chunk ``table`` with the rows ``gone`` (bool) blank: empty ``chunk_id``,
    ``doc_id``, ``title`` and ``text`` (a deleted chunk keeps its row, so ids stay rows)."""
    import pyarrow.compute as pc

    mask = pa.array(gone)
    for name in BLANKED_COLUMNS:
        at = table.schema.get_field_index(name)
        if at < 0:
            continue
        field = table.schema.field(at)
        try:
            col = pc.if_else(mask, pa.scalar("", type=field.type), table.column(at))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
            col = pc.if_else(mask, pa.scalar(""), table.column(at).cast(pa.string()))
            field = field.with_type(pa.string())
        table = table.set_column(at, field, col)
    return table


def _release(fds: list[int], view: Path | None, owner: int | None = None) -> None:
    if view is not None and owner in (None, os.getpid()):  # a forked child leaves it alone
        shutil.rmtree(view, ignore_errors=True)
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def open_index_dir(path: str | os.PathLike, verify: bool = False) -> IndexDir:
    """Open the index at ``path`` (``verify``: sha256 of every file, not only the small ones)."""
    target = Path(path).resolve()
    return _retrying(target, lambda dirfd, fds: _open_files(target, dirfd, fds, verify))


def current_manifest(path: str | os.PathLike) -> Manifest:
    """The checked manifest of the version at ``path`` now, read as :func:`open_index_dir`
    reads it, its files neither opened nor checked (for a caller whose update opens and checks
    them itself, under its lock)."""
    target = Path(path).resolve()

    def read(dirfd: int, fds: list[int]) -> Manifest:
        manifest = _manifest_in(target, dirfd, fds)
        _release(fds, None)
        fds.clear()
        return manifest

    return _retrying(target, read)


def _retrying(target: Path, read: Callable[[int, list[int]], T]) -> T:
    """``read(dirfd, fds)`` of the directory at ``target``, again on the new version when a
    commit moved it meanwhile."""
    for _ in range(_ATTEMPTS):
        _recover_interrupted_commit(target)
        try:
            return _open_once(target, read)
        except _MovedError:
            time.sleep(0.01)
    raise IndexFormatError(f"index {target} kept changing while it was opened: try again")


def _recover_interrupted_commit(target: Path) -> None:
    """A writer killed between the two renames of a commit leaves only ``.<name>.old``."""
    backup = layout.sibling(target, layout.OLD_SUFFIX)
    if not target.exists() and backup.is_dir() and not writer_active(target):
        with contextlib.suppress(OSError):
            os.rename(backup, target)


def _same_dir(dirfd: int, target: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(dirfd), os.stat(target))
    except OSError:
        return False


def _open_once(target: Path, read: Callable[[int, list[int]], T]) -> T:
    try:
        dirfd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        if layout.sibling(target, layout.OLD_SUFFIX).exists():  # mid two-rename commit
            raise _MovedError() from None
        busy = " (a build is writing it now)" if writer_active(target) else ""
        raise IndexFormatError(f"no index at {target}: not a directory{busy}") from None
    except NotADirectoryError:
        raise IndexFormatError(f"no index at {target}: not a directory") from None
    fds: list[int] = []
    try:
        return read(dirfd, fds)
    except BaseException:
        _release(fds, None)
        raise
    finally:
        os.close(dirfd)  # the open files pin the version, not the directory


def _manifest_in(target: Path, dirfd: int, fds: list[int]) -> Manifest:
    """The manifest of the directory ``dirfd``, opened inside it (its fd added to ``fds``) and
    checked: a regular file, valid, its paths plain and inside, the required layout listed."""
    try:
        mfd = _open_inside(dirfd, layout.MANIFEST)
    except FileNotFoundError:
        if not _same_dir(dirfd, target):
            raise _MovedError() from None
        raise IndexFormatError(
            f"{target} is not a gpurag index: {layout.MANIFEST} is missing") from None
    fds.append(mfd)
    if not stat.S_ISREG(os.fstat(mfd).st_mode):  # a FIFO would hang a reader, a folder fail
        raise IndexFormatError(f"{target} is not a gpurag index: its {layout.MANIFEST} is not "
                               "a regular file")
    manifest = parse_manifest(_read_all(mfd), target)
    for rel in manifest.files:
        layout.check_relpath(rel, target)
    layout.check_file_set(manifest.files, manifest.config, target)
    return manifest


def _open_files(target: Path, dirfd: int, fds: list[int], verify: bool) -> IndexDir:
    manifest = _manifest_in(target, dirfd, fds)
    by_rel: dict[str, int] = {layout.MANIFEST: fds[-1]}
    for rel, meta in manifest.files.items():
        try:
            fd = _open_inside(dirfd, rel)
        except FileNotFoundError:
            if not _same_dir(dirfd, target):
                raise _MovedError() from None
            raise IndexFormatError(f"index {target} is corrupt: {rel} is missing") from None
        fds.append(fd)
        by_rel[rel] = fd
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IndexFormatError(f"index {target} is corrupt: {rel} is not a regular file")
        if st.st_size != meta.get("bytes"):
            if not _same_dir(dirfd, target):
                raise _MovedError()
            raise IndexFormatError(f"index {target} is corrupt: {rel} has {st.st_size} bytes, "
                                   f"manifest says {meta.get('bytes')}")
        check_content(fd, rel, meta, target, full=verify)
    return IndexDir(target, manifest, _make_view(target, by_rel), fds)


def _open_inside(dirfd: int, rel: str) -> int:
    """Open ``rel`` below ``dirfd`` refusing symlinks at every step (so nothing leads outside)."""
    parts = rel.split("/")
    cur = dirfd
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=cur)
            if cur != dirfd:
                os.close(cur)
            cur = nxt
        # O_NONBLOCK: a FIFO planted under a data file's name must not hang the open.
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=cur)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise IndexFormatError(
            f"index file {rel} cannot be opened inside the index ({exc.strerror}); "
            "symlinks are not followed") from None
    finally:
        if cur != dirfd:
            os.close(cur)


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0)


def _make_view(target: Path, by_rel: dict[str, int]) -> Path | None:
    """A private folder of ``/proc/self/fd`` links to the pinned files, or None."""
    global _swept
    if not _PROC_FD.is_dir():
        return None
    if not _swept:
        _swept = True
        _sweep_views()
    try:
        view = Path(tempfile.mkdtemp(prefix=f"{_VIEW_PREFIX}{os.getpid()}-{target.name[:40]}-",
                                     dir=_view_base()))
    except OSError:
        return None
    try:
        for rel, fd in by_rel.items():
            link = view / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(f"{_PROC_FD}/{fd}", link)
    except OSError:
        shutil.rmtree(view, ignore_errors=True)
        return None
    return view


def _view_base() -> str:
    """Where view folders go: a memory file system when there is one (cheap to remove)."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()


def _sweep_views() -> None:
    """Remove view folders over an hour old whose process is gone (checked once a process)."""
    try:
        entries = list(Path(_view_base()).glob(f"{_VIEW_PREFIX}*"))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        try:
            pid = int(entry.name[len(_VIEW_PREFIX):].split("-", 1)[0])
            if now - entry.lstat().st_mtime < 3600:
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except (ValueError, OSError):
            continue
