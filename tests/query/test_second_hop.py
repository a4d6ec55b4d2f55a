"""The query-conditioned second hop: from the first-hop passage to the page of the entity the
question describes (the city where the politician was born), above the passage's other
neighbours (his college, his party, the chambers he sat in)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from gpurag import Index
from gpurag.errors import ConfigError
from gpurag.profile import RankingProfile
from gpurag.query.second_hop import (
    aspect_keys,
    bridge_matrix,
    bridge_ranking,
    document_head,
    expansion_pairs,
    expansion_ranking,
    fuse,
    second_hop,
    title_keys,
)

CORPUS = Path(__file__).parent / "data" / "second_hop_corpus.jsonl"
QUESTION = "In what county is the city where Harris W. Fawell was born?"
NEIGHBOURS = ("college", "senate", "house", "party")  # Fawell's other linked pages


@pytest.fixture(scope="module")
def index(second_hop_index_path) -> Index:
    return Index.open(second_hop_index_path)  # CORPUS, built once (tests/conftest.py)


def test_title_keys_drop_disambiguation_and_qualifier():
    keys = title_keys(pd.Series(["West Chicago, Illinois", "Brother (Pearl Jam song)", None]))
    assert keys[:2] == ["west chicago", "brother"]


def test_bridge_matrix_links_a_mention_to_the_page_its_name_titles():
    # Passage 0 mentions entity 1 ("West Chicago"); passage 1 is titled "West Chicago,
    # Illinois" (its own title entity is 2, a different entity). Entity 3 ("Day") titles
    # passages 2-5: a category, not a page.
    mentions = pd.DataFrame({"entity": [0, 1, 3, 2, 3, 3, 3, 3],
                             "chunk": [0, 0, 0, 1, 2, 3, 4, 5]})
    title_entity = np.array([0, 2, 3, 3, 3, 3])
    titles = pd.Series(["Harris W. Fawell", "West Chicago, Illinois", "Day", "Day", "Day", "Day"])
    aliases = pd.DataFrame({"name": ["Harris W. Fawell", "West Chicago", "West Chicago, Illinois",
                                     "Day"], "entity_id": [0, 1, 2, 3]})
    m = bridge_matrix(mentions, title_entity, titles, aliases, n_ent=4, max_pages=3)
    assert m.shape == (6, 6)
    assert sorted(zip(*m.nonzero(), strict=True)) == [(0, 1)]
    wide = bridge_matrix(mentions, title_entity, titles, aliases, n_ent=4, max_pages=4)
    assert (0, 2) in set(zip(*wide.nonzero(), strict=True))  # "Day" bridges when allowed
    assert wide.diagonal().sum() == 0


def test_aspect_pages_bridge_from_the_entity_they_are_about():
    """"History of Maryland" is a page about Maryland, though Maryland does not title it:
    a passage that mentions Maryland bridges to it. An entity with more than ``max_pages``
    aspect pages (a hub such as a country) keeps its own page but bridges to none of them."""
    titles = pd.Series(["List of U.S. state sports", "History of Maryland", "Maryland",
                        "Economy of the United States", "History of the United States",
                        "Geography of the United States", "Culture of the United States",
                        "United States", "Battle of Hastings"])
    # entities: 0 Maryland, 1 United States, 2 the list (title of 0), 3 Hastings
    mentions = pd.DataFrame({"entity": [2, 0, 1, 3, 0, 1], "chunk": [0, 0, 0, 0, 2, 7]})
    title_entity = np.array([2, -1, 0, -1, -1, -1, -1, 1, -1])
    aliases = pd.DataFrame({"name": ["Maryland", "United States", "List of U.S. state sports",
                                     "Hastings"], "entity_id": [0, 1, 2, 3]})
    m = bridge_matrix(mentions, title_entity, titles, aliases, n_ent=4, max_pages=3)
    assert set(m[[0]].nonzero()[1].tolist()) == {1, 2, 7, 8}  # not the four US aspects
    rows, keys = aspect_keys(titles)
    assert dict(zip(rows.tolist(), keys, strict=True))[1] == "maryland"
    assert dict(zip(rows.tolist(), keys, strict=True))[3] == "united states"
    assert 2 not in rows and 7 not in rows


def test_bridge_ranking_prefers_the_neighbour_the_question_describes():
    # Passage 0 (first hop) links to pages 1, 2, 3; the question's vector is nearest page 3.
    matrix = sp.csr_array((np.ones(3), ([0, 0, 0], [1, 2, 3])), shape=(4, 4))
    emb = np.eye(4, dtype=np.float32)
    qvec = np.array([[0.6, 0.1, 0.2, 0.75]], np.float32)
    first = np.array([[0, 1, 2, 3]])
    assert bridge_ranking(first, matrix, qvec, emb, hop_from=1, temperature=0.05)[0, :3].tolist() \
        == [3, 2, 1]
    # Unconditioned (temperature 0), every neighbour counts the same: row order decides.
    assert bridge_ranking(first, matrix, qvec, emb, hop_from=1, temperature=0.0)[0, :3].tolist() \
        == [1, 2, 3]
    # Only the top `hop_from` first-round rows are hopped from.
    assert (bridge_ranking(np.array([[1, 0]]), matrix, qvec, emb, hop_from=1,
                           temperature=0.05) == -1).all()


def test_fusion_lifts_the_bridge_page_and_keeps_the_head():
    matrix = sp.csr_array((np.ones(3), ([0, 0, 0], [1, 2, 3])), shape=(5, 5))
    emb = np.eye(5, dtype=np.float32)
    qvec = np.array([[0.6, 0.1, 0.2, 0.75, 0.0]], np.float32)
    first = np.array([[0, 4, 1, 2, 3]])
    rows, scores = second_hop(first, matrix, qvec, emb, k=5, head=first[:, :1], hop_from=1,
                              temperature=0.05, weight=1.0, rank_constant=2.0)
    assert rows[0, 0] == 0  # the head keeps its place
    assert rows[0].tolist().index(3) < rows[0].tolist().index(1)  # 3 passes 1 and 2
    assert (np.diff(scores[0]) <= 0).all()
    off, _ = fuse([first], [1.0], n=5, c=2.0, k=5)
    assert off.tolist() == first.tolist()  # fusing the first round alone changes nothing


def _rank(result, doc: str) -> int:
    return result.doc_ids.index(doc)


def test_bridge_question_lifts_the_bridge_page_above_the_other_neighbours(index):
    before = index.query(QUESTION, k=9, second_hop_weight=0.0)
    after = index.query(QUESTION, k=9)
    assert before.doc_ids[0] == after.doc_ids[0] == "fawell"
    # The walk spreads over Fawell's linked pages; "West Chicago" titles no page of its own
    # name ("West Chicago, Illinois"), so the bridge page trails his chambers and party ...
    assert _rank(before, "westchicago") > max(_rank(before, p) for p in ("senate", "house"))
    # ... and the second hop, conditioned on "county"/"city", lifts it above them.
    assert _rank(after, "westchicago") < min(_rank(after, p) for p in ("senate", "house"))
    # With a heavier hop the bridge page comes right after the first hop, above every
    # other neighbour of it.
    strong = index.query(QUESTION, k=9, second_hop_weight=4.0)
    assert strong.doc_ids[:2] == ["fawell", "westchicago"]
    assert all(_rank(strong, "westchicago") < _rank(strong, p) for p in NEIGHBOURS)


def test_expanded_question_finds_the_page_no_mentioned_entity_titles(index):
    # The campus page is about North Central College but titled by nothing Fawell's page
    # mentions: no bridge reaches it; "question + North Central College" through BM25 does.
    # (Shared-entity pages reach it too, through North Central College: off here, so the
    # expansions are measured alone.)
    question = "Where did the college Harris W. Fawell studied at stand before it moved?"
    before = index.query(question, k=10, second_hop_expansions=0, shared_entity_weight=0)
    after = index.query(question, k=10, shared_entity_weight=0)
    assert after.doc_ids[:5] == before.doc_ids[:5]  # the first documents keep their place
    assert _rank(after, "campus") < _rank(before, "campus")
    assert _rank(after, "campus") < _rank(after, "westchicago")
    assert _rank(before, "campus") > _rank(before, "westchicago")


def test_unconditioned_hop_does_not_pick_the_bridge_page(index):
    strong = index.query(QUESTION, k=9, second_hop_weight=4.0, second_hop_temperature=0.0)
    assert strong.doc_ids[1] != "westchicago"


@pytest.mark.parametrize("setting,value", [("second_hop_weight", -1),
                                           ("second_hop_expansions", -1),
                                           ("second_hop_expansion_weight", -0.5),
                                           ("second_hop_expansion_keep", -1),
                                           ("second_hop_from", 0),
                                           ("second_hop_rank_constant", 0),
                                           ("second_hop_max_pages", 0),
                                           ("second_hop_temperature", -0.1)])
def test_second_hop_settings_are_validated(setting, value):
    with pytest.raises(ConfigError, match=setting):
        RankingProfile(**{setting: value})


def test_expansion_pairs_skip_named_entities_and_the_pages_own_titles():
    # Passage 0 mentions entities 0 (its title), 1, 2; passage 1 mentions 2 and 3; passage 2
    # mentions 4. Question 0 hops from passages 0 and 1 and names entity 1; question 1 hops
    # from passage 2 only.
    mentions = sp.csr_array((np.ones(6), ([0, 0, 0, 1, 1, 2], [0, 1, 2, 2, 3, 4])),
                            shape=(3, 5))
    title_entity = np.array([0, -1, 4])
    top = np.array([[0, 1], [2, -1]])
    owner, entity = expansion_pairs(top, mentions, title_entity,
                                    (np.array([0]), np.array([1])))
    assert list(zip(owner.tolist(), entity.tolist(), strict=True)) == [(0, 2), (0, 3)]


def test_expansion_ranking_orders_pages_by_their_best_rank_then_score():
    # Three expansions: two of question 0, one of question 1 (rows -1 padded).
    rows = np.array([[5, 7, 9], [8, 5, -1], [7, 6, 5]])
    scores = np.array([[3.0, 2.0, 1.0], [4.0, 1.0, 0.0], [9.0, 8.0, 7.0]])
    out = expansion_ranking(np.array([0, 0, 1]), rows, scores, q=2, depth=4)
    assert out.tolist() == [[8, 5, 7, 9], [7, 6, 5, -1]]


def test_document_head_counts_a_split_document_once():
    doc_codes = np.array([0, 0, 1, 2, 3])  # passages 0 and 1 are parts of one document
    rows = np.array([[0, 2, 1, 3, 4], [4, 3, -1, -1, -1]])
    assert document_head(rows, doc_codes, 2).tolist() == [[0, 2, 1, -1, -1],
                                                          [4, 3, -1, -1, -1]]


def test_second_hop_decodes_rows_of_the_opened_passage_index_not_a_second_copy(index):
    """One passage FAISS index per opened index: the second hop and the retriever read their
    vectors from the index the dense search uses, not from a second copy read from disk."""
    index.query(QUESTION, k=5)  # the retriever and its bridge pages are in use
    emb = index.retriever.bridge_pages.passage_emb
    assert emb.index is index.passage_index
    assert index.retriever.passage_index is index.passage_index
    np.testing.assert_allclose(emb[np.array([1, 0, 1])], index.passage_vectors()[[1, 0, 1]])
