"""The build profile reaches the build: a custom profile's constants change what the index
holds (alias groups, HNSW graphs), the manifest records the profile's name, version and
constants, and an update of the index reads the recorded ones."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from gpurag import Index
from gpurag.backends.embed import load_embedder
from gpurag.config import IndexConfig, build_plan
from gpurag.extract import make_extractor
from gpurag.pipeline import graph_stage as gs
from gpurag.profile import BuildProfile, alias_options, build_profile_fields
from gpurag.store import layout

CORPUS = Path(__file__).parent / "data" / "bridge_corpus.jsonl"
LOOSE = BuildProfile(name="loose", version=2, merge_threshold=0.6, nested_threshold=0.6,
                     hnsw_m=8, hnsw_ef_construction=20, hnsw_ef_search=50)


@pytest.fixture(scope="module")
def chunks() -> pd.DataFrame:
    recs = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return pd.DataFrame({"chunk_id": [r["id"] for r in recs], "doc_id": [r["id"] for r in recs],
                         "title": [r.get("title", "") for r in recs],
                         "text": [r["text"] for r in recs]})


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Index]:
    root = tmp_path_factory.mktemp("profiles")
    return {name: Index.build(CORPUS, root / name, show_progress=False, hnsw_threshold=1,
                              **({"profile": LOOSE} if name == "loose" else {}))
            for name in ("default", "loose")}


def test_a_custom_merge_threshold_changes_the_alias_groups(chunks):
    ex, embedder = make_extractor("fast").extract(chunks), load_embedder("minilm")
    default = gs.resolve_entities(ex, embedder, build_plan(IndexConfig()))
    loose = gs.resolve_entities(ex, embedder, build_plan(IndexConfig(), {"profile": LOOSE}))
    assert len(loose.name_to_entity) == len(default.name_to_entity)
    assert len(loose.entities) < len(default.entities)  # more names merged


def test_every_alias_constant_reaches_resolve_aliases(chunks, monkeypatch):
    import gpurag.resolve as resolve

    seen: list[dict] = []
    real = resolve.resolve_aliases

    def recording(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(resolve, "resolve_aliases", recording)
    odd = BuildProfile(**{name: rule.coerce(_other(name, rule)) for name, rule in
                          build_profile_fields().items()})
    gs.resolve_entities(make_extractor("fast").extract(chunks), load_embedder("minilm"),
                        build_plan(IndexConfig(), {"profile": odd}))
    wanted = alias_options(odd)
    assert wanted != alias_options(BuildProfile())
    assert {k: seen[0][k] for k in wanted} == wanted


def _other(name: str, rule) -> object:
    """A valid value of constant ``name`` other than profile default's."""
    value = getattr(BuildProfile(), name)
    if rule.kind is bool:
        return not value
    if rule.hi is not None and value + 0.01 > rule.hi:
        return value - 0.01
    return value + (1 if rule.kind is int else 0.01)


def test_the_alias_knn_takes_the_profiles_hnsw(monkeypatch):
    import numpy as np

    from gpurag.resolve import resolve_aliases
    from gpurag.vectors import hnsw

    made: list[dict] = []
    real = hnsw.ReducedHNSW.__init__

    def recording(self, vectors, **kwargs):
        made.append(kwargs)
        real(self, vectors, **kwargs)

    monkeypatch.setattr(hnsw.ReducedHNSW, "__init__", recording)
    x = np.random.default_rng(0).standard_normal((40, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    resolve_aliases([f"name {i}" for i in range(40)], embeddings=x, exact_limit=10,
                    search_dim=8, hnsw_m=4, hnsw_ef_construction=12, hnsw_ef_search=24)
    assert made == [{"search_dim": 8, "hnsw_m": 4, "ef_search": 24, "ef_construction": 12}]


def test_the_manifest_records_the_build_profile(built):
    config = built["loose"].manifest.config
    assert (config["profile"], config["profile_version"]) == ("loose", 2)
    assert {k: config[k] for k in build_profile_fields()} == LOOSE.constants()
    assert built["loose"].config.build_profile() == dataclasses.replace(
        LOOSE, evaluated_by=BuildProfile().evaluated_by)
    plain = built["default"].manifest.config
    assert (plain["profile"], plain["profile_version"]) == ("default", 1)
    assert built["loose"].info()["build_profile"] == "loose@2"
    assert {k: plain[k] for k in build_profile_fields()} == BuildProfile().constants()


def test_the_hnsw_graphs_take_the_profiles_constants(built):
    import faiss

    for name, (m, ef_search) in {"default": (16, 96), "loose": (8, 50)}.items():
        for rel in (layout.NAMES_FAISS, layout.FACTS_FAISS):
            stored = built[name].dir.faiss(rel)  # held: the downcast view does not own it
            index = faiss.downcast_index(stored)
            assert (index.hnsw.nb_neighbors(0), index.hnsw.efSearch) == (2 * m, ef_search), rel
            assert index.hnsw.efConstruction == (80 if name == "default" else 20)


def test_an_update_reads_the_recorded_profile(built):
    from gpurag.pipeline.incremental import load_stored
    from gpurag.pipeline.incremental_local import stored_config

    d = built["loose"].dir
    assert stored_config(d).build_profile().constants() == LOOSE.constants()
    assert load_stored(d).config.build_profile().constants() == LOOSE.constants()
