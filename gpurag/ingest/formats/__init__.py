"""Readers for document formats beyond plain text and JSONL: PDF, HTML, DOCX (the
``formats`` extra), reStructuredText and CSV (no extra), and markup stripping for Markdown
and reStructuredText.

Each reader turns one file into :class:`~gpurag.ingest.documents.Document` records. A file
whose format needs a library that is not installed is skipped and reported as
``needs gpurag[formats]``; a file of a format gpurag does not read at all is skipped and
reported as ``unsupported format`` (both are counted in the ingest summary, never silent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpurag.ingest.documents import Document, IngestReport

EXTRA = "formats"


@dataclass(frozen=True)
class ReadOptions:
    """How record files (CSV, TSV, Parquet) map columns to documents: the text column and
    the optional id and title columns."""

    text_column: str = "text"
    id_columns: tuple[str, ...] = ("id", "doc_id")
    title_columns: tuple[str, ...] = ("title",)


def read_options(cfg: object) -> ReadOptions:
    """The :class:`ReadOptions` of an index config (its ``text_column``)."""
    return ReadOptions(text_column=getattr(cfg, "text_column", None) or "text")


Reader = Callable[[Path, Path, "IngestReport", ReadOptions], Iterator["Document"]]


@dataclass(frozen=True)
class Format:
    """One file format: its name, file suffixes, the modules it needs and its reader (a
    dotted ``module:function`` loaded on first use, so no library is imported early)."""

    name: str
    suffixes: tuple[str, ...]
    needs: tuple[str, ...]
    reader: str

    def load(self) -> Reader:
        module, func = self.reader.split(":")
        import importlib

        return getattr(importlib.import_module(module), func)


FORMATS: tuple[Format, ...] = (
    Format("pdf", (".pdf",), ("pypdfium2",), "gpurag.ingest.formats.pdf:read_pdf"),
    Format("html", (".html", ".htm", ".xhtml"), ("trafilatura",),
           "gpurag.ingest.formats.html:read_html"),
    Format("docx", (".docx",), ("docx",), "gpurag.ingest.formats.docx:read_docx"),
    Format("rst", (".rst", ".rest"), (), "gpurag.ingest.formats.markup:read_rst"),
    Format("csv", (".csv", ".tsv"), (), "gpurag.ingest.formats.tables:read_csv"),
)


def format_for(path: Path) -> Format | None:
    """The :data:`FORMATS` entry reading ``path`` (by its suffix), or None."""
    name = path.name.lower()
    for fmt in FORMATS:
        if name.endswith(fmt.suffixes):
            return fmt
    return None


def missing_modules(fmt: Format) -> list[str]:
    """The modules ``fmt`` needs that cannot be imported here."""
    from importlib.util import find_spec

    missing = []
    for module in fmt.needs:
        try:
            if find_spec(module) is None:
                missing.append(module)
        except (ImportError, ValueError):  # a module set to None in sys.modules, say
            missing.append(module)
    return missing


def read_format(path: Path, root: Path, report: IngestReport,
                options: ReadOptions | None = None) -> Iterator[Document]:
    """The documents of one file of a :data:`FORMATS` format; a missing library or a file
    the library cannot parse is reported and counted, never raised."""
    fmt = format_for(path)
    if fmt is None:
        yield from read_unsupported(path, root, report, options)
        return
    missing = missing_modules(fmt)
    if missing:
        report.skip(f"needs gpurag[{EXTRA}]", str(path),
                    f"reading .{fmt.name} files needs {', '.join(missing)}: "
                    f"pip install 'gpurag[{EXTRA}]'")
        return
    try:
        reader = fmt.load()
    except ImportError as exc:
        report.skip(f"needs gpurag[{EXTRA}]", str(path),
                    f"{exc}: pip install 'gpurag[{EXTRA}]'")
        return
    yield from reader(path, root, report, options or ReadOptions())


def read_unsupported(path: Path, root: Path, report: IngestReport,
                     options: ReadOptions | None = None) -> Iterator[Document]:
    """Nothing: ``path`` is reported and counted as a file of an unsupported format."""
    suffix = "".join(path.suffixes[-1:]) or "(no suffix)"
    report.skip("unsupported format", str(path),
                f"gpurag does not read {suffix} files (it reads {supported_names()})")
    return iter(())


def supported_names() -> str:
    """The readable suffixes, for messages."""
    base = [".txt", ".md", ".jsonl(.gz)", ".parquet"]
    return ", ".join(base + [fmt.suffixes[0] for fmt in FORMATS])


__all__ = ["EXTRA", "FORMATS", "Format", "ReadOptions", "format_for", "missing_modules",
           "read_format", "read_options", "read_unsupported", "supported_names"]
