"""Alias resolution: unique surface names -> canonical entities (+ soft synonym pairs).

Stages, each an array operation over all names or all candidate pairs:

1. **exact** -- names with the same :func:`~gpurag.resolve.normalize.normalize_name` key are
   one entity ("The Beatles" = "Beatles", "J. R. R. Tolkien" = "JRR Tolkien").
2. **kNN** -- the keys are embedded and each finds its ``k`` nearest keys (the runtime's kNN
   component, or host FAISS: exact up to ``exact_limit`` keys, HNSW over PCA-reduced vectors
   beyond; scores rescored exactly; see :func:`~gpurag.resolve.knn.knn_pairs`). A pair merges
   when its cosine is ``>= merge_threshold`` and it passes the guards:

   * same numbers ("Apollo 11" / "Apollo 12", "1990" / "1991" never merge, nor become synonyms);
   * compatible entity types when labels are given (PERSON never merges with GPE...);
   * token compatibility: the content tokens of one name must all be found in the other
     (initials match words: "John F Kennedy" ~ "John Fitzgerald Kennedy"); two names that each
     have a token the other lacks merge only when that is a single spelling variant
     (character similarity ``>= token_similarity``, "centered" ~ "centred"), so "John Smith"
     and "John Smythe" stay apart;
   * a name contained in a longer one merges only if its words come in the same order there
     and -- no chaining -- all its longer candidates are one entity ("Obama" in "Barack Obama"
     and "Michelle Obama" merges with neither; a one-word name also needs every key containing
     that word to be one entity); contained names of several words ("University of London" in
     "University College London") need cosine ``>= nested_threshold``.
3. **rules** (unambiguous only) -- an all-caps acronym merges into the single entity whose
   content-word initials spell it ("NBA" -> "National Basketball Association"); with labels, a
   one-word name merges into the single multi-word PERSON entity ending in it ("Tolkien" ->
   "J. R. R. Tolkien") when no other multi-word entity ends in it.

Pairs that do not merge but have cosine ``>= synonym_threshold`` (and pass the number and type
guards) are returned as entity-level synonym pairs: soft edges for the graph.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpurag.embed.base import Embedder
from gpurag.resolve.groups import (
    LABEL_CLASSES,
    components,
    group_mode,
    label_classes,
    rule_candidates,
    unique_target,
    word_entity_counts,
)
from gpurag.resolve.knn import knn_pairs
from gpurag.resolve.normalize import normalize_name, number_signature
from gpurag.resolve.tokens import Tokens

__all__ = ["LABEL_CLASSES", "AliasResolution", "knn_pairs", "resolve_aliases"]

log = logging.getLogger(__name__)



@dataclass
class AliasResolution:
    """Result of :func:`resolve_aliases`.

    ``entity_of_name``: int32 entity id of each input name (ids in order of first appearance).
    ``entities``: ``entity_id``, ``name`` (display name: the most frequent surface form, ties
    to the longest), ``n_aliases``, ``count`` (summed name counts), ``label`` (most frequent
    non-empty label, "" if none). ``aliases``: ``name``, ``entity_id`` for every input name.
    ``synonym_pairs``: ``a`` < ``b`` entity ids with ``score`` (cosine) for near-synonyms that
    were not merged. ``stats``: counters and stage timings.
    """

    entity_of_name: np.ndarray
    entities: pd.DataFrame
    aliases: pd.DataFrame
    synonym_pairs: pd.DataFrame
    stats: dict = field(default_factory=dict)
    keys: list[str] | None = None  # each name's normalize_name key (the alias table's key)


# ---------------------------------------------------------------------------------------------
# main entry point
# ---------------------------------------------------------------------------------------------


@dataclass
class _Keys:
    """Normalized keys: ``gid`` (key of each name), ``uniq`` (the keys), per-key features,
    ``of_name`` (each name's key)."""

    gid: np.ndarray
    uniq: list[str]
    lclass: np.ndarray
    person: int
    nsig: np.ndarray
    tokens: Tokens
    of_name: list[str]


@dataclass
class _Pairs:
    """Candidate key pairs ``(pi, pj)`` with cosine ``ps`` and the guard/merge decisions."""

    pi: np.ndarray
    pj: np.ndarray
    ps: np.ndarray
    num_ok: np.ndarray
    label_ok: np.ndarray
    i_in_j: np.ndarray
    j_in_i: np.ndarray
    variant: np.ndarray
    strong: np.ndarray
    same: np.ndarray
    contained: np.ndarray
    nested: np.ndarray
    n_nested: int = 0


def _keys(names: list[str], labels: Sequence[str] | None, cnt: np.ndarray) -> _Keys:
    """Stage 1 (exact) and the key features the later stages test."""
    keys = normalize_name(names)
    gid, uniq = pd.factorize(pd.Series(keys, dtype=object))
    gid = gid.astype(np.int64)
    uniq = [str(u) for u in uniq]
    name_class, person = label_classes(labels, len(names))
    lclass = group_mode(gid, name_class, cnt, len(uniq))
    nsig = pd.factorize(pd.Series(number_signature(uniq), dtype=object))[0]
    return _Keys(gid, uniq, lclass, person, nsig, Tokens.build(uniq), keys)


def _key_vectors(keys: _Keys, embeddings: np.ndarray | None, embedder: Embedder | None,
                 batch_size: int) -> np.ndarray | None:
    """One unit vector per key: the mean of its names' given vectors, or embedded."""
    u = len(keys.uniq)
    if embeddings is not None:
        emb = np.asarray(embeddings, dtype=np.float32)
        summed = np.zeros((u, emb.shape[1]), dtype=np.float32)
        # most keys have one name: copied (0.0 + x, as a sum from zero gives: -0.0 -> 0.0);
        # the rest summed in name order, as np.add.at over all of them did
        single = np.bincount(keys.gid, minlength=u)[keys.gid] == 1
        summed[keys.gid[single]] = emb[single]
        summed += np.float32(0.0)
        np.add.at(summed, keys.gid[~single], emb[~single])
        summed /= np.maximum(np.linalg.norm(summed, axis=1, keepdims=True), 1e-12)
        return summed  # normalized in place: no second (keys, dim) array
    if embedder is not None and u:
        return np.asarray(embedder.encode(keys.uniq, batch_size=batch_size), dtype=np.float32)
    return None


def _judge_pairs(keys: _Keys, pi: np.ndarray, pj: np.ndarray, ps: np.ndarray,
                 merge_threshold: float, low: float, nested_threshold: float,
                 token_similarity: float) -> _Pairs:
    """The number, type and token guards over the candidate pairs (stage 2's decisions)."""
    lclass, tokens = keys.lclass, keys.tokens
    num_ok = keys.nsig[pi] == keys.nsig[pj]
    label_ok = (lclass[pi] < 0) | (lclass[pj] < 0) | (lclass[pi] == lclass[pj])
    i_in_j, j_in_i, variant = tokens.relation(pi, pj, token_similarity)
    has_tokens = (tokens.n_full[pi] + tokens.n_init[pi] > 0) & (
        tokens.n_full[pj] + tokens.n_init[pj] > 0
    )
    strong = (ps >= merge_threshold) & num_ok & label_ok & has_tokens
    same = strong & ((i_in_j & j_in_i) | variant)
    # nested: one name's tokens all inside the other's ("Obama" in "Barack Obama"); a short
    # name merges only when every longer candidate near it (cosine >= the lower threshold) and,
    # for one-word names, every key containing that word, is one entity
    contained = (ps >= low) & num_ok & label_ok & has_tokens & (i_in_j ^ j_in_i) & ~variant
    ordered = np.zeros(len(pi), dtype=bool)
    idx = np.flatnonzero(contained)
    ordered[idx] = tokens.same_order(np.where(i_in_j, pi, pj)[idx], np.where(i_in_j, pj, pi)[idx])
    contained &= ordered
    # several shared words inside a longer name often name a part or a sibling ("University
    # of London" / "University College London"): those need the stricter nested_threshold
    short_words = tokens.n_full[np.where(i_in_j, pi, pj)] + tokens.n_init[np.where(i_in_j, pi, pj)]
    nested = contained & strong & ((short_words <= 1) | (ps >= nested_threshold))
    return _Pairs(pi, pj, ps, num_ok, label_ok, i_in_j, j_in_i, variant, strong, same,
                  contained, nested)


def _merge_edges(keys: _Keys, p: _Pairs) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Key-graph edges of the kNN merges: same-name pairs and unambiguous nested names."""
    u, tokens = len(keys.uniq), keys.tokens
    comp = components(u, p.pi[p.same], p.pj[p.same])
    short = np.where(p.i_in_j, p.pi, p.pj)[p.contained]
    long_ = np.where(p.i_in_j, p.pj, p.pi)[p.contained]
    accept = unique_target(short, long_, comp) & p.nested[p.contained]
    one_word = (tokens.n_full[short] == 1) & (tokens.n_init[short] == 0)
    word = tokens.full.indices[tokens.full.indptr[short[one_word]]]
    accept[np.flatnonzero(one_word)[word_entity_counts(tokens.full, comp)[word] > 2]] = False
    p.n_nested = int(accept.sum())
    return [p.pi[p.same], short[accept]], [p.pj[p.same], long_[accept]]


def _rule_edges(keys: _Keys, names: list[str], comp: np.ndarray, vectors: np.ndarray | None,
                labels: Sequence[str] | None, acronyms: bool, acronym_similarity: float,
                surnames: bool) -> tuple[list[np.ndarray], list[np.ndarray], int, int]:
    """Stage 3: acronym and surname edges (unambiguous only); their counts."""
    u, tokens, lclass = len(keys.uniq), keys.tokens, keys.lclass
    edges_a: list[np.ndarray] = []
    edges_b: list[np.ndarray] = []
    n_words = tokens.n_full + tokens.n_init
    uniq_arr = np.asarray(keys.uniq, dtype=object)
    key_series = pd.Series(uniq_arr, dtype=object)
    key_len = key_series.str.len().to_numpy(dtype=np.int64)
    key_alpha = key_series.str.isalpha().to_numpy(dtype=bool)
    n_acr = n_sur = 0
    if acronyms and u:
        caps = pd.Series(names).str.replace(".", "", regex=False)
        is_caps = (caps.str.isupper() & ~caps.str.contains(" ", regex=False)).to_numpy(bool)
        acr_group = np.zeros(u, dtype=bool)
        acr_group[keys.gid[is_caps]] = True
        acr_group &= (n_words == 1) & (key_len >= 2) & (key_len <= 6) & key_alpha
        src, dst = rule_candidates(uniq_arr, acr_group, tokens.acronym, n_words >= 2)
        ok = unique_target(src, dst, comp)
        ok &= (lclass[src] < 0) | (lclass[dst] < 0) | (lclass[src] == lclass[dst])
        if vectors is not None:  # "TV" is not "Teen Vogue": the meaning must agree a little
            ok &= (vectors[src] * vectors[dst]).sum(axis=1) >= acronym_similarity
        src, dst = src[ok], dst[ok]
        n_acr = len(src)
        edges_a.append(src)
        edges_b.append(dst)
    if surnames and labels is not None and u:
        person = keys.person
        single = (tokens.n_full == 1) & (tokens.n_init == 0)
        single &= (lclass < 0) | (lclass == person)
        single &= (key_len >= 3) & key_alpha
        src, dst = rule_candidates(uniq_arr, single, tokens.last, n_words >= 2)
        keep = unique_target(src, dst, comp)
        keep &= (lclass[dst] == person) & (person >= 0) & (keys.nsig[src] == keys.nsig[dst])
        src, dst = src[keep], dst[keep]
        n_sur = len(src)
        edges_a.append(src)
        edges_b.append(dst)
    return edges_a, edges_b, n_acr, n_sur


def _entity_tables(names: list[str], keys: _Keys, comp: np.ndarray, cnt: np.ndarray,
                   labels: Sequence[str] | None
                   ) -> tuple[np.ndarray, np.ndarray, pd.DataFrame, pd.DataFrame]:
    """Entity ids (in order of first appearance) per name and per key; entities, aliases."""
    n, u = len(names), len(keys.uniq)
    comp_of_name = comp[keys.gid]
    _, first_idx, inverse = np.unique(comp_of_name, return_index=True, return_inverse=True)
    rank = np.empty(len(first_idx), dtype=np.int64)
    rank[np.argsort(first_idx, kind="stable")] = np.arange(len(first_idx))
    entity_of_name = rank[inverse].astype(np.int32)
    entity_of_key = np.empty(u, dtype=np.int64)
    entity_of_key[keys.gid] = entity_of_name
    n_entities = len(first_idx)

    lengths = np.fromiter((len(s) for s in names), dtype=np.int64, count=n)
    order = np.lexsort((np.arange(n), -lengths, -cnt, entity_of_name))
    first_of = order[np.r_[True, entity_of_name[order][1:] != entity_of_name[order][:-1]]]
    label_arr = (
        np.full(n, "", dtype=object)
        if labels is None
        else pd.Series(list(labels), dtype=object).fillna("").astype(str).to_numpy(dtype=object)
    )
    label_id, label_vocab = pd.factorize(pd.Series(label_arr).replace("", np.nan))
    best_label = group_mode(entity_of_name.astype(np.int64), label_id, cnt, n_entities)
    label_vocab = np.asarray([*label_vocab, ""], dtype=object)
    entities = pd.DataFrame(
        {
            "entity_id": np.arange(n_entities, dtype=np.int32),
            "name": np.asarray(names, dtype=object)[first_of],
            "n_aliases": np.bincount(entity_of_name, minlength=n_entities).astype(np.int32),
            "count": np.bincount(entity_of_name, weights=cnt, minlength=n_entities),
            "label": label_vocab[best_label],
        }
    )
    aliases = pd.DataFrame({"name": names, "entity_id": entity_of_name})
    return entity_of_name, entity_of_key, entities, aliases


def _synonyms(p: _Pairs, entity_of_key: np.ndarray, synonym_threshold: float) -> pd.DataFrame:
    """Entity pairs that did not merge but are near-synonyms (soft graph edges)."""
    ea, eb = entity_of_key[p.pi], entity_of_key[p.pj]
    compatible = (p.i_in_j & p.j_in_i) | p.variant | p.contained
    syn = (ea != eb) & (p.ps >= synonym_threshold) & p.num_ok & p.label_ok & compatible
    synonyms = pd.DataFrame(
        {"a": np.minimum(ea, eb)[syn], "b": np.maximum(ea, eb)[syn], "score": p.ps[syn]}
    )
    return (
        synonyms.sort_values("score", ascending=False)
        .drop_duplicates(["a", "b"])
        .sort_values(["a", "b"])
        .reset_index(drop=True)
        .astype({"a": np.int32, "b": np.int32, "score": np.float32})
    )


def _empty_resolution() -> AliasResolution:
    return AliasResolution(
        np.zeros(0, dtype=np.int32),
        pd.DataFrame({"entity_id": np.zeros(0, np.int32), "name": [], "n_aliases": 0,
                      "count": 0.0, "label": []}),
        pd.DataFrame({"name": [], "entity_id": np.zeros(0, np.int32)}),
        pd.DataFrame({"a": np.zeros(0, np.int32), "b": np.zeros(0, np.int32),
                      "score": np.zeros(0, np.float32)}),
        {"names": 0, "normalized": 0, "entities": 0, "merged": 0},
    )


def resolve_aliases(
    names: Sequence[str],
    embedder: Embedder | None = None,
    merge_threshold: float = 0.9,
    synonym_threshold: float = 0.8,
    k: int = 10,
    *,
    counts: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[str] | None = None,
    embeddings: np.ndarray | None = None,
    batch_size: int = 256,
    exact_limit: int = 5_000,
    nested_threshold: float = 0.95,
    token_similarity: float = 0.85,
    acronyms: bool = True,
    acronym_similarity: float = 0.5,
    surnames: bool = True,
    knn: Callable[..., Any] | None = None,
    search_dim: int | None = 128,
    hnsw_m: int = 16,
    hnsw_ef_construction: int = 40,
    hnsw_ef_search: int = 32,
) -> AliasResolution:
    """Group unique surface ``names`` into entities (see the module docstring).

    ``embedder`` embeds the normalized keys; alternatively pass ``embeddings`` (one unit row per
    name, e.g. vectors the index computes anyway; rows of one key are averaged). With neither,
    only the exact and rule stages run. ``counts`` (mentions per name) pick display names and
    weigh labels; ``labels`` (entity type per name, e.g. spaCy's) enable the type guard and
    the surname rule. ``knn`` is the runtime's kNN component (default: host FAISS).

    Thresholds are cosines of the name embeddings: ``merge_threshold`` for merging,
    ``nested_threshold`` for merging a several-word name into a longer one containing it,
    ``synonym_threshold`` for synonym pairs, ``acronym_similarity`` as the floor for acronym
    merges; ``token_similarity`` is the character (Indel) similarity that makes two differing
    words spelling variants; ``k`` neighbours per key; ``exact_limit`` keys switch the host
    search from exact to HNSW (``hnsw_*`` over ``search_dim`` PCA dimensions). The build
    passes every one from its :class:`~gpurag.profile.BuildProfile`
    (:func:`~gpurag.profile.alias_options`); the defaults here are profile ``default``'s.
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    names = [str(x) for x in names]
    n = len(names)
    cnt = np.ones(n, dtype=np.float64) if counts is None else np.asarray(counts, np.float64)
    if len(cnt) != n:
        raise ValueError(f"counts has {len(cnt)} entries for {n} names")
    if embeddings is not None and len(embeddings) != n:
        raise ValueError(f"embeddings has {len(embeddings)} rows for {n} names")
    if n == 0:
        return _empty_resolution()

    keys = _keys(names, labels, cnt)
    u = len(keys.uniq)
    timings["features_s"] = time.perf_counter() - t0

    t = time.perf_counter()
    vectors = _key_vectors(keys, embeddings, embedder, batch_size)
    timings["embed_s"] = time.perf_counter() - t

    t = time.perf_counter()
    low = min(merge_threshold, synonym_threshold)
    if vectors is not None:
        pi, pj, ps = knn_pairs(vectors, k, low, exact_limit=exact_limit, knn=knn,
                               search_dim=search_dim, hnsw_m=hnsw_m,
                               hnsw_ef_construction=hnsw_ef_construction,
                               hnsw_ef_search=hnsw_ef_search)
    else:
        pi = pj = np.zeros(0, np.int64)
        ps = np.zeros(0, np.float32)
    timings["knn_s"] = time.perf_counter() - t

    t = time.perf_counter()
    pairs = _judge_pairs(keys, pi, pj, ps, merge_threshold, low, nested_threshold,
                         token_similarity)
    edges_a, edges_b = _merge_edges(keys, pairs)
    comp = components(u, np.concatenate(edges_a), np.concatenate(edges_b))
    timings["pairs_s"] = time.perf_counter() - t

    t = time.perf_counter()
    rule_a, rule_b, n_acr, n_sur = _rule_edges(keys, names, comp, vectors, labels, acronyms,
                                               acronym_similarity, surnames)
    comp = components(u, np.concatenate(edges_a + rule_a), np.concatenate(edges_b + rule_b))
    timings["rules_s"] = time.perf_counter() - t

    t = time.perf_counter()
    entity_of_name, entity_of_key, entities, aliases = _entity_tables(names, keys, comp, cnt,
                                                                      labels)
    synonyms = _synonyms(pairs, entity_of_key, synonym_threshold)
    timings["tables_s"] = time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - t0

    n_entities = len(entities)
    stats = {
        "names": n,
        "normalized": u,
        "entities": n_entities,
        "merged": n - n_entities,
        "merged_exact": n - u,
        "knn_pairs": len(pi),
        "merge_pairs_same": int(pairs.same.sum()),
        "merge_pairs_nested": pairs.n_nested,
        "nested_ambiguous": int(pairs.nested.sum() - pairs.n_nested),
        "blocked_numbers": int(((ps >= merge_threshold) & ~pairs.num_ok).sum()),
        "blocked_labels": int(((ps >= merge_threshold) & pairs.num_ok & ~pairs.label_ok).sum()),
        "blocked_tokens": int((pairs.strong & ~pairs.same & ~pairs.nested).sum()),
        "acronym_merges": n_acr,
        "surname_merges": n_sur,
        "synonym_pairs": len(synonyms),
        **{key: round(val, 3) for key, val in timings.items()},
    }
    log.info("alias resolution: %s", stats)
    return AliasResolution(entity_of_name, entities, aliases, synonyms, stats, keys.of_name)
