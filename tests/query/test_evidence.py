"""Evidence chains: each returned passage's chains from a question entity, through relations
(with the sentence that states them) and bridge entities, to the passage."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from gpurag.cli import main as gpurag_main
from tests.query.conftest import SAMPLE

# The bridge entity of each 2-hop bridge question (examples/sample/README.md, and for q05 and
# q11 the entity that links their gold passages)
BRIDGES = {"q01": "Kestrel Dynamics", "q02": "Zoë Ødegård", "q03": "Ostervane Boat Society",
           "q05": "KDL", "q11": "Brenmoor"}
K = 10


@pytest.fixture(scope="module")
def two_hop() -> list[dict]:
    rows = [json.loads(line) for line in
            (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    picked = [q for q in rows if q["hops"] == 2 and q["type"] == "bridge"]
    assert {q["id"] for q in picked} == set(BRIDGES)
    return picked


def _bridge_chain(chains: list[dict], rank: int, first_doc: str, bridge: str) -> dict | None:
    """A chain to ``rank`` that goes through ``bridge`` (an entity named in ``first_doc``)."""
    for c in chains:
        if c["rank"] != rank or not c["bridge"]:
            continue
        hops = [s for s in c["steps"] if s["target_kind"] == "entity"]
        if any(s["doc_id"] == first_doc and bridge in s["target"] for s in hops):
            return c
    return None


def test_every_bridge_passage_has_a_chain_through_its_bridge(graph_index, two_hop):
    results = graph_index.query_batch([q["question"] for q in two_hop], k=K)
    for q, r in zip(two_hop, results, strict=True):
        first, second = q["gold_ids"]
        assert second in r.doc_ids, (q["id"], r.doc_ids)
        rank = r.doc_ids.index(second) + 1
        chain = _bridge_chain(r.to_dict()["chains"], rank, first, BRIDGES[q["id"]])
        assert chain is not None, (q["id"], [c for c in r.to_dict()["chains"]
                                             if c["rank"] == rank])
        # it starts at an entity the question names and ends at the passage
        assert chain["entities"][0] in {s.name for s in r.seeds}
        last = chain["steps"][-1]
        assert last["target_kind"] == "passage" and last["rank"] == rank
        assert last["doc_id"] == second


def test_steps_quote_their_passages(graph_index, two_hop):
    """Every step's text is the document's text at its char span, in the chunk it names."""
    chunks = graph_index.chunks.set_index("chunk_id")
    results = graph_index.query_batch([q["question"] for q in two_hop], k=5)
    n = 0
    for r in results:
        for c in r.chains:
            for s in c.steps:
                row = chunks.loc[s.chunk_id]
                base = int(row["char_start"])
                assert s.doc_id == row["doc_id"]
                if s.char_end > s.char_start:
                    assert row["text"][s.char_start - base:s.char_end - base] == s.text
                    n += 1
            assert c.steps[-1].rank == c.rank
    assert n > 20


def test_chains_never_change_the_ranking(graph_index, two_hop):
    qs = [q["question"] for q in two_hop]
    with_chains = graph_index.query_batch(qs, k=K)
    without = graph_index.query_batch(qs, k=K, evidence=False)
    for a, b in zip(with_chains, without, strict=True):
        assert a.chunk_ids == b.chunk_ids
        assert [p.score for p in a.passages] == [p.score for p in b.passages]
        assert a.chains and not b.chains
    dense = graph_index.query(qs[0], mode="dense")
    assert dense.chains == []


def test_cli_text_and_json_show_the_bridge_chain(graph_index, two_hop):
    q = next(x for x in two_hop if x["id"] == "q01")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert gpurag_main(["-q", "query", str(graph_index.path), q["question"], "-k", "5",
                            "--json"]) == 0
    [result] = json.loads(out.getvalue())
    rank = [p["doc_id"] for p in result["passages"]].index("p03") + 1
    chain = _bridge_chain(result["chains"], rank, "p01", "Kestrel Dynamics")
    assert chain is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert gpurag_main(["-q", "query", str(graph_index.path), q["question"], "-k", "5"]) == 0
    text = out.getvalue()
    lines = [line for line in text.splitlines() if line.startswith(f"   #{rank} p03 (")]
    assert any("bridge" in line and "Kestrel Dynamics" in line and "#1 p01" in line
               and line.rstrip().endswith(f"-> #{rank}") for line in lines), text
    assert "path to" not in text
