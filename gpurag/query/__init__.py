"""Query-time retrieval: dense and graph (multi-hop) modes."""

from gpurag.query.results import EntityPath, Passage, QueryResult, SeedEntity

__all__ = ["EntityPath", "Passage", "QueryResult", "SeedEntity"]
