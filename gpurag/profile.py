"""Profiles: the constants that evaluation runs chose, named and versioned.

Two kinds, one shape: a :class:`RankingProfile` for the query, a :class:`BuildProfile` for the
build (alias resolution, title edges, the HNSW graphs; chosen by ``IndexConfig.profile``,
``[index] profile``, ``GPURAG_INDEX_PROFILE``, and recorded in the manifest with its version).

A :class:`RankingProfile` is frozen and holds every constant of the ranking that was picked by
an evaluation rather than by a user: the walk's damping, the seeds' counts, weights and
margins, the head (``dense_head``, ``head_fusion``, ``head_mode``), the second hop and the
share of bridged passages that makes a corpus "bridged". A user chooses a profile by name
(``QueryConfig.profile``, ``[query] profile``, ``GPURAG_QUERY_PROFILE``); the environment and
the config file cannot change its fields one by one (``GPURAG_QUERY_SECOND_HOP_WEIGHT`` is an
error naming it). A caller who experiments passes a field explicitly in Python
(``index.query(q, second_hop_weight=0)``, a per-request option of ``gpurag serve``): that
query runs on a copy named ``<name>+custom``.

Profile ``default`` version 2 (version 1 and shared-entity pages, cross-validated by the same
protocol: ``docs/RECALL.md`` "Shared-entity pages"; and the walk's local push on large graphs:
``push_eps`` is new, and with it the size rule ``push_min_edges`` / ``push_max_seeds``,
every question with at most 256 seeds pushed on graphs of at least 500k stored edges,
changes the default ranks there; below that the walk is v1's power iteration), and the runs
it came from (each field's note says which):

- ``docs/RECALL.md`` "How it was tuned": the seeds, linking, title and head settings by
  5-fold x 5-seed cross-validation over the questions of ``musique_train100``,
  ``hotpotqa_train100`` and ``lihua_world``; the second hop and ``second_hop_triples`` by the
  same protocol (stops 11-13); ``head_mode`` / ``lexical_weight_unbridged`` on lihua_world
  (15 of 25 folds picked 0.3).
- ``docs/results.md``: the scores of version 2's constants, ``scripts/make_results.py`` on
  2026-12-02 (CPU, bundled MiniLM int8 embedder, baselines in the same run); version 1's were
  the 2026-12-01 run (git history of that file). Version 2's cross-validated figures are in
  ``docs/RECALL.md`` ("Shared-entity pages") and
  ``bench/results/chains_shared_2026-12-01_cpu.md``.

Build profile ``default`` version 1 (the values the code and ``IndexConfig`` held before):

- ``docs/RECALL.md`` "How it was tuned": ``title_edge_weight`` (10, cross-validated with the
  seeds and linking);
- the alias thresholds and rules: ``tests/resolve/`` (the cases each guard is held to) and
  ``bench/resolve.py`` (115k enwiki passages: pairs, merges and time at scale);
- the HNSW graphs: ``gpurag/vectors/faiss_index.py`` (65k MiniLM int8 name vectors, recall@10
  0.988 against exact at M = 16) and ``gpurag/resolve/knn.py`` (>99% of the exact top-k pairs
  above 0.8 kept at 128 PCA dimensions).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from gpurag.errors import ConfigError
from gpurag.rules import Rule, named_keywords

HEAD_FUSIONS = ("dense", "dense+bm25", "dense+ppr", "dense+bm25+ppr", "dense+title+ppr",
                "dense+bm25+title+ppr")
DEFAULT = "default"
EVALUATED_BY = ("docs/RECALL.md (5-fold x 5 seeds over musique_train100, hotpotqa_train100, "
                "lihua_world); scores in docs/results.md (scripts/make_results.py, 2026-12-02)")
BUILD_EVALUATED_BY = ("docs/RECALL.md (title_edge_weight, cross-validated with the seeds); "
                      "tests/resolve/ and bench/resolve.py (alias thresholds and rules); "
                      "gpurag/vectors/faiss_index.py and gpurag/resolve/knn.py (HNSW recall "
                      "against exact search)")
P = TypeVar("P", bound="Profile")


def constant(default: Any, kind: type, **rule: Any) -> Any:
    """A profile field: its value in profile ``default`` and its :class:`Rule`."""
    return field(default=default, metadata={"rule": Rule(kind, **rule)})


POS_INT, NONNEG_INT, NONNEG, UNIT = {"lo": 1}, {"lo": 0}, {"lo": 0}, {"lo": 0, "hi": 1}


@dataclass(frozen=True)
class Profile:
    """What both kinds share: a name, a version, the runs the constants came from, and the
    constants (fields with a :class:`Rule`), each checked on construction."""

    KIND: ClassVar[str] = "profile"
    name: str = field(default=DEFAULT, metadata={"meta": True})
    version: int = field(default=1, metadata={"meta": True})
    evaluated_by: str = field(default="", metadata={"meta": True})

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            rule = f.metadata.get("rule")
            if rule is None:
                continue
            value = getattr(self, f.name)
            try:
                object.__setattr__(self, f.name, rule.coerce(value))
            except (ValueError, TypeError):
                raise ConfigError(f"{self.KIND} {self.name!r}: {f.name}={value!r} is not "
                                  f"valid: {f.name} must be {rule.describe()}") from None

    @classmethod
    def rules(cls) -> MappingProxyType[str, Rule]:
        """Every evaluated constant of this kind and its rule (read-only, made once)."""
        return _constant_rules(cls)

    @property
    def label(self) -> str:
        """``name@version``, e.g. ``default@1`` (what a result or a log line names)."""
        return f"{self.name}@{self.version}"

    def constants(self) -> dict[str, Any]:
        """The evaluated constants by name (no name, version or provenance)."""
        return {name: getattr(self, name) for name in self.rules()}

    def with_values(self: P, values: dict[str, Any], source: str) -> P:
        """A copy with ``values`` (explicit, from Python or a request) set, each checked by its
        rule and named ``<name>+custom``; an unknown name raises :class:`ConfigError`."""
        if not values:
            return self
        known = self.rules()
        for key, value in values.items():
            if key not in known:
                raise ConfigError(f"{source}: {key!r} is not a {self.KIND} constant "
                                  f"(known: {', '.join(sorted(known))})")
            try:
                known[key].coerce(value)
            except (ValueError, TypeError):
                raise ConfigError(f"{source}: {key}={value!r} is not valid: {key} must be "
                                  f"{known[key].describe()}") from None
        name = self.name if self.name.endswith("+custom") else f"{self.name}+custom"
        return dataclasses.replace(self, name=name, **values)


@functools.cache
def _constant_rules(cls: type) -> MappingProxyType[str, Rule]:
    return MappingProxyType({f.name: f.metadata["rule"] for f in dataclasses.fields(cls)
                             if "rule" in f.metadata})


def _unknown_constant(cls: type, key: str, value: Any) -> None:
    """``RankingProfile(key=...)``/``BuildProfile(key=...)`` for no field: a one-line error
    naming it and the valid ones."""
    known = ", ".join(sorted(cls.rules()))
    raise ConfigError(f"{cls.__name__}: {key}={value!r}: {key!r} is not a {cls.KIND} "
                      f"constant (known: {known}; and name, version, evaluated_by)")


@named_keywords(_unknown_constant)
@dataclass(frozen=True)
class RankingProfile(Profile):
    """The evaluated constants of the ranking (see the module docstring for their runs)."""

    KIND: ClassVar[str] = "ranking profile"
    # v2: shared-entity pages on (v1 had no such stage) and the walk's local push: push_eps is
    # new, and with it the size rule (push_min_edges, push_max_seeds below: on graphs of at
    # least 500k stored edges every question with up to 256 seeds is pushed) changes the
    # default ranks on large graphs; every other constant is v1's
    version: int = field(default=2, metadata={"meta": True})
    evaluated_by: str = field(default=EVALUATED_BY, metadata={"meta": True})
    # Personalized PageRank: probability of following an edge.
    damping: float = constant(0.8, float, lo=0, hi=1, open_lo=True, open_hi=True)
    # The local push's threshold (a node pushes while its residual exceeds push_eps times
    # max(out-degree, 1)), where the walk pushes: on the CPU, on graphs of at least
    # push_min_edges stored edges (smaller ones use power iteration, and
    # the device walk always runs power iteration, so push_eps does not reach it).
    # Chosen in bench/walk_cv.py (5-fold over questions; bench/results/walk_cv_2026-12-01.md).
    push_eps: float = constant(3e-6, float, lo=0, hi=1, open_lo=True)
    # The CPU walk's size rule (gpurag.graph.ppr.push_rows): on a graph of at least
    # push_min_edges stored edges a question with at most push_max_seeds seeds is pushed,
    # the others take power iteration (measured: gpurag.graph.ppr.choose_method,
    # bench/results/walk_push_2026-12-01_cpu_148k.md).
    push_min_edges: int = constant(500_000, int, **NONNEG_INT)
    push_max_seeds: int = constant(256, int, **NONNEG_INT)
    # Seeds: how many entities/facts/passages FAISS proposes, and how they are weighted.
    seed_entities: int = constant(10, int, **NONNEG_INT)
    seed_facts: int = constant(10, int, **NONNEG_INT)
    seed_passages: int = constant(20, int, **NONNEG_INT)
    sim_power: float = constant(4.0, float, **NONNEG)
    entity_margin: float = constant(0.1, float, **NONNEG)
    fact_margin: float = constant(0.2, float, **NONNEG)
    entity_weight: float = constant(1.0, float, **NONNEG)
    fact_weight: float = constant(1.0, float, **NONNEG)
    passage_weight: float = constant(0.05, float, **NONNEG)
    # Question entity linking: entities the question names (exact alias match) get this much
    # reset mass on top of the FAISS seeds (whose mass is 1), shared equally and scaled by
    # specificity; 0 turns linking off.
    link_weight: float = constant(4.0, float, **NONNEG)
    # Lexical seeds: the top `lexical_seeds` BM25 passages enter the reset vector with
    # `lexical_weight` (min-max scaled), beside the dense passages.
    lexical_seeds: int = constant(10, int, **NONNEG_INT)
    lexical_weight: float = constant(0.05, float, **NONNEG)
    # Ranking: the first `dense_head` ranks keep the head's order; `dense_blend` mixes the
    # dense score into the PPR score for the rest.
    dense_head: int = constant(1, int, **NONNEG_INT)
    # How the head is ordered: the dense ranking alone, or the reciprocal-rank fusion of it
    # with BM25, the PPR ranking and the passages titled by an entity the question names.
    head_fusion: str = constant("dense+bm25", str, choices=HEAD_FUSIONS)
    # "fused": the head is the first `dense_head` rows of that fusion; "union": the first
    # `dense_head` rows of each source; "auto": "union" on a corpus without bridge pages
    # (fewer than `bridged_share` of its passages reached by a bridge), where BM25 seeds also
    # weigh `lexical_weight_unbridged`; else "fused".
    head_mode: str = constant("auto", str, choices=("auto", "fused", "union"))
    lexical_weight_unbridged: float = constant(0.3, float, **NONNEG)
    bridged_share: float = constant(0.02, float, **UNIT)
    dense_blend: float = constant(0.0, float, **UNIT)
    # Query-conditioned second hop (gpurag/query/second_hop.py): the pages of the entities
    # the top `second_hop_from` passages mention, each weighted by exp(cos(question, page) /
    # `second_hop_temperature`) (0: not conditioned), fused into the ranking by reciprocal rank
    # (constant `second_hop_rank_constant`) with weight `second_hop_weight` (0 turns it off).
    # An entity that titles more than `second_hop_max_pages` passages bridges nowhere.
    second_hop_weight: float = constant(0.35, float, **NONNEG)
    second_hop_from: int = constant(5, int, **POS_INT)
    second_hop_temperature: float = constant(0.05, float, **NONNEG)
    second_hop_rank_constant: float = constant(2.0, float, lo=0, open_lo=True)
    second_hop_max_pages: int = constant(3, int, **POS_INT)
    # Expanded questions: each entity the top `second_hop_expansions` passages mention (and the
    # question does not name) is appended to the question and searched with BM25; the pages
    # found are fused with weight `second_hop_expansion_weight` below the first
    # `second_hop_expansion_keep` documents (0 expansions: off).
    second_hop_expansions: int = constant(3, int, **NONNEG_INT)
    second_hop_expansion_weight: float = constant(0.5, float, **NONNEG)
    second_hop_expansion_keep: int = constant(5, int, **NONNEG_INT)
    # Where the top passages carry labelled triples (an LLM or imported-triples index), only
    # the entities of the `second_hop_triples` triples closest to the question are expanded;
    # 0: every entity.
    second_hop_triples: int = constant(4, int, **NONNEG_INT)
    # Chains longer than two (gpurag/query/chain_rounds.py): rounds of bridge pages after the
    # second hop, one per relation phrase of the question past its first, at most this many
    # (0: off; not part of the runs above, so off).
    chain_rounds: int = constant(0, int, **NONNEG_INT)
    # Shared-entity pages (gpurag/query/shared_entity.py): the other passages that mention an
    # entity the top `shared_entity_from` passages mention (not one the question names, nor
    # one more than `shared_entity_max_df` passages mention), weighted by exp(cos(question,
    # page) / `shared_entity_temperature`), fused by reciprocal rank with weight
    # `shared_entity_weight` below the first `second_hop_expansion_keep` documents (0: off).
    # Cross-validated (docs/RECALL.md "Shared-entity pages"): picked in 21 of 25 folds.
    shared_entity_weight: float = constant(0.25, float, **NONNEG)
    shared_entity_from: int = constant(3, int, **POS_INT)
    shared_entity_max_df: int = constant(50, int, **POS_INT)
    shared_entity_temperature: float = constant(0.1, float, **NONNEG)


@named_keywords(_unknown_constant)
@dataclass(frozen=True)
class BuildProfile(Profile):
    """The evaluated constants of the build (see the module docstring for their runs). A
    change here changes the index files: the manifest records the profile's name, version and
    constants, and updates of the index use the recorded ones."""

    KIND: ClassVar[str] = "build profile"
    evaluated_by: str = field(default=BUILD_EVALUATED_BY, metadata={"meta": True})
    # Alias resolution (gpurag/resolve/aliases.py): two names merge at a name-vector cosine of
    # `merge_threshold` (with the number, type and token guards), a name contained in a longer
    # one of several words at `nested_threshold`; pairs from `synonym_threshold` that do not
    # merge become synonym edges. Two differing words are one spelling at a character
    # similarity of `token_similarity`. The acronym rule ("NBA" -> "National Basketball
    # Association", cosine at least `acronym_similarity`) and the surname rule ("Tolkien" ->
    # "J. R. R. Tolkien") run when on.
    merge_threshold: float = constant(0.9, float, **UNIT)
    synonym_threshold: float = constant(0.8, float, **UNIT)
    nested_threshold: float = constant(0.95, float, **UNIT)
    token_similarity: float = constant(0.85, float, **UNIT)
    acronym_merges: bool = constant(True, bool)
    acronym_similarity: float = constant(0.5, float, lo=-1, hi=1)
    surname_merges: bool = constant(True, bool)
    # Candidate pairs (gpurag/resolve/knn.py): each name's `alias_neighbours` nearest names,
    # exact up to `alias_exact_limit` names, beyond an HNSW graph (M `alias_hnsw_m`, efConstruction
    # / efSearch below) over the vectors PCA-reduced to `alias_search_dim` dimensions (0: none).
    alias_neighbours: int = constant(10, int, **NONNEG_INT)
    alias_exact_limit: int = constant(5_000, int, **NONNEG_INT)
    alias_search_dim: int = constant(128, int, **NONNEG_INT)
    alias_hnsw_m: int = constant(16, int, lo=2)
    alias_hnsw_ef_construction: int = constant(40, int, **POS_INT)
    alias_hnsw_ef_search: int = constant(32, int, **POS_INT)
    # The edge between an entity and a passage whose title names it weighs this much (other
    # mention edges weigh 1): the walk from an entity prefers the entity's own page.
    title_edge_weight: float = constant(10.0, float, lo=0, open_lo=True)
    # A local insert adds its passages' term counts to the BM25 model as a delta beside the
    # stored weights (gpurag/query/lexical_delta.py); readers weight them with the corpus
    # statistics of now and rescale the stored weights to the idf of now, so only the stored
    # passages' length normalization keeps the avgdl of the last full weighting. The insert
    # that would take the passage count more than this share past that weighting re-weights
    # the whole model: avgdl then moves by at most this share of the difference between the
    # new passages' mean length and the corpus's (under 1% of a weight at 0.10 unless the new
    # passages are far longer or shorter), well inside the local-update tolerance
    # (tests/pipeline/test_incremental_tolerance.py), and the delta a reader merges on open
    # stays within a tenth of the model. A full build never has a delta.
    lexical_reweight_growth: float = constant(0.10, float, lo=0)
    # The HNSW graphs of the entity and fact seeds (IndexConfig.hnsw_threshold rows and more):
    # M, efConstruction, and the efSearch stored in the FAISS file (queries search with it).
    hnsw_m: int = constant(16, int, lo=2)
    hnsw_ef_construction: int = constant(80, int, **POS_INT)
    hnsw_ef_search: int = constant(96, int, **POS_INT)


# The build profile's constants that are keywords of resolve_aliases, by that keyword.
ALIAS_KEYWORDS = {"merge_threshold": "merge_threshold", "synonym_threshold": "synonym_threshold",
                  "nested_threshold": "nested_threshold", "token_similarity": "token_similarity",
                  "acronym_merges": "acronyms", "acronym_similarity": "acronym_similarity",
                  "surname_merges": "surnames", "alias_neighbours": "k",
                  "alias_exact_limit": "exact_limit", "alias_search_dim": "search_dim",
                  "alias_hnsw_m": "hnsw_m", "alias_hnsw_ef_construction": "hnsw_ef_construction",
                  "alias_hnsw_ef_search": "hnsw_ef_search"}


def alias_options(profile: BuildProfile) -> dict[str, Any]:
    """The keywords of :func:`~gpurag.resolve.resolve_aliases` from ``profile``."""
    return {kw: getattr(profile, name) for name, kw in ALIAS_KEYWORDS.items()}


def hnsw_options(profile: BuildProfile) -> tuple[int, int, int]:
    """``(M, efConstruction, efSearch)`` of the vector indexes' HNSW graphs."""
    return profile.hnsw_m, profile.hnsw_ef_construction, profile.hnsw_ef_search


def profile_fields() -> MappingProxyType[str, Rule]:
    """Every evaluated constant of :class:`RankingProfile` and its rule (read-only, made
    once: every query's plan reads it)."""
    return RankingProfile.rules()


def build_profile_fields() -> MappingProxyType[str, Rule]:
    """Every evaluated constant of :class:`BuildProfile` and its rule."""
    return BuildProfile.rules()


PROFILES: dict[str, RankingProfile] = {DEFAULT: RankingProfile()}
BUILD_PROFILES: dict[str, BuildProfile] = {DEFAULT: BuildProfile()}


def _get(registry: dict[str, P], kind: str, name: str) -> P:
    try:
        return registry[name]
    except KeyError:
        raise ConfigError(f"unknown {kind} {name!r} (known: {', '.join(registry)})") from None


def profile_names() -> tuple[str, ...]:
    """The names a user may choose (``QueryConfig.profile``)."""
    return tuple(PROFILES)


def get_profile(name: str) -> RankingProfile:
    """The profile named ``name``; an unknown name raises :class:`ConfigError` naming it."""
    return _get(PROFILES, RankingProfile.KIND, name)


def build_profile_names() -> tuple[str, ...]:
    """The build profile names a user may choose (``IndexConfig.profile``)."""
    return tuple(BUILD_PROFILES)


def get_build_profile(name: str) -> BuildProfile:
    """The build profile named ``name``; an unknown name raises :class:`ConfigError`."""
    return _get(BUILD_PROFILES, BuildProfile.KIND, name)


__all__ = ["ALIAS_KEYWORDS", "BUILD_PROFILES", "DEFAULT", "HEAD_FUSIONS", "PROFILES",
           "BuildProfile", "Profile", "RankingProfile", "alias_options", "build_profile_fields",
           "build_profile_names", "get_build_profile", "get_profile", "hnsw_options",
           "profile_fields", "profile_names"]
