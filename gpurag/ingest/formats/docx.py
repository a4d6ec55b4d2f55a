"""Word (.docx): paragraphs and tables in document order (python-docx), a table row as its
cells joined by `` | ``; the title from the document properties, else its Title or first
heading paragraph."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gpurag.ingest.documents import Document, IngestReport
from gpurag.ingest.formats import ReadOptions
from gpurag.ingest.formats.common import clean_text, file_document, first_line


def docx_text(path: Path) -> tuple[str, str]:
    """(title, text) of the .docx file at ``path``."""
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    document = docx.Document(str(path))
    blocks: list[str] = []
    heading = ""
    for child in document.element.body.iterchildren():
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "p":
            para = Paragraph(child, document)
            text = para.text.strip()
            style = (para.style.name if para.style is not None else "") or ""
            if text and not heading and style.startswith(("Title", "Heading")):
                heading = text
            blocks.append(text)
        elif tag == "tbl":
            for row in Table(child, document).rows:
                cells = [" ".join(c.text.split()) for c in row.cells]
                # a merged cell is repeated once per grid column it spans: keep it once
                kept = [c for i, c in enumerate(cells) if i == 0 or c != cells[i - 1]]
                blocks.append(" | ".join(kept))
            blocks.append("")
    text = clean_text("\n".join(blocks))
    title = (document.core_properties.title or "").strip()
    return title or heading or first_line(text), text


def read_docx(path: Path, root: Path, report: IngestReport, options: ReadOptions
              ) -> Iterator[Document]:
    """The one document of a .docx file."""
    try:
        title, text = docx_text(path)
    except Exception as exc:  # not a zip, no document part, bad XML
        report.skip("unreadable file", str(path), f"not a readable .docx file ({exc})")
        return
    doc = file_document(path, root, report, title, text, ".docx")
    if doc is not None:
        yield doc
