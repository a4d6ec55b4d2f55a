"""Memory: the relational view's geometric mean, the consistency filter, read-your-writes."""

from __future__ import annotations

import numpy as np
import pytest

from gpurag.memory import Memory
from gpurag.memory.views import relational_scores

PATH_FIXTURE = [
    ("Alice Park and Bob Stone planned the trip.", "s1"),
    ("Bob Stone called Carol Reed about the trip.", "s2"),
    ("Bob Stone fixed the old bike.", "s3"),  # path trace: its entity links both anchors
    ("Alice Park bought a Zed Lamp.", "s4"),  # one-anchor trace
    ("Zed Lamp is sold in Oslo Market.", "s5"),
]


@pytest.fixture()
def memory(tmp_path):
    mem = Memory.create(tmp_path / "mem")
    yield mem
    mem.close()


def _fill(mem: Memory, rows: list[tuple[str, str]]) -> list[int]:
    return mem.add_many([{"text": t, "session": s, "turn": 0, "time": 1000 + i}
                         for i, (t, s) in enumerate(rows)])


def test_geometric_mean_prefers_the_path_trace(memory):
    _fill(memory, PATH_FIXTURE)
    view = memory.views(["How is Alice Park connected to Carol Reed?"])[0]
    assert view["n_anchors"] == 2
    rel = dict(zip(view["ids"].tolist(), view["relational"].tolist(), strict=True))
    assert rel[2] > rel[3], rel  # the path trace beats the one-anchor trace
    # the arithmetic mean of the same masses prefers the one-anchor trace: the test is about
    # the geometric mean, not about the graph
    anchors = memory.anchors("How is Alice Park connected to Carol Reed?")
    from gpurag.memory.views import anchor_mass, best_entity_mass

    memory._refresh()
    best = best_entity_mass(memory._tag_csr, anchor_mass(memory._graph, anchors,
                                                         memory._ppr_fn(), 0.5))
    w = np.full(2, 0.5)
    arith = w @ best
    assert arith[3] > arith[2]
    assert relational_scores(best, w)[2] > relational_scores(best, w)[3]


def test_changed_fact_is_resolved_by_the_consistency_filter(memory):
    _fill(memory, [
        ("Alice Park: My address is 12 Oak Street.", "s1"),
        ("Alice Park: I love the bakery near my home.", "s2"),
        ("Alice Park: My address is 5 Elm Road now.", "s3"),
    ])
    res = memory.search("What is Alice Park's address?", k=3)
    texts = [h.text for h in res.hits]
    assert any("5 Elm Road" in t for t in texts)
    assert not any("12 Oak Street" in t for t in texts)
    assert [d.trace for d in res.dropped] == [0]
    assert "newer" in res.dropped[0].reason and "5 elm road" in res.dropped[0].reason


def test_append_is_visible_to_the_next_search(memory, tmp_path):
    _fill(memory, PATH_FIXTURE)
    before = memory.search("Where did Dana Frost park the blue van?", k=3)
    assert all("Dana Frost" not in h.text for h in before.hits)
    new_id = memory.add("Dana Frost parked the blue van behind Oslo Market.", session="s9",
                        turn=0, time="2026-03-01T09:00")
    after = memory.search("Where did Dana Frost park the blue van?", k=3)
    assert after.hits[0].id == new_id
    assert "Dana Frost" in after.anchors  # the vocabulary and the graph grew too
    memory.close()
    with Memory.open(tmp_path / "mem", readonly=True) as again:
        assert len(again) == len(PATH_FIXTURE) + 1
        assert again.search("Dana Frost blue van", k=1).hits[0].id == new_id


def test_compaction_keeps_results_and_replays_the_tail(memory, tmp_path):
    _fill(memory, PATH_FIXTURE)
    memory.compact()
    memory.add("Carol Reed moved to Bergen Harbor.", session="s6", turn=0, time=2000)
    want = [h.id for h in memory.search("Carol Reed Bergen Harbor", k=4).hits]
    memory.close()
    with Memory.open(tmp_path / "mem") as again:
        assert again.info()["compacted_traces"] == len(PATH_FIXTURE)
        assert [h.id for h in again.search("Carol Reed Bergen Harbor", k=4).hits] == want


def test_incremental_refresh_matches_a_full_rebuild(memory):
    _fill(memory, PATH_FIXTURE[:3])
    memory.search("Alice Park", k=1)  # folds the first traces into the CSR
    _fill(memory, PATH_FIXTURE[3:])
    memory._refresh()
    inc_tags, inc_graph = memory._tag_csr.toarray(), memory._graph
    memory._csr_n, memory._canon_used = -1, None
    memory._refresh()
    assert np.array_equal(inc_tags, memory._tag_csr.toarray())
    assert np.array_equal(inc_graph.indptr, memory._graph.indptr)
    assert np.allclose(inc_graph.weights, memory._graph.weights)


def test_defaults_continue_the_session_and_an_empty_memory_answers(memory):
    assert memory.search("anything", k=3).hits == []
    assert memory.info()["traces"] == 0
    ids = memory.add_many(["Alice Park said hello.", "Bob Stone waved back."])
    memory.add("Carol Reed joined later.")
    assert memory.sessions == ["default"] * 3 and memory.turns == [0, 1, 2] and ids == [0, 1]
    with pytest.raises(Exception, match="trace 3: text"):
        memory.add("   ")


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_search_after_traces_without_an_indexed_word_answers(memory):
    """Traces of stop words and punctuation only ("?", "and?") give BM25 no document
    to index: appended after a search (the lexical tail holds only them) or alone, the next
    search answers from the other views (bm25s refused such a tail with 'max() arg is an
    empty sequence'), and no build is tried for them (bm25s warned 0/0 before refusing)."""
    first = memory.add("Ann met Bob at the park", session="s", time=1.0)
    assert memory.search("Ann park?", k=2).hits[0].id == first
    tail = [memory.add(t, session="s", time=2.0 + i) for i, t in enumerate(["?", "and?"])]
    hits = memory.search("Ann park?", k=3).hits
    assert hits[0].id == first and hits[0].views["bm25"] > 0
    assert {h.id for h in hits} == {first, *tail}
    assert all(h.views["bm25"] == 0 for h in hits if h.id in tail)
