"""BM25 baseline over an index's chunks (the same lexical index graph retrieval uses)."""

from gpurag.query.lexical import BM25Index as BM25Retriever

__all__ = ["BM25Retriever"]
