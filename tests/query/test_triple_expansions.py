"""Second-hop expansions on an index with labelled triples: the triple closest to the
question names the bridge entity ("Maryland official state sport Jousting" for the state whose
sport is jousting), so its page comes before the pages of the first-hop passage's other
entities (the five other states of the list)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpurag import Index
from gpurag.errors import ConfigError
from gpurag.profile import RankingProfile
from gpurag.query.second_hop import best_expansions, triple_entity_scores

DATA = Path(__file__).parent / "data"
CORPUS = DATA / "triples_hop_corpus.jsonl"
TRIPLES = DATA / "triples_hop_triples.jsonl"
QUESTION = "Who founded the colony that became the state whose official sport is jousting?"
OTHER_STATES = ("alaska", "colorado", "delaware", "hawaii", "texas")


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Index:
    return Index.build(CORPUS, tmp_path_factory.mktemp("trihop") / "idx", triples=str(TRIPLES),
                       show_progress=False)


def _rows(index: Index, docs: list[str]) -> np.ndarray:
    ids = index.retriever.chunks["doc_id"].tolist()
    return np.array([[ids.index(d) for d in docs]])


def _docs(index: Index, rows: np.ndarray) -> list[str]:
    ids = index.retriever.chunks["doc_id"].tolist()
    return [ids[r] for r in rows.tolist() if r >= 0]


def test_the_best_triple_picks_the_expansion(index):
    top = _rows(index, ["sports", "jousting", "bicycling"])
    qvecs = index.embedder.encode([QUESTION])
    pages = index.retriever.bridge_pages
    every = _docs(index, pages.expanded(top, [QUESTION], 3, qvecs, triples=0)[0])
    best = _docs(index, pages.expanded(top, [QUESTION], 3, qvecs, triples=1)[0])
    # Every entity expanded: the other states' histories, richer in the question's words,
    # come before Maryland's.
    assert all(every.index(s) < every.index("maryland") for s in OTHER_STATES)
    # Only the best triple's entity: Maryland's history is the first page after the list
    # and the sport the question names; most other states' pages are gone.
    assert best.index("maryland") <= 2
    assert sum(s in best for s in OTHER_STATES) <= 2


def test_the_query_ranks_the_bridge_page_above_the_other_states_pages(index):
    every = index.query(QUESTION, k=13, second_hop_triples=0).doc_ids
    best = index.query(QUESTION, k=13, second_hop_triples=1).doc_ids
    default = index.query(QUESTION, k=13).doc_ids
    assert every[:5] == best[:5]  # the first documents keep their place
    assert all(every.index(s) < every.index("maryland") for s in OTHER_STATES)
    assert best.index("maryland") < every.index("maryland")
    assert sum(best.index(s) > best.index("maryland") for s in OTHER_STATES) >= 3
    assert default.index("maryland") < every.index("maryland")


def test_a_rule_based_index_has_no_triples_and_is_unchanged(tmp_path):
    index = Index.build(CORPUS, tmp_path / "idx", show_progress=False)
    assert index.retriever.bridge_pages.chunk_triples() is None
    assert (index.query(QUESTION, k=13, second_hop_triples=0).doc_ids
            == index.query(QUESTION, k=13, second_hop_triples=4).doc_ids)


def test_triple_entity_scores_take_each_entitys_best_triple():
    # Passage 0 holds triples 0 and 1, passage 1 holds triple 2; triple 0 names entities 0
    # and 1, triple 1 names 1 and 2, triple 2 names 2 and 3.
    chunk_triples = (np.array([0, 2, 3]), np.array([0, 1, 2]))
    fact_entities = (np.array([0, 2, 4, 6]), np.array([0, 1, 1, 2, 2, 3]))
    vecs = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    qvecs = np.array([[1.0, 0.0], [0.0, 1.0]])
    top = np.array([[0, -1], [0, 1]])  # question 0 hops from passage 0, question 1 from both
    keys, scores = triple_entity_scores(top, chunk_triples, fact_entities, vecs, qvecs, n_ent=4)
    got = {(int(k) // 4, int(k) % 4): round(float(s), 2) for k, s in zip(keys, scores,
                                                                          strict=True)}
    assert got == {(0, 0): 1.0, (0, 1): 1.0, (0, 2): 0.6,
                   (1, 0): 0.0, (1, 1): 0.8, (1, 2): 1.0, (1, 3): 1.0}


def test_best_expansions_cut_only_questions_with_triples():
    # Question 0 has scored entities 5 (0.9) and 6 (0.2); 7 is in no triple. Question 1 has
    # no triple at all and keeps its three expansions.
    owner = np.array([0, 0, 0, 1, 1, 1])
    entity = np.array([7, 6, 5, 1, 2, 3])
    keys = np.array([0 * 10 + 5, 0 * 10 + 6])
    o, e = best_expansions(owner, entity, keys, np.array([0.9, 0.2]), n_ent=10, keep=1)
    assert list(zip(o.tolist(), e.tolist(), strict=True)) == [(0, 5), (1, 1), (1, 2), (1, 3)]
    o, e = best_expansions(owner, entity, keys, np.array([0.9, 0.2]), n_ent=10, keep=3)
    assert e[o == 0].tolist() == [5, 6, 7]  # unscored entities after the scored ones


def test_setting_is_validated():
    with pytest.raises(ConfigError, match="second_hop_triples"):
        RankingProfile(second_hop_triples=-1)
