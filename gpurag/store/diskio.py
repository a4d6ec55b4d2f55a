"""Operating-system write errors that name what was being written.

Libraries that write through their own streams (Arrow, NumPy's ``tofile``) raise an
``OSError`` without a file name, and NumPy's short write without an errno; the command line
then cannot say where the disk filled up. :func:`naming` attaches the path being written and
reads a short write on a (nearly) full filesystem as ``ENOSPC``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

NEARLY_FULL_BYTES = 1 << 20


def existing_parent(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int | None:
    """Free bytes on the filesystem holding ``path`` (None when it cannot be told)."""
    try:
        return shutil.disk_usage(existing_parent(path)).free
    except OSError:
        return None


def with_path(exc: OSError, path: Path) -> OSError:
    """``exc`` naming ``path`` when it names no file; a full disk reads as ``ENOSPC``."""
    if exc.filename is not None or isinstance(exc, BrokenPipeError):
        return exc
    code = exc.errno
    text = " ".join(str(exc).split())
    free = free_bytes(path)
    if code is None and ("No space left" in text or (free is not None
                                                     and free < NEARLY_FULL_BYTES)):
        code = errno.ENOSPC
    return OSError(code, exc.strerror or (os.strerror(code) if code else text), str(path))


@contextlib.contextmanager
def naming(path: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raise an ``OSError`` without a file name as one naming ``path``."""
    try:
        yield
    except OSError as exc:
        named = with_path(exc, Path(path))
        if named is exc:
            raise
        raise named from exc


def describe_os_error(exc: OSError) -> str:
    """One line for an operating-system error that reached the command line: what failed, on
    which path, and for a full disk how much space is free there."""
    path = os.fsdecode(exc.filename) if exc.filename is not None else None
    reason = exc.strerror or " ".join(str(exc).split())
    if exc.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc):
        where = f" writing {path}" if path else ""
        free = free_bytes(path) if path else None
        room = f" ({free / 2**20:.1f} MiB free there)" if free is not None else ""
        return (f"no space left on the device{where}{room}: free some space and run the "
                "command again (a build resumes where it stopped; a commit needs room for the "
                "old and the new version side by side)")
    if path:
        return f"cannot write or read {path}: {reason}"
    return reason
