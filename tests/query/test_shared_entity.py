"""Shared-entity pages: a chain through an entity without a page of its own (the author studied
at Rutgers; the research station is Rutgers') reaches the next hop's page, below the first
documents; the hop skips the entities the question names, categories and its own sources."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gpurag import Index
from gpurag.errors import ConfigError
from gpurag.profile import RankingProfile
from gpurag.query.shared_entity import entity_pages, shared_entity_ranking
from tests.conftest import _build_shared, _open_clean

CORPUS = Path(__file__).parent / "data" / "shared_entity_corpus.jsonl"
# the book (named) -> Judith Viorst (its author; bridge page) -> Rutgers (no page) -> the station
QUESTION = "What kind of university did the author of Alexander and the Terrible Day attend?"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """Built once under the tests' clean environment and the session's embedding cache
    (module fixtures run before the per-test cleanup), opened clean, closed at the end."""
    path = _build_shared(tmp_path_factory, "shared_entity", CORPUS)
    idx = _open_clean(path)
    yield idx
    idx.close()


def _docs(index: Index, weight: float) -> list[str]:
    return index.query_batch([QUESTION], k=12, mode="graph", evidence=False,
                             shared_entity_weight=weight)[0].doc_ids


def test_the_page_sharing_the_bridge_entity_enters_the_top_8(index):
    off, on = _docs(index, 0.0), _docs(index, 0.25)
    assert off[:3] == ["book", "cruz", "viorst"]  # the second hop found the author
    assert "station" not in off[:8]
    assert "station" in on[:8]
    assert on[:5] == off[:5]  # fused below the first documents


def test_default_profile_value_is_what_the_query_uses(index):
    default = RankingProfile().shared_entity_weight
    ranked = index.query_batch([QUESTION], k=12, mode="graph", evidence=False)[0].doc_ids
    assert ranked == _docs(index, default)


def _matrix(rows: list[list[int]], n_ent: int) -> sp.csr_array:
    r = np.repeat(np.arange(len(rows)), [len(x) for x in rows])
    c = np.concatenate([np.asarray(x, np.int64) for x in rows])
    return sp.csr_array((np.ones(len(c)), (r, c)), shape=(len(rows), n_ent))


def test_ranking_follows_cosine_and_skips_named_categories_and_sources():
    # passages 0-5; entity 0 links 0 <-> 1, 2; entity 1 (named) links 0 <-> 3; entity 2 is
    # mentioned by 0, 4, 5 (over max_df 2: a category)
    ment, by_entity, df = entity_pages(_matrix([[0, 1, 2], [0], [0], [1], [2], [2]], 3))
    assert df.tolist() == [3, 2, 3]
    emb = np.eye(6, dtype=np.float32)
    q = np.zeros((1, 6), np.float32)
    q[0, 1], q[0, 2], q[0, 3] = 0.2, 0.9, 1.0
    top = np.array([[0, -1]])
    named = (np.array([0]), np.array([1]))
    got = shared_entity_ranking(top, ment, by_entity, df, named, q, emb, max_df=3,
                                temperature=0.05, depth=4)
    # entity 2 is within max_df 3: pages 4 and 5 come in, below 2 and 1 by cosine (0 < 0.2)
    assert got.tolist() == [[2, 1, 4, 5]]
    got = shared_entity_ranking(top, ment, by_entity, df, named, q, emb, max_df=2,
                                temperature=0.05, depth=4)
    assert got.tolist() == [[-1, -1, -1, -1]]  # entity 0 and 2 are over 2, entity 1 named
    got = shared_entity_ranking(top, ment, by_entity, df, (np.zeros(0, np.int64),) * 2, q, emb,
                                max_df=3, temperature=0.05, depth=4)
    assert got[0, 0] == 3  # not named: page 3 (cosine 1.0) comes first
    assert 0 not in got  # a source is never its own shared page


def test_shared_entity_settings_are_validated():
    with pytest.raises(ConfigError, match="shared_entity_from"):
        RankingProfile(shared_entity_from=0)
    with pytest.raises(ConfigError, match="shared_entity_weight"):
        RankingProfile(shared_entity_weight=-0.1)


def test_a_page_scores_the_distinct_entities_it_shares_and_tables_are_float32():
    # sources 0 and 1 both mention entity 0 (page 2 mentions it: two links, one entity);
    # page 3 shares entities 1 and 2 with them: it scores 2 against page 2's 1
    ment, by_entity, df = entity_pages(_matrix([[0, 1], [0, 2], [0], [1, 2]], 3))
    assert ment.dtype == by_entity.dtype == np.float32 and (ment.data == 1).all()
    found = shared_entity_ranking(np.array([[0, 1]]), ment, by_entity, df,
                                  (np.zeros(0, np.int64), np.zeros(0, np.int64)),
                                  np.zeros((1, 4), np.float32), np.eye(4, dtype=np.float32),
                                  max_df=5, temperature=0.0, depth=4)
    assert found.tolist() == [[3, 2, -1, -1]]
