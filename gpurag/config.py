"""Typed settings for indexing and querying, with TOML-file and environment overrides.

Every setting has a declarative :class:`Rule` (type and range) in its field's metadata. A value
is checked where it enters -- an environment variable, a TOML file, a keyword argument or a
command-line flag -- and a bad one raises :class:`ConfigError` naming the setting, the value and
where it came from. ``IndexConfig(...)`` and ``QueryConfig(...)`` check every field again on
construction, so Python API users get the same errors.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpurag.errors import ConfigError

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
# Extractor names known without importing gpurag.extract (its registry is asked for others).
BUILTIN_EXTRACTORS = ("fast", "regex", "ner", "spacy", "spacy-ner", "triples", "llm")


@dataclass(frozen=True)
class Rule:
    """What one setting accepts: a type, an optional range or list of choices."""

    kind: type
    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False  # lo itself excluded
    open_hi: bool = False  # hi itself excluded
    choices: tuple[str, ...] = ()
    more_choices: Callable[[], tuple[str, ...]] | None = None  # asked only for other values
    optional: bool = False  # None (or an empty string) means "not set"

    def describe(self) -> str:
        """The accepted values in words, e.g. ``a number in (0, 1)``."""
        if self.kind is bool:
            return f"a boolean word ({'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)})"
        if self.kind is dict:
            return "a table (dict)"
        if self.kind is str:
            choices = self._all_choices()
            return f"one of {', '.join(choices)}" if choices else "a non-empty string"
        noun = "a whole number" if self.kind is int else "a finite number"
        if self.lo is not None and self.hi is not None:
            return (f"{noun} in {'(' if self.open_lo else '['}{_num(self.lo)}, "
                    f"{_num(self.hi)}{')' if self.open_hi else ']'}")
        if self.lo is not None:
            return f"{noun} {'>' if self.open_lo else '>='} {_num(self.lo)}"
        if self.hi is not None:
            return f"{noun} {'<' if self.open_hi else '<='} {_num(self.hi)}"
        return noun

    def coerce(self, value: Any) -> Any:
        """``value`` converted to this rule's type and checked (``ValueError`` if it does not
        fit)."""
        if self.optional and (value is None or (isinstance(value, str) and not value.strip())):
            return None
        if self.kind is bool:
            return _to_bool(value)
        if self.kind is dict:
            if not isinstance(value, dict):
                raise ValueError
            return value
        if self.kind is str:
            return self._to_str(value)
        number = _to_int(value) if self.kind is int else _to_float(value)
        if self.lo is not None and (number < self.lo or (self.open_lo and number == self.lo)):
            raise ValueError
        if self.hi is not None and (number > self.hi or (self.open_hi and number == self.hi)):
            raise ValueError
        return number

    def _to_str(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValueError
        if self.choices or self.more_choices:
            value = value.strip().lower()
            if value not in self.choices and value not in self._all_choices():
                raise ValueError
        return value

    def _all_choices(self) -> tuple[str, ...]:
        extra = self.more_choices() if self.more_choices else ()
        return tuple(dict.fromkeys((*self.choices, *extra)))


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise ValueError


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return int(value.strip())
    raise ValueError


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        number = float(value.strip())
    else:
        raise ValueError
    if not math.isfinite(number):
        raise ValueError
    return number


def _registered_extractors() -> tuple[str, ...]:
    from gpurag.extract import EXTRACTORS

    return tuple(EXTRACTORS)


def setting(default: Any, kind: type, **rule: Any) -> Any:
    """A dataclass field with a default and a :class:`Rule` (kept in the field's metadata)."""
    return field(default=default, metadata={"rule": Rule(kind, **rule)})


POS_INT = {"lo": 1}
HEAD_FUSIONS = ("dense", "dense+bm25", "dense+ppr", "dense+bm25+ppr", "dense+title+ppr",
                "dense+bm25+title+ppr")
NONNEG_INT = {"lo": 0}
NONNEG = {"lo": 0}
UNIT = {"lo": 0, "hi": 1}


@dataclass
class IndexConfig:
    """How an index is built. Stored in the manifest so queries use matching settings."""

    embedder: str = setting("minilm", str)
    chunk_tokens: int = setting(256, int, **POS_INT)
    chunk_overlap: int = setting(32, int, **NONNEG_INT)  # and less than chunk_tokens
    embed_batch_size: int = setting(64, int, **POS_INT)
    ingest_batch_chunks: int = setting(2048, int, **POS_INT)
    # Documents longer than this are cut into parts (at a paragraph, line or word break) that
    # are chunked and checkpointed on their own; one chunk+embed batch holds at most this many
    # characters, so memory and lost work stay bounded whatever one document's size.
    max_part_chars: int = setting(500_000, int, lo=1_000)
    # The column of CSV, TSV and Parquet files that holds each row's text.
    text_column: str = setting("text", str)
    # Read symbolic links in a source folder that lead outside it (off: they are skipped and
    # reported, so a link to /etc/passwd in a corpus never reaches an index).
    follow_outside_links: bool = setting(False, bool)
    extractor: str = setting("fast", str, choices=BUILTIN_EXTRACTORS,
                             more_choices=_registered_extractors)
    triples: str | None = setting(None, str, optional=True)
    # The LLM that extracts (extractor="llm"): model and endpoint change the index, so the
    # build key covers them (None: the runtime's LLM settings, recorded at build time).
    llm_model: str | None = setting(None, str, optional=True)
    llm_url: str | None = setting(None, str, optional=True)
    ivf_threshold: int = setting(200_000, int, **POS_INT)
    hnsw_threshold: int = setting(20_000, int, **POS_INT)
    # Storage of every vector set (gpurag.vectors.codec): int8 codes (a quarter of float32,
    # recall@10 0.995 against float32), fp16 (recall@10 >= 0.9995) or fp32.
    vector_precision: str = setting("int8", str, choices=("int8", "fp16", "fp32"))
    graph: bool = setting(True, bool)
    merge_threshold: float = setting(0.9, float, **UNIT)
    synonym_threshold: float = setting(0.8, float, **UNIT)
    max_community_size: int = setting(64, int, **POS_INT)
    graph_dates: bool = setting(False, bool)
    # Weight of the edge between an entity and a passage whose title names it (other mention
    # edges weigh 1): the walk from an entity then prefers the entity's own page.
    title_edge_weight: float = setting(10.0, float, lo=0, open_lo=True)
    seed: int = setting(42, int, lo=0, hi=2**32 - 1)
    # Decide after the build whether the GAT reranker pays on this corpus (synthetic questions
    # from its own graph, gpurag/rerank/auto.py) and record it for queries with rerank="auto".
    rerank_decision: bool = setting(False, bool)

    def __post_init__(self) -> None:
        validate(self)


@dataclass
class QueryConfig:
    """How questions are answered."""

    mode: str = setting("graph", str, choices=("dense", "graph", "global", "bm25"))
    k: int = setting(5, int, **POS_INT)
    # Personalized PageRank: probability of following an edge (tuned with `gpurag eval`).
    damping: float = setting(0.8, float, lo=0, hi=1, open_lo=True, open_hi=True)
    ppr_tol: float = setting(1e-4, float, lo=0, hi=1, open_lo=True)
    # CPU: auto | power | push (local push touches only the neighbourhood)
    ppr_method: str = setting("auto", str, choices=("auto", "power", "push"))
    # Seeds: how many entities/facts/passages FAISS proposes, and how they are weighted.
    seed_entities: int = setting(10, int, **NONNEG_INT)
    seed_facts: int = setting(10, int, **NONNEG_INT)
    seed_passages: int = setting(20, int, **NONNEG_INT)
    sim_power: float = setting(4.0, float, **NONNEG)
    entity_margin: float = setting(0.1, float, **NONNEG)
    fact_margin: float = setting(0.2, float, **NONNEG)
    entity_weight: float = setting(1.0, float, **NONNEG)
    fact_weight: float = setting(1.0, float, **NONNEG)
    passage_weight: float = setting(0.05, float, **NONNEG)
    # Question entity linking: entities the question names (exact alias match) get this much
    # reset mass on top of the FAISS seeds (whose mass is 1), shared equally and scaled by
    # specificity; 0 turns linking off.
    link_weight: float = setting(4.0, float, **NONNEG)
    # Lexical seeds: the top `lexical_seeds` BM25 passages enter the reset vector with
    # `lexical_weight` (min-max scaled), beside the dense passages.
    lexical_seeds: int = setting(10, int, **NONNEG_INT)
    lexical_weight: float = setting(0.05, float, **NONNEG)
    # Ranking: the first `dense_head` ranks keep the dense order; `dense_blend` mixes the
    # dense score into the PPR score for the rest.
    dense_head: int = setting(1, int, **NONNEG_INT)
    # How the head is ordered: the dense ranking alone, or the reciprocal-rank fusion of it
    # with BM25, the PPR ranking and the passages titled by an entity the question names.
    head_fusion: str = setting("dense+bm25", str, choices=HEAD_FUSIONS)
    # "fused": the head is the first `dense_head` rows of that fusion; "union": the first
    # `dense_head` rows of each source, so when dense and BM25 disagree both keep a place;
    # "auto": "union" on a corpus without bridge pages (no passage mentions another's title:
    # chat logs, notes), where BM25 seeds also weigh `lexical_weight_unbridged`; else "fused".
    head_mode: str = setting("auto", str, choices=("auto", "fused", "union"))
    lexical_weight_unbridged: float = setting(0.3, float, **NONNEG)
    dense_blend: float = setting(0.0, float, **UNIT)
    # Query-conditioned second hop (gpurag/query/second_hop.py): the pages of the entities
    # the top `second_hop_from` passages mention, each weighted by exp(cos(question, page) /
    # `second_hop_temperature`) (0: not conditioned), fused into the ranking by reciprocal rank
    # (constant `second_hop_rank_constant`) with weight `second_hop_weight` (0 turns it off).
    # An entity that titles more than `second_hop_max_pages` passages bridges nowhere.
    second_hop_weight: float = setting(0.35, float, **NONNEG)
    second_hop_from: int = setting(5, int, **POS_INT)
    second_hop_temperature: float = setting(0.05, float, **NONNEG)
    second_hop_rank_constant: float = setting(2.0, float, lo=0, open_lo=True)
    second_hop_max_pages: int = setting(3, int, **POS_INT)
    # Expanded questions: each entity the top `second_hop_expansions` passages mention (and the
    # question does not name) is appended to the question and searched with BM25; the pages
    # found are fused with weight `second_hop_expansion_weight` below the first
    # `second_hop_expansion_keep` documents (0 expansions: off).
    second_hop_expansions: int = setting(3, int, **NONNEG_INT)
    second_hop_expansion_weight: float = setting(0.5, float, **NONNEG)
    second_hop_expansion_keep: int = setting(5, int, **NONNEG_INT)
    # Where the top passages carry labelled triples (an LLM or imported-triples index), only
    # the entities of the `second_hop_triples` triples closest to the question are expanded
    # (each entity scored by its best triple's cosine to the question); 0: every entity.
    second_hop_triples: int = setting(4, int, **NONNEG_INT)
    # Chains longer than two (gpurag/query/chain_rounds.py): rounds of bridge pages after the
    # second hop, one per relation phrase of the question past its first, at most this many
    # (0: off).
    chain_rounds: int = setting(0, int, **NONNEG_INT)
    rerank: str = setting("none", str)
    rerank_candidates: int = setting(30, int, **POS_INT)
    extra: dict[str, Any] = field(default_factory=dict, metadata={"rule": Rule(dict)})

    def __post_init__(self) -> None:
        validate(self)


def rules(cls_or_obj: Any) -> dict[str, Rule]:
    """The :class:`Rule` of every field of a settings dataclass."""
    return {f.name: f.metadata["rule"] for f in dataclasses.fields(cls_or_obj)}


def _invalid(source: str, label: str, name: str, value: Any, rule: Rule) -> ConfigError:
    return ConfigError(f"{source}: {label}={value!r} is not valid: "
                       f"{name} must be {rule.describe()}")


def check_value(cls_or_obj: Any, name: str, value: Any, source: str,
                label: str | None = None) -> Any:
    """``value`` for setting ``name``, converted and range-checked; a bad one raises
    :class:`ConfigError` naming ``label`` (how the user wrote the setting) and ``source``."""
    spec = rules(cls_or_obj).get(name)
    if spec is None:
        known = ", ".join(f.name for f in dataclasses.fields(cls_or_obj))
        raise ConfigError(f"{source}: unknown setting {label or name!r} (known: {known})")
    try:
        return spec.coerce(value)
    except (ValueError, TypeError):
        raise _invalid(source, label or name, name, value, spec) from None


def validate(cfg: Any, source: str | None = None) -> None:
    """Check (and normalise in place) every field of ``cfg`` and the rules between fields."""
    source = source or type(cfg).__name__
    for name, spec in rules(cfg).items():
        value = getattr(cfg, name)
        try:
            object.__setattr__(cfg, name, spec.coerce(value))
        except (ValueError, TypeError):
            raise _invalid(source, name, name, value, spec) from None
    if isinstance(cfg, IndexConfig) and cfg.chunk_overlap >= cfg.chunk_tokens:
        raise ConfigError(
            f"{source}: chunk_overlap={cfg.chunk_overlap} must be less than "
            f"chunk_tokens={cfg.chunk_tokens} (set GPURAG_INDEX_CHUNK_OVERLAP or "
            "[index] chunk_overlap)")


def apply_overrides(obj: Any, values: Mapping[str, Any], source: str,
                    labels: Mapping[str, str] | Callable[[str], str] | None = None) -> Any:
    """Return a copy of dataclass ``obj`` with ``values`` set, each checked by its rule.

    ``source`` says where the values came from (a file, ``environment``, ``command line``,
    ``Index.build``); ``labels`` how the user spelled each setting there (``--chunk-tokens``,
    ``GPURAG_QUERY_DAMPING``): a mapping or a function of the field name.
    """
    if not isinstance(values, Mapping):
        raise ConfigError(f"{source}: expected a table of settings, not {values!r}")

    def label(key: str) -> str:
        if callable(labels):
            return labels(key)
        return (labels or {}).get(key, key)

    updates = {key: check_value(obj, key, value, source, label(key))
               for key, value in values.items()}
    try:
        return dataclasses.replace(obj, **updates)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {str(exc).split(': ', 1)[-1]}") from None


def env_name(prefix: str, name: str) -> str:
    """The environment variable of setting ``name``, e.g. ``GPURAG_INDEX_CHUNK_TOKENS``."""
    return f"{prefix}{name.upper()}"


def from_env(obj: Any, prefix: str, environ: Mapping[str, str] | None = None) -> Any:
    """Apply ``{prefix}{FIELD}`` environment variables, e.g. ``GPURAG_INDEX_CHUNK_TOKENS``."""
    environ = os.environ if environ is None else environ
    values = {f.name: environ[env_name(prefix, f.name)] for f in dataclasses.fields(obj)
              if f.name != "extra" and env_name(prefix, f.name) in environ}
    if not values:
        return obj
    return apply_overrides(obj, values, "environment", lambda key: env_name(prefix, key))


def env_setting(name: str, rule: Rule, default: Any,
                environ: Mapping[str, str] | None = None) -> Any:
    """One process-wide environment variable checked by ``rule`` (``default`` when unset or
    empty); a bad value raises :class:`ConfigError` naming the variable."""
    environ = os.environ if environ is None else environ
    raw = environ.get(name, "")
    if not raw.strip():
        return default
    try:
        return rule.coerce(raw)
    except (ValueError, TypeError):
        raise ConfigError(f"environment: {name}={raw!r} is not valid: it must be "
                          f"{rule.describe()}") from None


def machine_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def bounded_workers(n: int, name: str) -> int:
    """``n`` threads or worker processes, at most the machine's cores (``GPURAG_THREADS=100000``
    used to start that many and grow memory for minutes); a lowered value is logged (info:
    a setting carried to a smaller machine is not an error)."""
    cores = machine_cores()
    if n > cores:
        import logging

        logging.getLogger(__name__).info("%s=%d is more than the %d CPU cores here: using %d",
                                            name, n, cores, cores)
        return cores
    return n


def threads_from_env(environ: Mapping[str, str] | None = None) -> int:
    """``GPURAG_THREADS``: CPU threads for FAISS and ONNX Runtime (0 = their default), at
    most the machine's cores."""
    return bounded_workers(env_setting("GPURAG_THREADS", Rule(int, lo=0), 0, environ),
                           "GPURAG_THREADS")


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Validate every gpurag setting taken from the environment (and ``$GPURAG_CONFIG``), so a
    command fails with one clear :class:`ConfigError` before doing any work."""
    threads_from_env(environ)
    load_config(environ=environ)


def load_config(path: str | os.PathLike | None = None,
                environ: Mapping[str, str] | None = None) -> tuple[IndexConfig, QueryConfig]:
    """Defaults, then a TOML file (``[index]`` and ``[query]`` tables), then the environment."""
    environ = os.environ if environ is None else environ
    index_cfg, query_cfg = IndexConfig(), QueryConfig()
    path = path or environ.get("GPURAG_CONFIG")
    if path:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {p}: {exc}") from exc
        unknown = sorted(set(data) - {"index", "query"})
        if unknown:  # a misspelled [indx] would otherwise be silently ignored
            raise ConfigError(f"{p}: unknown table{'s' if len(unknown) > 1 else ''} "
                              f"{', '.join(f'[{t}]' for t in unknown)}: gpurag reads [index] "
                              "and [query] (a setting outside a table counts as one)")
        for table in ("index", "query"):
            if not isinstance(data.get(table, {}), dict):
                raise ConfigError(f"{p}: {table!r} must be a [{table}] table of settings, "
                                  f"not {data[table]!r}")
        index_cfg = apply_overrides(index_cfg, data.get("index", {}), str(p),
                                    lambda key: f"[index] {key}")
        query_cfg = apply_overrides(query_cfg, data.get("query", {}), str(p),
                                    lambda key: f"[query] {key}")
    return (from_env(index_cfg, "GPURAG_INDEX_", environ),
            from_env(query_cfg, "GPURAG_QUERY_", environ))
