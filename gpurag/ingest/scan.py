"""Walking a source folder without losing anything silently.

``Path.rglob`` skips a subfolder it cannot list without a word, so its documents vanished from
the index. :func:`walk_folder` lists every entry (hidden names and gpurag index folders left
out, as before) and keeps what it could not use: folders and entries it cannot read, dangling
links, symbolic-link loops, and links that lead outside the folder (refused unless allowed:
a link to ``/etc/passwd`` inside a corpus must not end up in an index).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

INDEX_MARKER = "manifest.json"


@dataclass
class FolderScan:
    """What a walk found: candidate files and everything it could not use."""

    entries: list[Path] = field(default_factory=list)  # regular files (or links to one)
    dangling: list[Path] = field(default_factory=list)
    loops: list[Path] = field(default_factory=list)
    outside: list[tuple[Path, str]] = field(default_factory=list)  # (link, where it leads)
    unreadable: list[tuple[Path, str]] = field(default_factory=list)  # (path, why)

    def problem_counts(self) -> dict[str, int]:
        """How many of each problem, in words (for an error message)."""
        counts = {"unreadable folders or entries": len(self.unreadable),
                  "dangling links": len(self.dangling), "symbolic-link loops": len(self.loops),
                  "links outside the folder": len(self.outside)}
        return {k: v for k, v in counts.items() if v}

    def report_to(self, report) -> None:
        """Record every problem in an :class:`~gpurag.ingest.readers.IngestReport`."""
        for path, why in self.unreadable:
            report.skip("unreadable folder" if _is_dir(path) else "unreadable file",
                        str(path), why)
        for link in self.dangling:
            report.warn("dangling link", str(link), f"points to missing {link_target(link)}")
        for link in self.loops:
            report.warn("symbolic-link loop", str(link),
                        f"points to {link_target(link)}, which leads back to itself")
        for link, target in self.outside:
            report.skip("link outside the folder", str(link),
                        f"points to {target}; pass --follow-outside-links (or set "
                        "follow_outside_links) to read it")


def link_target(link: Path) -> str:
    """Where a symbolic link points, as written ("?" when unreadable)."""
    try:
        return str(link.readlink())
    except OSError:
        return "?"


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def walk_folder(src: Path, follow_outside_links: bool = False) -> FolderScan:
    """Every regular file under ``src`` (links to folders are not followed, as before), in a
    stable order, with what could not be used."""
    scan = FolderScan()
    root = src.resolve()

    def failed(exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename else src
        scan.unreadable.append((where, exc.strerror or str(exc)))

    for folder, dirs, names in os.walk(src, onerror=failed, followlinks=False):
        if INDEX_MARKER in names:  # a gpurag index inside the corpus: not documents
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        base = Path(folder)
        for name in sorted(names):
            if name.startswith("."):
                continue
            p = base / name
            _classify(p, root, follow_outside_links, scan)
    scan.entries.sort()
    return scan


def _classify(p: Path, root: Path, follow_outside_links: bool, scan: FolderScan) -> None:
    try:
        st = os.stat(p)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            scan.loops.append(p)
        elif p.is_symlink() and exc.errno == errno.ENOENT:
            scan.dangling.append(p)
        else:
            scan.unreadable.append((p, exc.strerror or str(exc)))
        return
    if not stat.S_ISREG(st.st_mode):
        return  # FIFOs, sockets, devices: not documents (as before)
    if p.is_symlink() and not follow_outside_links:
        target = p.resolve()
        if not _inside(target, root):
            scan.outside.append((p, str(target)))
            return
    scan.entries.append(p)
