"""Typed settings for indexing and querying, with TOML-file and environment overrides.

Every setting has a declarative :class:`Rule` (type and range) in its field's metadata. A value
is checked where it enters -- an environment variable, a TOML file, a keyword argument or a
command-line flag -- and a bad one raises :class:`ConfigError` naming the setting, the value and
where it came from. ``IndexConfig(...)`` and ``QueryConfig(...)`` check every field again on
construction, so Python API users get the same errors.

The constants chosen by evaluation runs are not settings: they live in the named, versioned
profiles of :mod:`gpurag.profile` (a :class:`~gpurag.profile.RankingProfile` for queries, a
:class:`~gpurag.profile.BuildProfile` for builds), which a config chooses by name only.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from gpurag import registry as _registry
from gpurag import settings as _settings
from gpurag.errors import ConfigError
from gpurag.profile import DEFAULT as DEFAULT_PROFILE
from gpurag.profile import (  # noqa: F401  (HEAD_FUSIONS re-exported)
    HEAD_FUSIONS,
    BuildProfile,
    Profile,
    RankingProfile,
    build_profile_fields,
    build_profile_names,
    get_build_profile,
    get_profile,
    profile_fields,
    profile_names,
)
from gpurag.rules import (  # noqa: F401  (FALSE_WORDS, TRUE_WORDS, machine_cores re-exported)
    FALSE_WORDS,
    TRUE_WORDS,
    Rule,
    bounded_workers,
    machine_cores,
    named_keywords,
)

# Extractor names known without importing gpurag.extract (gpurag.registry holds the others).
BUILTIN_EXTRACTORS = ("fast", "regex", "ner", "spacy", "spacy-ner", "triples", "llm")


def _registered_extractors() -> tuple[str, ...]:
    return tuple(_registry.EXTRACTORS)  # filled by gpurag.extract and plug-ins


def setting(default: Any, kind: type, **rule: Any) -> Any:
    """A dataclass field with a default and a :class:`Rule` (kept in the field's metadata)."""
    return field(default=default, metadata={"rule": Rule(kind, **rule)})


POS_INT = {"lo": 1}
NONNEG_INT = {"lo": 0}
NONNEG = {"lo": 0}
UNIT = {"lo": 0, "hi": 1}


def _unknown_keyword(cls: type, key: str, value: Any) -> None:
    """``IndexConfig(key=...)``/``QueryConfig(key=...)`` for no field: the error of a config
    file's unknown key (a profile constant's, else the known settings)."""
    check_value(cls, key, value, cls.__name__)


@named_keywords(_unknown_keyword)
@dataclass
class IndexConfig:
    """How an index is built: what a user decides. Stored in the manifest so queries use
    matching settings. The evaluated constants of the build live in the
    :class:`~gpurag.profile.BuildProfile` that ``profile`` names (a build runs on the
    :data:`BuildPlan` of both, :func:`build_plan`)."""

    PROFILE: ClassVar[type[Profile]] = BuildProfile
    EXPLICIT: ClassVar[str] = "Index.build"  # where a profile constant can be set
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
    max_community_size: int = setting(64, int, **POS_INT)
    graph_dates: bool = setting(False, bool)
    seed: int = setting(42, int, lo=0, hi=2**32 - 1)
    # Decide after the build whether the GAT reranker pays on this corpus (synthetic questions
    # from its own graph, gpurag/rerank/auto.py) and record it for queries with rerank="auto".
    rerank_decision: bool = setting(False, bool)
    # The build profile (gpurag/profile.py): alias thresholds, title edges, HNSW graphs;
    # chosen by name, never changed field by field from the environment or a config file.
    profile: str = setting(DEFAULT_PROFILE, str, choices=(DEFAULT_PROFILE,),
                           more_choices=build_profile_names)

    def __post_init__(self) -> None:
        validate(self)

    def build_profile(self) -> BuildProfile:
        """The :class:`~gpurag.profile.BuildProfile` this config names."""
        return get_build_profile(self.profile)


@named_keywords(_unknown_keyword)
@dataclass
class QueryConfig:
    """How questions are answered: what a user decides. The evaluated constants of the
    ranking live in the :class:`~gpurag.profile.RankingProfile` that ``profile`` names."""

    PROFILE: ClassVar[type[Profile]] = RankingProfile
    EXPLICIT: ClassVar[str] = "Index.query"  # where a profile constant can be set
    mode: str = setting("graph", str, choices=("dense", "graph", "global", "bm25"))
    k: int = setting(5, int, **POS_INT)
    # The ranking profile (gpurag/profile.py): chosen by name, never changed field by field
    # from the environment or a config file.
    profile: str = setting(DEFAULT_PROFILE, str, choices=(DEFAULT_PROFILE,),
                           more_choices=profile_names)
    # Personalized PageRank solver: tolerance, and on CPU auto | power | push (local push
    # touches only the neighbourhood).
    ppr_tol: float = setting(1e-4, float, lo=0, hi=1, open_lo=True)
    ppr_method: str = setting("auto", str, choices=("auto", "power", "push"))
    rerank: str = setting("none", str)
    rerank_candidates: int = setting(30, int, **POS_INT)
    # The GAT reranker's weights (None: the runtime's, GPURAG_GAT_CHECKPOINT, or the bundled).
    gat_checkpoint: str | None = setting(None, str, optional=True)

    def __post_init__(self) -> None:
        validate(self)

    def plan(self, **values: Any) -> Any:
        """The :data:`QueryPlan` of this config and its profile, with ``values`` set
        explicitly (see :func:`query_plan`)."""
        return query_plan(self, values, "QueryConfig.plan")[1]


# Every field of QueryConfig and of the profile's constants, flat: what the retriever reads.
QueryPlan = dataclasses.make_dataclass(
    "QueryPlan",
    [(f.name, f.type, field(default=f.default)) for f in dataclasses.fields(QueryConfig)]
    + [(f.name, f.type, field(default=f.default)) for f in dataclasses.fields(RankingProfile)
       if "rule" in f.metadata],
    frozen=True)
QueryPlan.__module__ = __name__
QueryPlan.__doc__ = ("One query batch's settings: a QueryConfig with the constants of its "
                     "RankingProfile (``profile`` names the profile, ``<name>+custom`` when "
                     "a caller set some of its constants).")


def query_plan(cfg: QueryConfig, values: Mapping[str, Any] | None = None,
               source: str = "query") -> tuple[QueryConfig, Any]:
    """``cfg`` with ``values`` set (explicit: a keyword of :meth:`Index.query`, a request's
    option) and the :data:`QueryPlan` of it and its profile. A value for a profile constant
    runs on a copy of the profile named ``<name>+custom``; an unknown key raises
    :class:`ConfigError` naming it."""
    values = dict(values or {})
    constants = profile_fields()
    mine = {k: v for k, v in values.items() if k not in constants}
    cfg = apply_overrides(cfg, mine, source) if mine else cfg
    profile = get_profile(cfg.profile).with_values(
        {k: v for k, v in values.items() if k in constants}, source)
    plan = QueryPlan(**{**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)},
                        **profile.constants(), "profile": profile.name})
    return cfg, plan


def _stored_profile(plan: Any) -> BuildProfile:
    """The build profile a :data:`BuildPlan` holds (its name, version and constants)."""
    return BuildProfile(name=plan.profile, version=plan.profile_version,
                        **{name: getattr(plan, name) for name in build_profile_fields()})


# Every field of IndexConfig and of the build profile's constants, flat: what a build reads
# and what the manifest's "config" records (profile name and version included). A BuildPlan
# is an IndexConfig, so every stage typed for one takes it.
BuildPlan = dataclasses.make_dataclass(
    "BuildPlan",
    [("profile", str, field(default=DEFAULT_PROFILE, metadata={"rule": Rule(str)})),
     ("profile_version", int, field(default=1, metadata={"rule": Rule(int, lo=0)}))]
    + [(f.name, f.type, field(default=f.default, metadata=f.metadata))
       for f in dataclasses.fields(BuildProfile) if "rule" in f.metadata],
    bases=(IndexConfig,), namespace={"build_profile": _stored_profile})
BuildPlan.__module__ = __name__
BuildPlan.__doc__ = ("One build's settings: an IndexConfig with the constants of its "
                     "BuildProfile (``profile``/``profile_version`` name it, "
                     "``<name>+custom`` when a caller set some of its constants).")


def build_plan(cfg: IndexConfig, values: Mapping[str, Any] | None = None,
               source: str = "Index.build") -> Any:
    """The :data:`BuildPlan` of ``cfg`` (an IndexConfig, or a plan: its own constants) with
    ``values`` set explicitly (keywords of :meth:`Index.build`). A value for a build profile
    constant runs on a copy named ``<name>+custom``; ``profile`` may be a name or a
    :class:`~gpurag.profile.BuildProfile` object; an unknown key raises :class:`ConfigError`."""
    values = dict(values or {})
    chosen = values.pop("profile") if isinstance(values.get("profile"), BuildProfile) else None
    constants = build_profile_fields()
    mine = {k: v for k, v in values.items() if k not in constants}
    if "profile" in mine and isinstance(cfg, BuildPlan):  # a name: checked as a user's is
        cfg = IndexConfig(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(IndexConfig)
                             if f.name != "profile"})
    cfg = apply_overrides(cfg, mine, source) if mine else cfg
    profile = (chosen or cfg.build_profile()).with_values(
        {k: v for k, v in values.items() if k in constants}, source)
    user = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(IndexConfig)}
    return BuildPlan(**{**user, "profile": profile.name}, profile_version=profile.version,
                     **profile.constants())


def stored_plan(config: Mapping[str, Any]) -> Any:
    """The :data:`BuildPlan` an index was built with, from its manifest's ``config`` (keys this
    gpurag does not know dropped). An index from before the build profile recorded only some
    constants (the others were code) and no profile: ``default`` version 1, renamed
    ``<name>+custom`` when a recorded constant differs from that profile's."""
    known = {f.name for f in dataclasses.fields(BuildPlan)}
    plan = BuildPlan(**{k: v for k, v in config.items() if k in known})
    named = get_build_profile(plan.profile) if plan.profile in build_profile_names() else None
    if (named is not None and named.version == plan.profile_version
            and named.constants() != plan.build_profile().constants()):
        plan = dataclasses.replace(plan, profile=f"{plan.profile}+custom")
    return plan


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
    profile = getattr(cls_or_obj, "PROFILE", None)  # the profile kind a settings class names
    if spec is None and profile is not None and name in profile.rules():
        raise ConfigError(f"{source}: {label or name}={value!r}: {name} is a constant of the "
                          f"{profile.KIND} (gpurag/profile.py {profile.__name__}), "
                          "which cannot be changed field by field here: choose a profile by "
                          f"name (profile), or pass {name}= explicitly in Python (to "
                          f"{cls_or_obj.EXPLICIT})")
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
    """Apply ``{prefix}{FIELD}`` environment variables, e.g. ``GPURAG_INDEX_CHUNK_TOKENS``;
    a variable of the family that names no field is an error naming it."""
    values = dict(_settings.read(environ).family(prefix))
    names = {f.name for f in dataclasses.fields(obj)}
    unknown = sorted(set(values) - names)
    for key in unknown:  # raises: a profile constant's message, else "unknown setting"
        check_value(obj, key, values[key], "environment", env_name(prefix, key))
    if not values:
        return obj
    return apply_overrides(obj, values, "environment", lambda key: env_name(prefix, key))


def threads_from_env(environ: Mapping[str, str] | None = None) -> int:
    """``GPURAG_THREADS``: CPU threads for FAISS and ONNX Runtime (0 = their default), at
    most the machine's cores."""
    return _settings.read(environ).cpu_threads()


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Validate every gpurag setting taken from the environment (and ``$GPURAG_CONFIG``), so a
    command fails with one clear :class:`ConfigError` before doing any work."""
    from gpurag.llm.config import LLMConfig

    threads_from_env(environ)
    load_config(environ=environ)
    LLMConfig.from_env(environ=environ)


def load_config(path: str | os.PathLike | None = None,
                environ: Mapping[str, str] | None = None) -> tuple[IndexConfig, QueryConfig]:
    """Defaults, then a TOML file (``[index]`` and ``[query]`` tables; ``path``, else
    ``$GPURAG_CONFIG``), then the environment (``GPURAG_INDEX_*``, ``GPURAG_QUERY_*``)."""
    env = _settings.read(environ)
    index_cfg, query_cfg = IndexConfig(), QueryConfig()
    path = path or env.config_file
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
    return (from_env(index_cfg, _settings.INDEX_PREFIX, environ),
            from_env(query_cfg, _settings.QUERY_PREFIX, environ))
