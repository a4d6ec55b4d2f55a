"""Alias resolution: surface names -> canonical entities, plus near-synonym pairs."""

from __future__ import annotations

from gpurag.resolve.aliases import AliasResolution, resolve_aliases
from gpurag.resolve.knn import knn_pairs
from gpurag.resolve.normalize import normalize_name, number_signature

__all__ = [
    "AliasResolution",
    "knn_pairs",
    "normalize_name",
    "number_signature",
    "resolve_aliases",
]
