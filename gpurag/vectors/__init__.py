"""Vector search over entities, passages and facts."""

from gpurag.vectors.faiss_index import build_index, load_index, save_index, search

__all__ = ["build_index", "load_index", "save_index", "search"]
