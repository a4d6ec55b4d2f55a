"""Alias resolution: normalization, merges, guards against wrong merges, output tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpurag.errors import ConfigError
from gpurag.resolve import AliasResolution, knn_pairs, normalize_name, resolve_aliases


@pytest.fixture(scope="module")
def embedder():
    from gpurag.backends.embed import load_embedder

    try:
        return load_embedder()
    except ConfigError as exc:  # pragma: no cover - the default embedder is a core dependency
        pytest.skip(f"default embedder unavailable: {exc}")


def _same(res: AliasResolution, names: list[str], a: str, b: str) -> bool:
    return res.entity_of_name[names.index(a)] == res.entity_of_name[names.index(b)]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Kestrel Dynamics Ltd.", "Kestrel Dynamics"),
        ("The Beatles", "Beatles"),
        ("J. R. R. Tolkien", "JRR Tolkien"),
        ("J.R.R. Tolkien", "jrr  tolkien"),
        ("McDonald's", "McDonald"),
        ("World War II", "World War 2"),
        ("Apollo XI", "Apollo 11"),
        ("Léon Blum", "Leon Blum"),
        ("AT&T Inc.", "AT&T"),
        ("Person - centered therapy", "person-centered therapy"),
        ("Acme Corp.", "ACME Corporation"),
    ],
)
def test_normalize_equal(a, b):
    na, nb = normalize_name([a, b])
    assert na == nb


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Apollo 11", "Apollo 12"),
        ("Malcolm X", "Malcolm"),
        ("Elizabeth I", "Elizabeth II"),
        ("Henry V", "Henry VI"),
        ("Paris", "Paris Hilton"),
    ],
)
def test_normalize_distinct(a, b):
    na, nb = normalize_name([a, b])
    assert na != nb
    assert na and nb


def test_normalize_never_empty():
    assert all(normalize_name(["The", "A", "!!!", "Inc.", "  "])[:4])


MERGE = [
    ("Kestrel Dynamics Ltd.", "Kestrel Dynamics"),
    ("The Beatles", "Beatles"),
    ("J. R. R. Tolkien", "JRR Tolkien"),
    ("NBA", "National Basketball Association"),
    ("Harrow School Shanghai", "Harrow International School Shanghai"),
]
APART = [
    ("Apollo 11", "Apollo 12"),
    ("1990", "1991"),
    ("Paris", "Paris Hilton"),
    ("John Smith", "John Smythe"),
    ("Obama", "Barack Obama"),  # ambiguous: Michelle Obama too
    ("Obama", "Michelle Obama"),
    ("Barack Obama", "Michelle Obama"),
    ("University of Copenhagen", "Copenhagen"),
]
NAMES = list(dict.fromkeys([n for pair in MERGE + APART for n in pair]))


@pytest.fixture(scope="module")
def resolution(embedder) -> AliasResolution:
    return resolve_aliases(NAMES, embedder)


@pytest.mark.parametrize(("a", "b"), MERGE)
def test_merges(resolution, a, b):
    assert _same(resolution, NAMES, a, b)


@pytest.mark.parametrize(("a", "b"), APART)
def test_stays_apart(resolution, a, b):
    assert not _same(resolution, NAMES, a, b)


def test_tables(resolution):
    res = resolution
    n_ent = len(res.entities)
    assert res.entity_of_name.dtype == np.int32
    assert len(res.entity_of_name) == len(NAMES)
    # ids are dense and numbered by first appearance
    first = pd.unique(res.entity_of_name)
    assert list(first) == list(range(n_ent))
    assert list(res.entities.columns[:3]) == ["entity_id", "name", "n_aliases"]
    assert res.entities["n_aliases"].sum() == len(NAMES)
    assert list(res.aliases["name"]) == NAMES
    assert (res.aliases["entity_id"].to_numpy() == res.entity_of_name).all()
    # the display name is one of the entity's aliases (the longest without counts)
    kd = res.entity_of_name[NAMES.index("Kestrel Dynamics")]
    assert res.entities.loc[kd, "name"] == "Kestrel Dynamics Ltd."
    st = res.stats
    assert st["names"] == len(NAMES) and st["entities"] == n_ent
    assert st["merged"] == len(NAMES) - n_ent
    assert st["blocked_numbers"] >= 1  # Apollo 11 / 12 are close in embedding space


def test_synonym_pairs(resolution):
    syn = resolution.synonym_pairs
    assert list(syn.columns) == ["a", "b", "score"]
    assert (syn["a"] < syn["b"]).all()
    assert ((syn["score"] >= 0.8) & (syn["score"] <= 1.0 + 1e-6)).all()
    ent = resolution.entity_of_name
    obama = {ent[NAMES.index("Obama")], ent[NAMES.index("Barack Obama")]}
    assert tuple(sorted(obama)) in set(zip(syn["a"], syn["b"], strict=True))
    numbers = {ent[NAMES.index(x)] for x in ("Apollo 11", "Apollo 12", "1990", "1991")}
    for a, b in zip(syn["a"], syn["b"], strict=True):
        assert not ({a, b} <= numbers)


def test_counts_pick_display_name(embedder):
    names = ["The Beatles", "Beatles", "beatles"]
    res = resolve_aliases(names, embedder, counts=[1, 5, 2])
    assert len(res.entities) == 1
    assert res.entities.loc[0, "name"] == "Beatles"
    assert res.entities.loc[0, "count"] == 8


def test_label_guard(embedder):
    names = ["Paris", "Paris Hilton"]
    loose = resolve_aliases(names, embedder, merge_threshold=0.5)
    assert _same(loose, names, "Paris", "Paris Hilton")  # only the threshold kept them apart
    typed = resolve_aliases(names, embedder, merge_threshold=0.5, labels=["GPE", "PERSON"])
    assert not _same(typed, names, "Paris", "Paris Hilton")
    assert typed.stats["blocked_labels"] == 1


def test_surname_rule(embedder):
    names = ["J. R. R. Tolkien", "Tolkien", "Washington", "George Washington",
             "University of Washington", "Paris"]
    labels = ["PERSON", "PERSON", "GPE", "PERSON", "ORG", "GPE"]
    res = resolve_aliases(names, embedder, labels=labels)
    assert _same(res, names, "Tolkien", "J. R. R. Tolkien")
    assert not _same(res, names, "Washington", "George Washington")  # ambiguous surname
    assert res.stats["surname_merges"] == 1
    assert res.entities.loc[res.entity_of_name[1], "label"] == "PERSON"
    unlabeled = resolve_aliases(names, embedder)
    assert not _same(unlabeled, names, "Tolkien", "J. R. R. Tolkien")


def test_precomputed_embeddings_and_no_chaining():
    # hand-made vectors: every name is a near-duplicate of every other
    names = ["Smith", "John Smith", "Jane Smith", "John Smith Jr", "Apollo 11", "Apollo 12",
             "Kennedy", "John F. Kennedy", "John Fitzgerald Kennedy"]
    vecs = np.ones((len(names), 8), dtype=np.float32)
    vecs += np.random.default_rng(0).normal(scale=1e-3, size=vecs.shape).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    res = resolve_aliases(names, None, embeddings=vecs)
    assert not _same(res, names, "John Smith", "Jane Smith")  # conflicting first names
    assert not _same(res, names, "Smith", "John Smith")  # ambiguous short name
    assert not _same(res, names, "Apollo 11", "Apollo 12")
    assert _same(res, names, "John F. Kennedy", "John Fitzgerald Kennedy")  # initial matches
    assert not _same(res, names, "Kennedy", "Apollo 11")
    # chaining through "John Smith" would join these two
    assert not _same(res, names, "John Smith Jr", "Jane Smith")


def test_spelling_variant_merges_but_different_surname_does_not():
    names = ["person centered therapy", "person centred therapy", "John Smith", "John Smythe",
             "APOBEC3A", "APOBEC3B", "Krishna Kumar", "Krishna Kumari"]
    vecs = np.tile(np.eye(1, 4, dtype=np.float32), (len(names), 1))
    res = resolve_aliases(names, None, embeddings=vecs)
    assert _same(res, names, "person centered therapy", "person centred therapy")
    assert not _same(res, names, "John Smith", "John Smythe")
    assert not _same(res, names, "APOBEC3A", "APOBEC3B")
    assert not _same(res, names, "Krishna Kumar", "Krishna Kumari")


def test_nested_names_need_word_order_and_stricter_threshold():
    names = ["University of Pennsylvania", "Pennsylvania State University",
             "University of London", "University College London",
             "Catholic Church", "Roman Catholic Church", "Sabres", "Buffalo Sabres"]
    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(len(names), 16)).astype(np.float32)
    for a in range(0, len(names), 2):  # each pair at cosine ~0.93, other pairs far apart
        vecs[a + 1] = 0.93 * vecs[a] / np.linalg.norm(vecs[a]) + 0.37 * _unit_orth(vecs[a], rng)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    res = resolve_aliases(names, None, embeddings=vecs)
    assert not _same(res, names, "University of Pennsylvania", "Pennsylvania State University")
    assert not _same(res, names, "University of London", "University College London")
    assert _same(res, names, "Sabres", "Buffalo Sabres")  # one distinctive word
    assert not _same(res, names, "Catholic Church", "Roman Catholic Church")
    syn = set(zip(res.synonym_pairs["a"], res.synonym_pairs["b"], strict=True))
    ent = res.entity_of_name
    assert tuple(sorted((ent[4], ent[5]))) in syn  # below nested_threshold: a synonym edge
    loose = resolve_aliases(names, None, embeddings=vecs, nested_threshold=0.9)
    assert _same(loose, names, "Catholic Church", "Roman Catholic Church")
    assert not _same(loose, names, "University of Pennsylvania", "Pennsylvania State University")


def _unit_orth(v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    r = rng.normal(size=v.shape).astype(np.float32)
    r -= (r @ v) / (v @ v) * v
    return r / np.linalg.norm(r)


def test_without_embedder_only_exact_and_rules():
    names = ["The Beatles", "Beatles", "NBA", "National Basketball Association", "Obama",
             "Barack Obama"]
    res = resolve_aliases(names, None)
    assert _same(res, names, "The Beatles", "Beatles")
    assert _same(res, names, "NBA", "National Basketball Association")
    assert not _same(res, names, "Obama", "Barack Obama")
    assert res.stats["knn_pairs"] == 0 and len(res.synonym_pairs) == 0


def test_empty_and_validation():
    res = resolve_aliases([], None)
    assert len(res.entity_of_name) == 0 and len(res.entities) == 0
    with pytest.raises(ValueError):
        resolve_aliases(["a", "b"], None, counts=[1])
    with pytest.raises(ValueError):
        resolve_aliases(["a", "b"], None, labels=["X"])


@pytest.mark.parametrize(
    ("exact_limit", "search_dim"), [(10_000, None), (0, None), (0, 8)]
)  # flat, HNSW, HNSW over PCA-reduced vectors
def test_knn_pairs(exact_limit, search_dim):
    rng = np.random.default_rng(1)
    base = rng.normal(size=(300, 16)).astype(np.float32)
    x = np.concatenate([base, base + rng.normal(scale=0.05, size=base.shape)]).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    i, j, s = knn_pairs(x, k=5, threshold=0.9, exact_limit=exact_limit, search_dim=search_dim)
    assert (i < j).all() and (s >= 0.9).all()
    assert len(set(zip(i.tolist(), j.tolist(), strict=True))) == len(i)
    found = set(zip(i.tolist(), j.tolist(), strict=True))
    twins = {(a, a + 300) for a in range(300)}
    assert len(found & twins) >= 0.95 * 300
    assert np.allclose(s, (x[i] * x[j]).sum(1), atol=1e-4)


def test_scales_vectorized():
    # 20k names with random vectors: must stay well within seconds (no per-pair Python loops)
    rng = np.random.default_rng(0)
    names = [f"name {a} {b}" for a, b in rng.integers(0, 10**6, size=(20_000, 2))]
    names = list(dict.fromkeys(names))
    vecs = rng.normal(size=(len(names), 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    res = resolve_aliases(names, None, embeddings=vecs, exact_limit=0)
    assert len(res.entities) == len(names)  # different numbers: nothing merges
