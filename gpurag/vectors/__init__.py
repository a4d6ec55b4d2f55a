"""Vector search over entities, passages and facts."""

from gpurag.vectors.faiss_index import build_index, load_index, save_index, search
from gpurag.vectors.searcher import make_searcher, query_index, searcher_for_index

__all__ = ["build_index", "load_index", "make_searcher", "query_index", "save_index",
           "search", "searcher_for_index"]
