"""The evidence of one query result as a small graph: the question, its seed entities, the
entity paths the walk followed, and the passages it returned (with provenance)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpurag.query.results import QueryResult

QUESTION_ID = "question"


def entity_node_id(name: str) -> str:
    return f"entity:{name}"


def passage_node_id(chunk_id: str) -> str:
    return f"passage:{chunk_id}"


def evidence_subgraph(result: QueryResult) -> dict[str, list[dict[str, Any]]]:
    """``{"nodes": [...], "edges": [...]}`` for ``result``.

    Nodes have ``id``, ``kind`` (question | seed | entity | passage) and ``label``; passages also
    carry rank, score, doc_id, chunk_id, title, char span and text. Edges have ``source``,
    ``target`` and ``kind``: ``seed`` (question -> seed entity, with its score and how it
    matched), the relation of each path step, ``mentions`` (last path entity -> passage), and
    ``retrieved`` (question -> a passage that no entity path reaches, found by similarity).
    """
    nodes: dict[str, dict[str, Any]] = {
        QUESTION_ID: {"id": QUESTION_ID, "kind": "question", "label": result.question}}
    edges: list[dict[str, Any]] = []
    for seed in result.seeds:
        node = entity_node_id(seed.name)
        nodes.setdefault(node, {"id": node, "kind": "seed", "label": seed.name,
                                "entity_id": seed.entity_id, "score": seed.score,
                                "via": seed.via})
        edges.append({"source": QUESTION_ID, "target": node, "kind": "seed",
                      "weight": seed.score})
    for p in result.passages:
        node = passage_node_id(p.chunk_id)
        nodes[node] = {"id": node, "kind": "passage", "label": f"#{p.rank} {p.title or p.doc_id}",
                       "rank": p.rank, "score": p.score, "doc_id": p.doc_id,
                       "chunk_id": p.chunk_id, "title": p.title, "char_start": p.char_start,
                       "char_end": p.char_end, "text": p.text}
    reached: set[str] = set()
    seen_edges: set[tuple[str, str, str]] = set()
    for path in result.paths:
        target = passage_node_id(path.chunk_id)
        if target not in nodes or not path.entities:
            continue
        chain = [entity_node_id(name) for name in path.entities]
        for name, node in zip(path.entities, chain, strict=True):
            nodes.setdefault(node, {"id": node, "kind": "entity", "label": name})
        steps = [*zip(chain, chain[1:], path.relations, strict=False),
                 (chain[-1], target, "mentions")]
        for source, dest, kind in steps:
            if (source, dest, kind) not in seen_edges:
                seen_edges.add((source, dest, kind))
                edges.append({"source": source, "target": dest, "kind": kind})
        reached.add(target)
    for p in result.passages:
        node = passage_node_id(p.chunk_id)
        if node not in reached:
            edges.append({"source": QUESTION_ID, "target": node, "kind": "retrieved",
                          "weight": p.score})
    return {"nodes": list(nodes.values()), "edges": edges}
