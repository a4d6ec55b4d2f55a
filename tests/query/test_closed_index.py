"""Results read after their index is closed (the ``with Index.open(...)`` use) still give
their deferred chains (review Q, bug 4)."""

from __future__ import annotations

from gpurag import Index

QUESTION = "Who designed the Corven Lighthouse?"


def _reference(path) -> dict:
    with Index.open(path) as index:
        return index.query(QUESTION, k=5, mode="graph").to_dict()


def _same(a: dict, b: dict) -> None:
    assert a["chains"] and a["chains"] == b["chains"]
    assert [p["chunk_id"] for p in a["passages"]] == [p["chunk_id"] for p in b["passages"]]


def test_chains_read_after_the_with_block(graph_index_path):
    want = _reference(graph_index_path)
    with Index.open(graph_index_path) as index:  # fresh: no evidence loaded yet
        res = index.query(QUESTION, k=5, mode="graph")
    chains = res.chains
    assert [c.chunk_id for c in chains] == [c["chunk_id"] for c in want["chains"]]
    _same(res.to_dict(), want)


def test_to_dict_after_close(graph_index_path):
    want = _reference(graph_index_path)
    index = Index.open(graph_index_path)
    results = index.query_batch([QUESTION, "Where is Tarnwick?"], k=5, mode="graph")
    index.close()
    got = [r.to_dict() for r in results]
    _same(got[0], want)
    assert got[1]["confidence"] is not None
