"""``manifest.json``: format version, gpurag version, config, counts, components, checksums.

Every file is recorded with its size and sha256. Files of at least ``LARGE_FILE_BYTES`` also get
a CRC-32 per ``CRC_BLOCK`` bytes: opening an index checks the sha256 of the small files and the
block CRCs of the large ones (every byte, about 2.5x faster than sha256 and spread over threads),
so a flipped byte in any file is an error on open; ``verify=True`` checks the sha256 of every
file. The manifest seals its own ``config`` and ``files`` (see :func:`seal`).
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpurag.errors import IndexFormatError
from gpurag.store.layout import MANIFEST

FORMAT_NAME = "gpurag-index"
# 2: manifest self-checksum and block CRCs. 3: each vector set stored once, as a FAISS file of
# int8/float16 codes; surface names are the entity index. Older indexes are rebuilt.
FORMAT_VERSION = 3
READABLE_VERSIONS = (3,)
LARGE_FILE_BYTES = 8 << 20
CRC_BLOCK = 4 << 20


@dataclass
class Manifest:
    """What an index directory holds."""

    gpurag_version: str
    created: str
    config: dict[str, Any]
    counts: dict[str, int] = field(default_factory=dict)
    components: dict[str, str] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION
    checksum: str = ""

    def to_json(self) -> str:
        """The manifest text, sealed with the sha256 of its own content."""
        data = asdict(self)
        data["checksum"] = seal(data)
        return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)


SEALED_FIELDS = ("config", "files", "format", "format_version")


def seal(data: dict[str, Any]) -> str:
    """The self-checksum of a manifest: sha256 of the canonical JSON of the fields that decide
    what is read and how (``config``, ``files``, the format); counts, timings and notes are
    informational and may be annotated."""
    body = {k: data.get(k) for k in SEALED_FIELDS}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: Path, block: int = 1 << 22) -> str:
    """sha256 hex digest of a file, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            h.update(chunk)
    return h.hexdigest()


def _fd_blocks(fd: int, size: int, block: int):
    for offset in range(0, size, block):
        yield os.pread(fd, min(block, size - offset), offset)


def sha256_fd(fd: int, size: int, block: int = 1 << 22) -> str:
    """sha256 hex digest of the first ``size`` bytes of an open file."""
    h = hashlib.sha256()
    for chunk in _fd_blocks(fd, size, block):
        h.update(chunk)
    return h.hexdigest()


def crc_blocks_fd(fd: int, size: int, block: int = CRC_BLOCK) -> list[int]:
    """CRC-32 of each ``block`` bytes of an open file, blocks read and summed on threads."""
    def one(offset: int) -> int:
        return zlib.crc32(os.pread(fd, min(block, size - offset), offset))

    offsets = range(0, size, block)
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return list(pool.map(one, offsets))


def file_record(path: Path) -> dict[str, Any]:
    """What the manifest records of one file: size, sha256 and (large files) block CRCs."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        record: dict[str, Any] = {"bytes": size, "sha256": sha256_fd(fd, size)}
        if size >= LARGE_FILE_BYTES:
            record["crc32"] = {"block": CRC_BLOCK, "sums": crc_blocks_fd(fd, size, CRC_BLOCK)}
    finally:
        os.close(fd)
    return record


def check_content(fd: int, rel: str, meta: dict[str, Any], where: str | Path,
                  full: bool = False) -> None:
    """Check an open file against its manifest record: the sha256 of small files (all with
    ``full``), the block CRCs of large ones; a mismatch is an :class:`IndexFormatError`."""
    size = int(meta.get("bytes", -1))
    crc = meta.get("crc32")
    if full or not isinstance(crc, dict):
        if (full or size < LARGE_FILE_BYTES) and sha256_fd(fd, size) != meta.get("sha256"):
            raise IndexFormatError(f"index {where} is corrupt: checksum mismatch in {rel}")
        return
    block, sums = int(crc.get("block", 0)), crc.get("sums")
    if block <= 0 or not isinstance(sums, list):
        raise IndexFormatError(f"corrupt manifest of {where}: bad block checksums of {rel}")
    got = crc_blocks_fd(fd, size, block)
    if got != sums:
        bad = next((i for i, (a, b) in enumerate(zip(got, sums, strict=False)) if a != b),
                   min(len(got), len(sums)))
        raise IndexFormatError(
            f"index {where} is corrupt: checksum mismatch in {rel} (bytes from {bad * block})")


def parse_manifest(raw: bytes, where: str | Path) -> Manifest:
    """Parse and validate the bytes of ``manifest.json`` of the index at ``where``."""
    path = Path(where) / MANIFEST
    try:
        data = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IndexFormatError(f"corrupt manifest {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise IndexFormatError(f"{path} is not a gpurag index manifest")
    version = data.get("format_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise IndexFormatError(
            f"index {where} has format version {version}, this gpurag reads format versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}: rebuild it with `gpurag index`"
        )
    try:
        manifest = Manifest(**data)
    except TypeError as exc:
        raise IndexFormatError(f"corrupt manifest {path}: {exc}") from exc
    if not isinstance(manifest.checksum, str) or not manifest.checksum:
        # every format-3 manifest is sealed: an emptied checksum must not turn the check off
        raise IndexFormatError(f"corrupt manifest {path}: it has no checksum")
    if manifest.checksum != seal(data):
        raise IndexFormatError(f"corrupt manifest {path}: its content does not match its "
                               "checksum")
    files_ok = isinstance(manifest.files, dict) and all(
        isinstance(m, dict) and isinstance(m.get("bytes"), int) for m in manifest.files.values())
    if not files_ok or not isinstance(manifest.config, dict):
        raise IndexFormatError(f"corrupt manifest {path}: bad 'files' or 'config'")
    _check_unsealed(manifest, path)
    return manifest


def _check_unsealed(manifest: Manifest, path: Path) -> None:
    """The informational fields (not covered by the seal) have the types readers use."""
    def whole(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    problems = []
    if not isinstance(manifest.counts, dict) or not all(
            isinstance(k, str) and whole(v) for k, v in manifest.counts.items()):
        problems.append("'counts' must map names to whole numbers")
    if not isinstance(manifest.components, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in manifest.components.items()):
        problems.append("'components' must map names to strings")
    extra = manifest.extra
    if not isinstance(extra, dict):
        problems.append("'extra' must be a table")
    else:
        if not whole(extra.get("version", 1)):
            problems.append("extra 'version' must be a whole number")
        if not isinstance(extra.get("history", []), list):
            problems.append("extra 'history' must be a list")
        if not isinstance(extra.get("ingest", {}), dict):
            problems.append("extra 'ingest' must be a table")
        timings = extra.get("timings_s", {})
        if not isinstance(timings, dict) or not all(
                isinstance(v, int | float) and not isinstance(v, bool)
                for v in timings.values()):
            problems.append("extra 'timings_s' must map names to numbers")
    for name in ("gpurag_version", "created"):
        if not isinstance(getattr(manifest, name), str):
            problems.append(f"{name!r} must be a string")
    if problems:
        raise IndexFormatError(f"corrupt manifest {path}: {'; '.join(problems)}")


def read_manifest(directory: Path) -> Manifest:
    """Parse and validate ``manifest.json``; errors name the index and what is wrong."""
    path = Path(directory) / MANIFEST
    if not Path(directory).is_dir():
        raise IndexFormatError(f"no index at {directory}: not a directory")
    if not path.is_file():
        raise IndexFormatError(f"{directory} is not a gpurag index: {MANIFEST} is missing")
    return parse_manifest(path.read_bytes(), directory)
