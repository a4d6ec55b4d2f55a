"""The knowledge graph of an index as two tables: nodes and edges.

Edges come from the CSR the retriever walks (so the export shows exactly the graph that is
searched), each undirected edge once. Entity-entity edges are ``relation`` when the extractor
related the pair (their relation labels and supporting chunk count attached) and ``synonym``
otherwise (near-synonym pairs from alias resolution); entity-passage edges are ``mention``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpurag.errors import IndexFormatError
from gpurag.graph import csr as csr_mod
from gpurag.store import IndexDir, layout

ENTITY_PREFIX, PASSAGE_PREFIX = "e", "p"


@dataclass(frozen=True)
class GraphFrames:
    """``nodes`` (``id``, ``kind``, ``name``, ...) and ``edges`` (``source``, ``target``,
    ``kind``, ``weight``, ...) with string node ids: ``e<entity>`` and ``p<passage row>``."""

    nodes: pd.DataFrame
    edges: pd.DataFrame
    community_levels: int


def _community_columns(communities: pd.DataFrame, n_entities: int) -> dict[str, np.ndarray]:
    """``community_l<level>`` -> community id per entity (-1 where the entity has none)."""
    columns: dict[str, np.ndarray] = {}
    if communities.empty:
        return columns
    for level, part in communities.groupby("level", sort=True):
        ids = np.full(n_entities, -1, dtype=np.int64)
        ids[part["node"].to_numpy(np.int64)] = part["community"].to_numpy(np.int64)
        columns[f"community_l{int(level)}"] = ids
    return columns


def _entity_nodes(index: IndexDir) -> tuple[pd.DataFrame, int]:
    from gpurag.extract.entity_types import index_entity_types

    entities = index.table(layout.ENTITIES)
    n = len(entities)
    communities = (index.table(layout.COMMUNITIES)
                   if index.has(layout.COMMUNITIES) else pd.DataFrame())
    community = _community_columns(communities, n)
    nodes = pd.DataFrame({
        "id": ENTITY_PREFIX + entities["entity_id"].astype(str),
        "kind": "entity",
        "name": entities["name"].astype(str),
        "type": entities.get("label", pd.Series([""] * n)).astype(str),
        # PERSON / PLACE / ORG / WORK / DATE from name patterns and the entity's page
        # (UNKNOWN: none found; never empty, which CSV would read back as missing)
        "entity_type": np.where((kinds := index_entity_types(index)) == "", "UNKNOWN", kinds),
        "n_passages": entities.get("n_passages", pd.Series(np.zeros(n))).astype(np.int64),
        "n_mentions": entities.get("n_mentions", pd.Series(np.zeros(n))).astype(np.int64),
        "n_aliases": entities.get("n_aliases", pd.Series(np.ones(n))).astype(np.int64),
        **community,
    })
    return nodes, len(community)


def _passage_nodes(index: IndexDir) -> pd.DataFrame:
    chunks = index.table(layout.CHUNKS, columns=["chunk_id", "doc_id", "title"])
    ids = np.arange(len(chunks))
    if index.deleted_chunks().size:  # chunks a local delete removed: no node (ids kept)
        live = index.live_chunks(len(chunks))
        chunks, ids = chunks[live].reset_index(drop=True), ids[live]
    title = chunks["title"].fillna("").astype(str)
    return pd.DataFrame({
        "id": PASSAGE_PREFIX + pd.Series(ids).astype(str),
        "kind": "passage",
        "name": title.where(title != "", chunks["chunk_id"].astype(str)),
        "doc_id": chunks["doc_id"].astype(str),
        "chunk_id": chunks["chunk_id"].astype(str),
    })


def _relation_labels(index: IndexDir) -> pd.DataFrame:
    """Per unordered entity pair: its relation labels (``; ``-joined) and supporting chunks."""
    rel = index.table(layout.RELATIONS,
                      columns=["head_entity", "relation", "tail_entity", "chunk"])
    h = rel["head_entity"].to_numpy(np.int64)
    t = rel["tail_entity"].to_numpy(np.int64)
    pairs = pd.DataFrame({"a": np.minimum(h, t), "b": np.maximum(h, t),
                          "relation": rel["relation"].astype(str), "chunk": rel["chunk"]})
    labels = (pairs.drop_duplicates(["a", "b", "relation"]).sort_values(["a", "b", "relation"])
              .groupby(["a", "b"], sort=False)["relation"].agg("; ".join))
    chunks = pairs.drop_duplicates(["a", "b", "chunk"]).groupby(["a", "b"], sort=False).size()
    return pd.DataFrame({"relations": labels, "n_chunks": chunks}).reset_index()


def graph_frames(index: IndexDir, passages: bool = False) -> GraphFrames:
    """The entity graph of an opened index (with passage nodes and mention edges when
    ``passages``)."""
    if not index.has(layout.ENTITIES):
        raise IndexFormatError(f"{index.root} has no knowledge graph (built without --graph)")
    from gpurag.store import checks

    checks.check_graph(index, checks.table_rows(index, layout.CHUNKS))  # rows and id ranges
    nodes, levels = _entity_nodes(index)
    n_ent = len(nodes)
    graph = csr_mod.load(index.file(layout.GRAPH_DIR), shown=index.root / layout.GRAPH_DIR)
    src = np.repeat(np.arange(graph.n_nodes, dtype=np.int64), np.diff(graph.indptr))
    dst = np.asarray(graph.indices, dtype=np.int64)
    weight = np.asarray(graph.weights, dtype=np.float64)
    keep = src < dst  # symmetric CSR: each undirected edge once
    if not passages:
        keep &= dst < n_ent
    src, dst, weight = src[keep], dst[keep], weight[keep]

    edges = pd.DataFrame({"a": src, "b": dst, "weight": weight})
    edges = edges.merge(_relation_labels(index), on=["a", "b"], how="left")
    is_mention = edges["b"].to_numpy() >= n_ent
    has_relation = edges["relations"].notna().to_numpy()
    edges["kind"] = np.where(is_mention, "mention", np.where(has_relation, "relation", "synonym"))
    edges["relations"] = edges["relations"].fillna("")
    edges["n_chunks"] = edges["n_chunks"].fillna(0).astype(np.int64)
    b = edges["b"].to_numpy()
    edges["source"] = ENTITY_PREFIX + edges["a"].astype(str)
    edges["target"] = np.where(is_mention, PASSAGE_PREFIX + (b - n_ent).astype(str),
                               ENTITY_PREFIX + b.astype(str))
    edges = edges[["source", "target", "kind", "weight", "relations", "n_chunks"]]

    if passages:
        nodes = pd.concat([nodes, _passage_nodes(index)], ignore_index=True)
        fill = {c: -1 for c in nodes.columns if c.startswith("community_l")}
        fill.update({c: 0 for c in ("n_passages", "n_mentions", "n_aliases")})
        text_columns = ("type", "doc_id", "chunk_id")
        fill.update(dict.fromkeys(text_columns, ""))
        nodes = nodes.fillna(fill)
        for column in fill:
            if column not in text_columns:
                nodes[column] = nodes[column].astype(np.int64)
    return GraphFrames(nodes=nodes.reset_index(drop=True), edges=edges.reset_index(drop=True),
                       community_levels=levels)
