"""Typed settings for indexing and querying, with TOML-file and environment overrides."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpurag.errors import ConfigError


@dataclass
class IndexConfig:
    """How an index is built. Stored in the manifest so queries use matching settings."""

    embedder: str = "minilm"
    chunk_tokens: int = 256
    chunk_overlap: int = 32
    embed_batch_size: int = 64
    ingest_batch_chunks: int = 2048
    extractor: str = "fast"
    triples: str | None = None
    # The LLM that extracts (extractor="llm"): model and endpoint change the index, so the
    # build key covers them (None: the runtime's LLM settings, recorded at build time).
    llm_model: str | None = None
    llm_url: str | None = None
    ivf_threshold: int = 200_000
    hnsw_threshold: int = 20_000
    graph: bool = True
    merge_threshold: float = 0.9
    synonym_threshold: float = 0.8
    max_community_size: int = 64
    graph_dates: bool = False
    seed: int = 42


@dataclass
class QueryConfig:
    """How questions are answered."""

    mode: str = "graph"
    k: int = 5
    # Personalized PageRank: probability of following an edge (tuned with `gpurag eval`).
    damping: float = 0.8
    ppr_tol: float = 1e-4
    ppr_method: str = "auto"  # CPU: auto | power | push (local push touches only the neighbourhood)
    # Seeds: how many entities/facts/passages FAISS proposes, and how they are weighted.
    seed_entities: int = 10
    seed_facts: int = 10
    seed_passages: int = 20
    sim_power: float = 4.0
    entity_margin: float = 0.1
    fact_margin: float = 0.2
    entity_weight: float = 1.0
    fact_weight: float = 1.0
    passage_weight: float = 0.05
    # Ranking: the first `dense_head` ranks keep the dense order; `dense_blend` mixes the
    # dense score into the PPR score for the rest.
    dense_head: int = 2
    dense_blend: float = 0.0
    rerank: str = "none"
    rerank_candidates: int = 30
    extra: dict[str, Any] = field(default_factory=dict)


def _coerce(value: str, kind: Any) -> Any:
    kind_name = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    if "bool" in kind_name:
        return value.strip().lower() in {"1", "true", "yes", "on"}
    if "int" in kind_name and "None" not in kind_name:
        return int(value)
    if "float" in kind_name:
        return float(value)
    return value


def apply_overrides(obj: Any, values: dict[str, Any], source: str) -> Any:
    """Return a copy of dataclass ``obj`` with ``values`` set; unknown keys are an error."""
    known = {f.name: f for f in dataclasses.fields(obj)}
    updates = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{source}: unknown setting {key!r} (known: {', '.join(known)})")
        try:
            updates[key] = _coerce(value, known[key].type) if isinstance(value, str) else value
        except ValueError:
            raise ConfigError(f"{source}: setting {key!r} has an invalid value {value!r}") from None
    return dataclasses.replace(obj, **updates)


def from_env(obj: Any, prefix: str) -> Any:
    """Apply ``{prefix}{FIELD}`` environment variables, e.g. ``GPURAG_INDEX_CHUNK_TOKENS``."""
    values = {}
    for f in dataclasses.fields(obj):
        name = f"{prefix}{f.name.upper()}"
        if name in os.environ and f.name != "extra":
            values[f.name] = os.environ[name]
    return apply_overrides(obj, values, "environment") if values else obj


def load_config(path: str | os.PathLike | None = None) -> tuple[IndexConfig, QueryConfig]:
    """Defaults, then a TOML file (``[index]`` and ``[query]`` tables), then the environment."""
    index_cfg, query_cfg = IndexConfig(), QueryConfig()
    path = path or os.environ.get("GPURAG_CONFIG")
    if path:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {p}: {exc}") from exc
        index_cfg = apply_overrides(index_cfg, data.get("index", {}), str(p))
        query_cfg = apply_overrides(query_cfg, data.get("query", {}), str(p))
    return from_env(index_cfg, "GPURAG_INDEX_"), from_env(query_cfg, "GPURAG_QUERY_")
