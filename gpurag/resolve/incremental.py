"""Alias resolution of the names an insert brings, against the names an index already holds.

Only the names not stored yet are resolved. Each is looked up in the stored name index (its
``k`` nearest stored names at or above the lower threshold) and by its normalized key (a stored
name with the same key is the same entity, as in the exact stage); the stored entities found
that way, with all their names and stored vectors, and the new names form a small problem that
:func:`~gpurag.resolve.aliases.resolve_aliases` solves with every guard of a full resolution.
Its groups place the new names: a group holding stored names joins the largest stored entity
among them, a group of new names only becomes a new entity (ids after the stored ones, in order
of first appearance). Stored entities are never merged or split by an insert; synonym pairs are
kept where one side is a new entity (a pair of stored entities is already in the graph or was
not a pair in the build). This is the approximation an incremental index states in its
manifest; ``gpurag compact`` gives the full resolution back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gpurag.arrays import isin_sorted, unique_sorted
from gpurag.resolve.aliases import resolve_aliases
from gpurag.resolve.groups import group_mode
from gpurag.resolve.normalize import normalize_name


@dataclass
class LocalResolution:
    """Where the new names go.

    ``entity``: entity id of each of the ``unseen`` names (stored ids below ``n_stored``, new
    ones from ``n_stored``); ``new_labels``: the label of each new entity (its names' most
    frequent, by count); ``synonym_pairs``: ``a`` < ``b`` global entity ids with ``score``,
    at least one of them new; ``neighbours``: how many stored names the subproblem held.
    """

    entity: np.ndarray
    n_stored: int
    new_labels: list[str]
    synonym_pairs: pd.DataFrame
    neighbours: int


def _empty_pairs() -> pd.DataFrame:
    return pd.DataFrame({"a": np.zeros(0, np.int32), "b": np.zeros(0, np.int32),
                         "score": np.zeros(0, np.float32)})


def resolve_new_names(unseen: Sequence[str], unseen_vectors: np.ndarray,
                      unseen_counts: np.ndarray, unseen_labels: Sequence[str], *,
                      stored_names: pd.DataFrame, stored_keys: Sequence[str],
                      entity_counts: np.ndarray, entity_labels: np.ndarray,
                      search, decode, merge_threshold: float, synonym_threshold: float,
                      k: int = 10, **options: Any) -> LocalResolution:
    """Resolve ``unseen`` names (with their stored-precision vectors, counts and labels) against
    the stored names (``stored_names``: ``name``, ``entity``, ``count`` rows; ``stored_keys``:
    their normalized keys, a list or a column; ``entity_counts``/``entity_labels`` per stored
    entity).

    ``search(vectors, k) -> (scores, ids)`` searches the stored name index, ``decode(rows)``
    returns the stored vectors of those rows. ``options``: the other keywords of
    :func:`resolve_aliases` (the build profile's, :func:`~gpurag.profile.alias_options`).
    """
    n_stored = len(entity_counts)
    unseen = [str(u) for u in unseen]
    if not unseen:
        return LocalResolution(np.zeros(0, np.int64), n_stored, [], _empty_pairs(), 0)
    low = min(merge_threshold, synonym_threshold)
    stored_entity = stored_names["entity"].to_numpy(np.int64)
    seeds: list[np.ndarray] = []
    if len(stored_names):
        scores, ids = search(np.ascontiguousarray(unseen_vectors, np.float32),
                             min(k, len(stored_names)))
        ids = np.asarray(ids, np.int64)
        hit = (ids >= 0) & (np.asarray(scores) >= low)
        seeds.append(stored_entity[ids[hit]])
        # a hash of the new keys probed with the stored ones (not a hash of every stored key)
        same_key = np.asarray(pd.Series(stored_keys, copy=False).isin(normalize_name(unseen)),
                              bool)
        seeds.append(stored_entity[same_key & (stored_names["count"].to_numpy() > 0)])
    seed_entities = unique_sorted(np.concatenate(seeds)) if seeds else np.zeros(0, np.int64)
    # the seed entities' names, less those a local delete blanked (count 0)
    rows = np.flatnonzero(isin_sorted(stored_entity, seed_entities)
                          & (stored_names["count"].to_numpy() > 0))
    sub_names = stored_names["name"].iloc[rows].astype(str).tolist()
    sub_entity = stored_entity[rows]
    vectors = np.concatenate([decode(rows), np.asarray(unseen_vectors, np.float32)])
    counts = np.concatenate([stored_names["count"].to_numpy(np.float64)[rows],
                             np.asarray(unseen_counts, np.float64)])
    labels = [str(x) for x in entity_labels[sub_entity]] + [str(x) for x in unseen_labels]
    res = resolve_aliases(sub_names + unseen, merge_threshold=merge_threshold,
                          synonym_threshold=synonym_threshold, k=k, counts=counts,
                          labels=labels, embeddings=vectors, **options)
    comp = res.entity_of_name.astype(np.int64)
    n_comp = int(comp.max()) + 1
    # each group with stored names joins its largest stored entity (ties: the lowest id)
    target = np.full(n_comp, -1, np.int64)
    if len(rows):
        frame = pd.DataFrame({"comp": comp[: len(rows)], "entity": sub_entity,
                              "n": entity_counts[sub_entity]}).drop_duplicates(["comp", "entity"])
        best = frame.sort_values(["comp", "n", "entity"], ascending=[True, False, True],
                                 kind="stable").drop_duplicates("comp")
        target[best["comp"].to_numpy()] = best["entity"].to_numpy()
    new_comp = comp[len(rows):]
    fresh = target[new_comp] < 0
    order = pd.unique(new_comp[fresh])  # new entities in order of first appearance
    target[order] = n_stored + np.arange(len(order))
    entity = target[new_comp]
    # labels of the new entities: their names' most frequent label
    label_id, vocab = pd.factorize(pd.Series(list(unseen_labels), dtype=object)
                                   .replace("", np.nan))
    groups = entity[fresh] - n_stored
    best_label = group_mode(groups, label_id[fresh], np.asarray(unseen_counts, np.float64)[fresh],
                            len(order))
    vocab = np.asarray([*vocab, ""], dtype=object)
    new_labels = [str(x) for x in vocab[best_label]]
    syn = res.synonym_pairs
    ga, gb = target[syn["a"].to_numpy(np.int64)], target[syn["b"].to_numpy(np.int64)]
    keep = (ga != gb) & (np.maximum(ga, gb) >= n_stored)
    pairs = pd.DataFrame({"a": np.minimum(ga, gb)[keep], "b": np.maximum(ga, gb)[keep],
                          "score": syn["score"].to_numpy(np.float32)[keep]})
    pairs = (pairs.sort_values("score", ascending=False, kind="stable")
             .drop_duplicates(["a", "b"]).sort_values(["a", "b"]).reset_index(drop=True)
             .astype({"a": np.int32, "b": np.int32, "score": np.float32}))
    return LocalResolution(entity, n_stored, new_labels, pairs, len(rows))
