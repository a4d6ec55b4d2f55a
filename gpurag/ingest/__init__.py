"""Reading documents and cutting them into chunks."""

from gpurag.ingest.chunker import chunk_id, window_spans
from gpurag.ingest.readers import Document, IngestReport, iter_documents, list_input_files

__all__ = [
    "Document",
    "IngestReport",
    "chunk_id",
    "iter_documents",
    "list_input_files",
    "window_spans",
]
