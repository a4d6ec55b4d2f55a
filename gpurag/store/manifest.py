"""``manifest.json``: format version, gpurag version, config, counts, components, checksums."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpurag.errors import IndexFormatError

FORMAT_NAME = "gpurag-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


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

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True, ensure_ascii=False)


def sha256_file(path: Path, block: int = 1 << 22) -> str:
    """sha256 hex digest of a file, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(directory: Path) -> Manifest:
    """Parse and validate ``manifest.json``; errors name the index and what is wrong."""
    path = Path(directory) / MANIFEST
    if not Path(directory).is_dir():
        raise IndexFormatError(f"no index at {directory}: not a directory")
    if not path.is_file():
        raise IndexFormatError(f"{directory} is not a gpurag index: {MANIFEST} is missing")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IndexFormatError(f"corrupt manifest {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise IndexFormatError(f"{path} is not a gpurag index manifest")
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise IndexFormatError(
            f"index {directory} has format version {version}, this gpurag reads version "
            f"{FORMAT_VERSION}: rebuild it with `gpurag index`"
        )
    try:
        return Manifest(**data)
    except TypeError as exc:
        raise IndexFormatError(f"corrupt manifest {path}: {exc}") from exc


def verify_files(directory: Path, manifest: Manifest, checksums: bool = False) -> None:
    """Check each listed file exists with its recorded size (and sha256 if ``checksums``)."""
    for rel, meta in manifest.files.items():
        path = Path(directory) / rel
        if not path.is_file():
            raise IndexFormatError(f"index {directory} is corrupt: {rel} is missing")
        size = path.stat().st_size
        if size != meta.get("bytes"):
            raise IndexFormatError(
                f"index {directory} is corrupt: {rel} has {size} bytes, manifest says "
                f"{meta.get('bytes')}"
            )
        if checksums and sha256_file(path) != meta.get("sha256"):
            raise IndexFormatError(f"index {directory} is corrupt: checksum mismatch in {rel}")
