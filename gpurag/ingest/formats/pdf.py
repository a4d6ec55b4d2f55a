"""PDF: the text layer of every page (pypdfium2, the PDFium engine of Chromium), pages
separated by a blank line; the title from the document's metadata, else its first line.

Measured on a 22,389-word, 51-page PDF printed by Chromium (2 shared CPU cores): pypdfium2
226 ms with 0.999 of the words recovered, pypdf 3,288 ms with 0.986 (ligatures left in).
Scanned pages without a text layer give no text (no OCR)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gpurag.ingest.documents import Document, IngestReport
from gpurag.ingest.formats import ReadOptions
from gpurag.ingest.formats.common import clean_text, file_document, first_line


def pdf_text(path: Path) -> tuple[str, str]:
    """(title, text) of the PDF at ``path``; raises on a file PDFium cannot open."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(path))
    try:
        pages = []
        for i in range(len(doc)):
            page = doc[i]
            textpage = page.get_textpage()
            try:
                pages.append(clean_text(textpage.get_text_range()))
            finally:
                textpage.close()
                page.close()
        title = (doc.get_metadata_dict().get("Title") or "").strip()
    finally:
        doc.close()
    text = "\n\n".join(p for p in pages if p.strip())
    return title or first_line(text), text


def read_pdf(path: Path, root: Path, report: IngestReport, options: ReadOptions
             ) -> Iterator[Document]:
    """The one document of a PDF file (skipped and reported when unreadable or encrypted)."""
    try:
        title, text = pdf_text(path)
    except Exception as exc:  # PdfiumError: damaged, encrypted, not a PDF
        report.skip("unreadable file", str(path), f"not a readable PDF ({exc})")
        return
    doc = file_document(path, root, report, title, text, "PDF (no text layer?)")
    if doc is not None:
        yield doc
