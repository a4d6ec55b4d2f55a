"""Cutting long documents into bounded parts, so chunking, embedding and checkpoints stay
bounded in memory whatever one document's size.

A part is a slice ``text[offset:offset + len(part.text)]`` of its document, cut at a paragraph,
line, sentence or word break near ``max_chars`` (a hard cut only when there is none). Chunks are
cut inside one part and their char spans are shifted by ``offset``, so they point into the
original document.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpurag.ingest.readers import Document

BREAKS = ("\n\n", "\n", ". ", " ", "\t")  # preferred cut points, best first
SEARCH_FRACTION = 4  # look for a break in the last 1/SEARCH_FRACTION of a part


@dataclass(frozen=True)
class DocPart:
    """One part of a document: ``text`` starts at char ``offset`` of the document."""

    doc_id: str
    title: str
    text: str
    source: str
    offset: int = 0
    last: bool = True  # the document's final part
    markup: str = ""  # the document's markup ("markdown", "rst"), stripped when embedded


def cut_points(text: str, max_chars: int) -> list[int]:
    """The char positions where ``text`` is cut into parts of at most ``max_chars`` chars."""
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    cuts, start, n = [], 0, len(text)
    while n - start > max_chars:
        hi = start + max_chars
        lo = hi - max(1, max_chars // SEARCH_FRACTION)
        end = hi
        for brk in BREAKS:
            at = text.rfind(brk, lo, hi)
            if at >= 0:
                end = at + len(brk)
                break
        cuts.append(end)
        start = end
    return cuts


def split_document(doc: Document, max_chars: int) -> Iterator[DocPart]:
    """``doc`` as parts of at most ``max_chars`` characters (one part when it is shorter)."""
    text = doc.text
    bounds = [0, *cut_points(text, max_chars), len(text)]
    for i in range(len(bounds) - 1):
        yield DocPart(doc.doc_id, doc.title, text[bounds[i]:bounds[i + 1]], doc.source,
                      offset=bounds[i], last=i == len(bounds) - 2, markup=doc.markup)


def iter_parts(docs: Iterable[Document], max_chars: int) -> Iterator[DocPart]:
    """Every document of ``docs`` as bounded parts, in order, streaming."""
    for doc in docs:
        yield from split_document(doc, max_chars)
