"""What a graph query no longer redoes per question (issue 26): the query plan of the same
settings, its corpus resolution and the entity names' BM25 tokens are made once and reused,
and every result is what making them afresh gives."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gpurag.api as api
from gpurag.errors import ConfigError
from tests.conftest import _open_clean


@pytest.fixture
def index(graph_index_path):
    return _open_clean(graph_index_path)  # its own: these tests change its query config


def test_the_same_settings_give_the_same_plan_object(index, monkeypatch):
    made = []
    real = api.query_plan
    monkeypatch.setattr(api, "query_plan", lambda *a: made.append(a[1]) or real(*a))
    first = index._query_plan({"k": 5})
    assert index._query_plan({"k": 5}) is first and len(made) == 1
    assert first[1] == real(index.query_config, {"k": 5}, "query")[1]
    assert index._query_plan({"k": 6})[1].k == 6  # other values: another plan
    assert index._query_plan({"k": 5, "damping": 0.7})[1].damping == 0.7
    index.query_config.ppr_tol = 1e-3  # the config changed in place: planned again
    assert index._query_plan({"k": 5})[1].ppr_tol == 1e-3
    with pytest.raises(ConfigError):  # a bad value still raises, every time
        index._query_plan({"k": 5, "damping": "x"})
    with pytest.raises(ConfigError):
        index._query_plan({"k": 5, "damping": "x"})
    made.clear()
    index._query_plan({"k": 5, "rerank_candidates": 3})
    with pytest.raises(ConfigError):  # equal to 3 as a key, yet not a whole number
        index._query_plan({"k": 5, "rerank_candidates": 3.0})
    assert len(made) == 2


def test_unhashable_option_values_are_planned_each_time(index, monkeypatch):
    made = []
    real = api.query_plan
    monkeypatch.setattr(api, "query_plan", lambda *a: made.append(1) or real(*a))
    for _ in range(2):
        with pytest.raises(ConfigError):
            index._query_plan({"k": 5, "head_fusion": ["dense"]})
    assert len(made) == 2


def test_for_corpus_resolves_a_frozen_plan_once(index):
    r = index.retriever
    plan = index._query_plan({"k": 5})[1]
    assert plan.head_mode == "auto"
    out = r.for_corpus(plan)
    assert r.for_corpus(plan) is out and out.head_mode in ("fused", "union")
    assert dataclasses.replace(plan, k=5) is not plan
    assert r.for_corpus(dataclasses.replace(plan, k=5)) == out  # an equal plan: the same
    mutable = dataclasses.make_dataclass(  # a plan that may change in place: resolved each time
        "Mutable", [(f.name, f.type, dataclasses.field(default=f.default))
                    for f in dataclasses.fields(plan)])
    cfg = mutable(**dataclasses.asdict(plan))
    assert r.for_corpus(cfg) is not r.for_corpus(cfg)


def test_ranks_with_the_memos_are_the_ranks_without(index, questions, monkeypatch):
    qs = questions[:6]
    memo = [index.query_batch(qs, k=8, mode="graph", evidence=False) for _ in range(2)]
    monkeypatch.setattr(type(index), "_query_plan",
                        lambda self, v: (lambda c, p: (c.mode, p))(
                            *api.query_plan(self.query_config, v, "query")))
    fresh = _open_clean(index.path).query_batch(qs, k=8, mode="graph", evidence=False)
    for res in memo:
        for a, b in zip(res, fresh, strict=True):
            assert [(p.chunk_id, p.score) for p in a.passages] == [
                (p.chunk_id, p.score) for p in b.passages]


def test_entity_name_tokens_are_tokenized_once_and_as_the_names_are(index, monkeypatch):
    r = index.retriever
    lexical, names = r.lexical, r.entity_names
    pages = r.bridge_pages
    rng = np.random.default_rng(1)
    calls = []
    real = type(lexical).tokens
    monkeypatch.setattr(type(lexical), "tokens",
                        lambda self, texts: calls.append(len(texts)) or real(self, texts))
    for size in (5, 12, 12, 40):
        ids = np.unique(rng.integers(0, len(names), size))
        got = pages.name_tokens(ids)
        want = real(lexical, names[ids].tolist())
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.ids, want.ids)
    assert sum(calls) <= len(names) and calls  # each name at most once
    seen = sum(calls)
    pages.name_tokens(np.arange(min(len(names), 30)))
    pages.name_tokens(np.arange(min(len(names), 30)))
    assert sum(calls) - seen <= 30
    empty = pages.name_tokens(np.zeros(0, np.int64))
    assert len(empty) == 0 and empty.ids.size == 0
