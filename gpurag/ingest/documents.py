"""What ingestion yields and counts: :class:`Document`, :class:`IngestReport`, and the
helpers every reader shares (a file's bytes or UTF-8 text, a record as a document). Below the
readers and the formats, so neither imports the other for them."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("gpurag.ingest.readers")  # the messages' logger, as before

MAX_PROBLEMS_KEPT = 1000


@dataclass(frozen=True)
class Document:
    """One input document."""

    doc_id: str
    title: str
    text: str
    source: str
    where: str = ""  # file (and line or row) it came from, for messages
    markup: str = ""  # "markdown" or "rst": stripped from what is embedded, kept in the text


@dataclass
class IngestReport:
    """Counts of what was read, skipped and damaged, with the first problems verbatim.

    ``skipped`` counts records left out by reason; ``warnings`` counts things that lost input
    without skipping a record (a truncated file after its first records, a dangling link).
    """

    files: int = 0
    documents: int = 0
    skipped: Counter = field(default_factory=Counter)
    warnings: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def skip(self, reason: str, where: str, detail: str = "", count: int = 1) -> None:
        self.skipped[reason] += count
        self._note(f"{where}: skipped ({reason}){': ' + detail if detail else ''}")

    def warn(self, reason: str, where: str, detail: str = "") -> None:
        self.warnings[reason] += 1
        self._note(f"{where}: {reason}{': ' + detail if detail else ''}")

    def _note(self, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS_KEPT:
            self.problems.append(message)
        log.warning(message)

    def summary(self) -> str:
        skipped = sum(self.skipped.values())
        parts = [f"{self.documents} documents from {self.files} files"]
        if skipped:
            reasons = ", ".join(f"{n} {r}" for r, n in sorted(self.skipped.items()))
            parts.append(f"{skipped} skipped ({reasons})")
        if self.warnings:
            parts.append(", ".join(f"{n} {r}" for r, n in sorted(self.warnings.items())))
        return "; ".join(parts)

    def as_dict(self) -> dict:
        return {
            "files": self.files,
            "documents": self.documents,
            "skipped": dict(self.skipped),
            "warnings": dict(self.warnings),
            "problems": self.problems[:50],
        }

    @classmethod
    def from_dict(cls, data: dict) -> IngestReport:
        """The report saved by :meth:`as_dict` (a resumed build's)."""
        return cls(files=data.get("files", 0), documents=data.get("documents", 0),
                   skipped=Counter(data.get("skipped", {})),
                   warnings=Counter(data.get("warnings", {})),
                   problems=list(data.get("problems", [])))


def read_file_bytes(path: Path, report: IngestReport) -> bytes | None:
    """The bytes of ``path``, or None with the file reported as unreadable."""
    try:
        return path.read_bytes()
    except OSError as exc:
        report.skip("unreadable file", str(path), str(exc))
        return None


def read_utf8_file(path: Path, report: IngestReport) -> str | None:
    """The UTF-8 text of ``path`` (a BOM dropped), or None with the file reported as
    unreadable or not UTF-8 (naming the first bad byte)."""
    raw = read_file_bytes(path, report)
    if raw is None:
        return None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        report.skip("not UTF-8", str(path), f"byte {exc.start}")
        return None


def record_to_document(
    record: object, where: str, fallback_id: str, source: str, report: IngestReport
) -> Document | None:
    """A record (a JSON object or a table row) as a :class:`Document`, or None with the
    reason counted in ``report``."""
    if not isinstance(record, dict):
        report.skip("not a JSON object", where)
        return None
    text = record.get("text")
    if text is None:
        report.skip("missing text", where)
        return None
    if not isinstance(text, str):
        report.skip("text not a string", where, f"got {type(text).__name__} {str(text)[:40]!r}")
        return None
    if not text.strip():
        report.skip("empty text", where)
        return None
    doc_id = record.get("id", record.get("doc_id"))
    doc_id = _as_text(doc_id) if doc_id not in (None, "", b"") else fallback_id
    title = record.get("title")
    title = _as_text(title) if title is not None else ""
    for name, value in (("text", text), ("id", doc_id), ("title", title)):
        if not _encodable(value):
            report.skip("invalid Unicode", where, f"the {name} holds a lone surrogate "
                        "(an unpaired \\ud800-\\udfff escape), which no UTF-8 file can store")
            return None
    return Document(doc_id, title, text, source, where)


def _as_text(value: object) -> str:
    """An id or title as text: bytes (a Parquet binary column) decoded as UTF-8, not their
    Python repr."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
