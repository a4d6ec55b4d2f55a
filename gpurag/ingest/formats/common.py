"""What every format reader shares: the document id of a file and the checks of its text."""

from __future__ import annotations

import unicodedata
from pathlib import Path

from gpurag.ingest.documents import Document, IngestReport


def doc_id(path: Path, root: Path) -> str:
    """A file's document id: its path under the source folder (its name for a lone file)."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return path.name


def clean_text(text: str) -> str:
    """Extracted text with Windows line ends, NUL bytes and trailing spaces of each line
    removed, and compatibility ligatures (``ﬁ``, ``ﬀ``) spelled out."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    if any("\ufb00" <= c <= "\ufb06" for c in text):
        text = "".join(unicodedata.normalize("NFKC", c) if "\ufb00" <= c <= "\ufb06" else c
                       for c in text)
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


def file_document(path: Path, root: Path, report: IngestReport, title: str, text: str,
                  kind: str, markup: str = "") -> Document | None:
    """The one document of a file, or None (reported) when it holds no text."""
    if not text.strip():
        report.skip("empty text", str(path), f"no text found in this {kind} file")
        return None
    title = " ".join((title or "").split()) or path.stem
    return Document(doc_id(path, root), title, text, str(path), str(path), markup=markup)


def first_line(text: str, max_chars: int = 120) -> str:
    """The first non-blank line of ``text`` when it is short enough to be a title, else ''."""
    for line in text.split("\n"):
        if line.strip():
            return line.strip() if len(line.strip()) <= max_chars else ""
    return ""
