"""One writer per index path: an exclusive ``flock`` on ``.<name>.lock`` beside the index.

The lock is held for a whole build (work folder, temporary folder and commit). A second writer
is refused at once with :class:`IndexBusyError` naming the holder; a killed holder's lock is
released by the kernel. The holder unlinks the lock file before releasing it, and an acquirer
checks that the file it locked is still the one at the path, so no two writers ever hold locks
on different files of the same name.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from gpurag.errors import IndexBusyError
from gpurag.store.layout import LOCK_SUFFIX, sibling

# A reader probing the lock holds it shared for microseconds; a writer that meets such a
# probe (a locked file with no writer record) retries for this long before giving up.
_PROBE_WAIT_S = 2.0


class WriteLock:
    """An acquired write lock on one index path; release it with :meth:`release`."""

    def __init__(self, target: str | os.PathLike) -> None:
        self.target = Path(target).resolve()
        self.path = sibling(self.target, LOCK_SUFFIX)
        self._fd: int | None = None
        self._acquire()

    def _acquire(self) -> None:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + _PROBE_WAIT_S
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                if holder or time.monotonic() > deadline:
                    raise IndexBusyError(
                        f"another gpurag build is writing {self.target} ({holder or 'lock held'},"
                        f" lock file {self.path}): wait for it to finish, or write elsewhere"
                    ) from None
                time.sleep(0.02)
                continue
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if not same:  # the previous holder unlinked it after we opened it: start again
                os.close(fd)
                continue
            record = {"pid": os.getpid(), "host": socket.gethostname(),
                      "since": time.strftime("%Y-%m-%dT%H:%M:%S")}
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(record).encode(), 0)
            except OSError as exc:  # a full disk: name the lock file, leak no descriptor
                os.close(fd)
                raise OSError(exc.errno, exc.strerror, str(self.path)) from None
            self._fd = fd
            return

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Unlink the lock file, then drop the lock (safe to call twice)."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> WriteLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"null")
    except (OSError, ValueError):
        return ""
    if not isinstance(record, dict):
        return ""
    return f"pid {record.get('pid')} on {record.get('host')} since {record.get('since')}"


def writer_active(target: Path) -> bool:
    """Whether a writer holds the lock of ``target`` now (creates nothing)."""
    try:
        fd = os.open(sibling(target, LOCK_SUFFIX), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
