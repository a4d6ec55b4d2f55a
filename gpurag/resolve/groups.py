"""Group-level helpers of alias resolution: components, type classes, per-group modes and the
uniqueness tests that keep short or ambiguous names from merging."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp

# entity-type classes used by the type guard; labels not listed are wildcards
LABEL_CLASSES: dict[str, str] = {
    **dict.fromkeys(["person", "per", "people"], "person"),
    **dict.fromkeys(["gpe", "loc", "fac", "location", "place", "geo", "country", "city"], "place"),
    **dict.fromkeys(["org", "organization", "organisation", "company"], "org"),
    "norp": "group",
    **dict.fromkeys(["date", "time", "year"], "time"),
    **dict.fromkeys(["cardinal", "ordinal", "quantity", "money", "percent"], "number"),
    "event": "event",
    **dict.fromkeys(["work_of_art", "work"], "work"),
    "product": "product",
    "law": "law",
    "language": "language",
}
PERSON = "person"


def components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected-component id of each of ``n`` nodes joined by the edges ``(a, b)`` (int32),
    numbered in the order of each component's smallest node: the labels SciPy's
    ``connected_components(directed=False)`` gives, without importing ``scipy.sparse.csgraph``
    (which loads ``scipy.sparse.linalg`` and ``scipy.linalg``: a third of a second of every
    process that resolves names, a local insert's included).

    Union by hooking each root onto the smallest root it shares an edge with, then full path
    compression, until every edge joins one root: the root of a component is its smallest
    node."""
    parent = np.arange(n, dtype=np.int64)
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    while True:
        ra, rb = parent[a], parent[b]
        apart = ra != rb
        if not apart.any():
            break
        ra, rb = ra[apart], rb[apart]
        np.minimum.at(parent, np.maximum(ra, rb), np.minimum(ra, rb))
        while True:  # every node points at its root
            up = parent[parent]
            if np.array_equal(up, parent):
                break
            parent = up
    return np.unique(parent, return_inverse=True)[1].astype(np.int32).reshape(n)


def label_classes(labels: Sequence[str] | None, n: int) -> tuple[np.ndarray, int]:
    """Type class id per name (-1 = wildcard) and the id of the person class (-1 if absent)."""
    if labels is None:
        return np.full(n, -1, dtype=np.int64), -1
    if len(labels) != n:
        raise ValueError(f"labels has {len(labels)} entries for {n} names")
    classes = pd.Series(list(labels), dtype=object).fillna("").astype(str).str.lower()
    codes, vocab = pd.factorize(classes.map(LABEL_CLASSES), use_na_sentinel=True)
    person = np.flatnonzero(np.asarray(vocab, dtype=object) == PERSON)
    return codes.astype(np.int64), int(person[0]) if len(person) else -1


def group_mode(group: np.ndarray, value: np.ndarray, weight: np.ndarray, n_groups: int):
    """Most weighted non-negative ``value`` per group (-1 when none)."""
    out = np.full(n_groups, -1, dtype=np.int64)
    ok = value >= 0
    if ok.any():
        frame = pd.DataFrame({"g": group[ok], "v": value[ok], "w": weight[ok]})
        summed = frame.groupby(["g", "v"], sort=False)["w"].sum().reset_index()
        best = summed.sort_values(["g", "w", "v"], ascending=[True, False, True])
        best = best.drop_duplicates("g")
        out[best["g"].to_numpy()] = best["v"].to_numpy()
    return out


def unique_target(source: np.ndarray, target: np.ndarray, comp: np.ndarray) -> np.ndarray:
    """Mask of candidate pairs ``(source, target)`` whose source entity (component) has
    candidates in exactly one other entity: an ambiguous short name merges with none."""
    sc, tc = comp[source], comp[target]
    frame = pd.DataFrame({"sc": sc, "tc": tc})[sc != tc]
    n_targets = np.zeros(len(source), dtype=np.int64)
    n_targets[frame.index.to_numpy()] = frame.groupby("sc")["tc"].transform("nunique").to_numpy()
    return n_targets == 1


def word_entity_counts(full: sp.csr_matrix, comp: np.ndarray) -> np.ndarray:
    """For each token: the number of distinct entities (components) whose keys contain it."""
    coo = full.tocoo()
    frame = pd.DataFrame({"tok": coo.col, "comp": comp[coo.row]}).drop_duplicates()
    return np.bincount(frame["tok"].to_numpy(), minlength=full.shape[1])


def rule_candidates(
    keys: np.ndarray, source: np.ndarray, target_key: np.ndarray, target_ok: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (s, t): ``source[s]`` and ``target_ok[t]`` and ``keys[s] == target_key[t]``."""
    src = pd.DataFrame({"s": np.flatnonzero(source), "key": keys[source]})
    tgt_idx = np.flatnonzero(target_ok & (target_key != ""))
    tgt = pd.DataFrame({"t": tgt_idx, "key": target_key[tgt_idx]})
    pairs = src.merge(tgt, on="key", how="inner")
    pairs = pairs[pairs["s"] != pairs["t"]]
    return pairs["s"].to_numpy(np.int64), pairs["t"].to_numpy(np.int64)
