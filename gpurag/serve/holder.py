"""The served index: opened and warmed off the request path, swapped atomically on reload.

A batch takes :attr:`IndexHolder.current` once when it starts and keeps that object to the end,
so a reload lands between batches and in-flight requests finish on the index they began with.
The old index stays usable after its folder is replaced: every file it reads is loaded or
memory-mapped when it is opened and warmed (a mapping outlives the unlinked file).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gpurag.api import Index
from gpurag.runtime import Runtime

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Served:
    """One opened index and the version it is served as."""

    index: Index
    version: str
    stamp: tuple[int, int, int]
    loaded_at: float


def manifest_stamp(path: Path) -> tuple[int, int, int] | None:
    """(inode, mtime_ns, size) of ``manifest.json``: changes whenever a build commits."""
    try:
        st = os.stat(path / MANIFEST)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def index_version(index: Index) -> str:
    """``<created>-<sha256 of the manifest, 12 hex>``: the manifest lists every file's sha256,
    so equal versions mean equal contents."""
    text = index.dir.file(MANIFEST).read_bytes()  # the pinned version, not the path's latest
    return f"{index.manifest.created}-{hashlib.sha256(text).hexdigest()[:12]}"


def open_warm(path: Path, runtime: Runtime | None = None) -> Served:
    """Open the index at ``path`` on ``runtime`` and touch every lazily loaded part with one
    query."""
    stamp = manifest_stamp(path)
    index = Index.open(path, runtime=runtime)
    version = index_version(index)
    if index.retriever is not None:  # loads the graph arrays and FAISS indexes now
        index.query("warm up", k=1, mode="graph")
    index.query("warm up", k=1, mode="dense")
    return Served(index, version, stamp or (0, 0, 0), time.time())


class IndexHolder:
    """Holds the current :class:`Served`; :meth:`reload` opens a new one and swaps it in.

    ``runtime``: the parts every opened version runs on (built once at the edge; default
    the environment's)."""

    def __init__(self, path: str | os.PathLike, runtime: Runtime | None = None) -> None:
        self.path = Path(path).resolve()
        self.runtime = runtime if runtime is not None else Runtime.create()
        self._lock = threading.Lock()  # one reload at a time
        self.current: Served = open_warm(self.path, self.runtime)
        self.last_error: str | None = None

    def changed(self) -> bool:
        """True when a different manifest is committed at the path (cheap: one stat)."""
        stamp = manifest_stamp(self.path)
        return stamp is not None and stamp != self.current.stamp

    def reload(self, force: bool = False) -> tuple[bool, str]:
        """Open the committed index if it changed (or ``force``); ``(swapped, version)``.

        Blocking: call it from a worker thread. A failed open keeps the old index served and
        raises. Opening only happens while ``manifest.json`` exists, so a build's commit in
        progress (folder renamed away for an instant) is not disturbed.
        """
        with self._lock:
            if not force and not self.changed():
                return False, self.current.version
            if manifest_stamp(self.path) is None:
                raise FileNotFoundError(f"no committed index at {self.path} right now")
            new = open_warm(self.path, self.runtime)
            if new.version == self.current.version:
                self.current = Served(self.current.index, new.version, new.stamp,
                                      self.current.loaded_at)
                return False, new.version
            self.current = new  # the swap: one reference assignment
            self.last_error = None
            log.info("serving index version %s from %s", new.version, self.path)
            return True, new.version
