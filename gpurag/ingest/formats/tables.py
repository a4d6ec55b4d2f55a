"""CSV and TSV: one document per row, its text from the chosen text column
(:class:`~gpurag.ingest.formats.ReadOptions`), its id and title from the id and title
columns when present. Read row by row (the file is never loaded whole); quoted fields may
hold newlines."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

from gpurag.ingest.documents import Document, IngestReport, record_to_document
from gpurag.ingest.formats import ReadOptions
from gpurag.ingest.formats.common import doc_id

MAX_FIELD_CHARS = 1 << 30


def pick_columns(names: list[str], options: ReadOptions) -> tuple[str | None, str | None,
                                                                   str | None]:
    """(text, id, title) column names among ``names`` (None where absent)."""
    def first(candidates: tuple[str, ...]) -> str | None:
        return next((c for c in candidates if c in names), None)

    return (options.text_column if options.text_column in names else None,
            first(options.id_columns), first(options.title_columns))


def no_text_column(report: IngestReport, path: Path, names: list[str],
                   options: ReadOptions) -> None:
    """Report a table without the text column, naming the columns it has."""
    shown = ", ".join(names[:20]) + (" …" if len(names) > 20 else "")
    report.skip(f"no {options.text_column!r} column", str(path),
                f"its columns are {shown}; choose the text column with "
                "--text-column or [index] text_column")


def read_csv(path: Path, root: Path, report: IngestReport, options: ReadOptions
             ) -> Iterator[Document]:
    """The rows of a CSV (``.csv``) or tab-separated (``.tsv``) file as documents."""
    csv.field_size_limit(max(csv.field_size_limit(), MAX_FIELD_CHARS))
    delimiter = "\t" if path.name.lower().endswith(".tsv") else ","
    base = doc_id(path, root)
    row = 0
    try:
        with open(path, "rb") as raw:
            reader = csv.reader(io.TextIOWrapper(raw, encoding="utf-8-sig", newline=""),
                                delimiter=delimiter)
            names = next(reader, None)
            if names is None:
                report.skip("empty text", str(path), "no header row")
                return
            names = [n.strip() for n in names]
            text_col, id_col, title_col = pick_columns(names, options)
            if text_col is None:
                no_text_column(report, path, names, options)
                return
            at = {n: i for i, n in reversed(list(enumerate(names)))}
            for row, values in enumerate(reader, start=1):
                if not any(v.strip() for v in values):
                    continue
                record = {"text": _cell(values, at[text_col])}
                if id_col is not None:
                    record["id"] = _cell(values, at[id_col])
                if title_col is not None:
                    record["title"] = _cell(values, at[title_col])
                doc = record_to_document(record, f"{path}:row {row}", f"{base}#{row}",
                                          str(path), report)
                if doc is not None:
                    yield doc
    except UnicodeDecodeError as exc:
        _stop(report, path, row, f"not UTF-8 after row {row} (byte {exc.start} of a block)")
    except (csv.Error, OSError) as exc:
        _stop(report, path, row, f"{exc} after row {row}")


def _cell(values: list[str], i: int) -> str | None:
    return values[i] if i < len(values) else None


def _stop(report: IngestReport, path: Path, rows: int, detail: str) -> None:
    if rows:
        report.warn("corrupt file", str(path), f"{rows} rows read; the rest is lost: {detail}")
    else:
        report.skip("unreadable file", str(path), detail)
