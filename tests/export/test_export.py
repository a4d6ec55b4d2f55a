"""`gpurag export`: the entity graph read back by networkx, igraph and pandas, with the same
nodes and edges as the index's own tables."""

from __future__ import annotations

import igraph
import networkx as nx
import numpy as np
import pandas as pd
import pytest

from gpurag.cli import main as gpurag_main
from gpurag.errors import ConfigError
from gpurag.export import export_graph, graph_frames
from gpurag.export.writers import read_tables
from gpurag.graph import csr


@pytest.fixture(scope="module")
def frames(graph_index):
    return graph_frames(graph_index.dir)


def _relation_pairs(graph_index) -> set[tuple[str, str]]:
    """Unordered entity pairs the extractor related, from the relations table itself."""
    rel = graph_index.dir.table("tables/relations.parquet")
    h, t = rel["head_entity"].to_numpy(), rel["tail_entity"].to_numpy()
    return {(f"e{a}", f"e{b}") for a, b in zip(np.minimum(h, t), np.maximum(h, t), strict=True)
            if a != b}


def _edge_set(edges: pd.DataFrame, kind: str) -> set[tuple[str, str]]:
    part = edges[edges["kind"] == kind]
    return {tuple(sorted(p)) for p in zip(part["source"], part["target"], strict=True)}


def test_frames_hold_every_entity_and_every_related_pair(graph_index, frames):
    entities = graph_index.dir.table("tables/entities.parquet")
    assert len(frames.nodes) == len(entities)
    assert frames.nodes["name"].tolist() == entities["name"].astype(str).tolist()
    assert _edge_set(frames.edges, "relation") == {
        tuple(sorted(p)) for p in _relation_pairs(graph_index)}
    # Every entity-entity edge of the CSR appears once: relations plus synonym pairs.
    g = csr.load(graph_index.path / "graph")
    n_ent = len(entities)
    src = np.repeat(np.arange(g.n_nodes), np.diff(g.indptr))
    dst = np.asarray(g.indices)
    assert len(frames.edges) == int(((src < dst) & (dst < n_ent)).sum())
    assert (frames.edges["weight"] > 0).all()
    communities = graph_index.dir.table("tables/communities.parquet")
    level0 = communities[communities["level"] == 0].set_index("node")["community"]
    assert (frames.nodes["community_l0"].to_numpy()[level0.index.to_numpy()]
            == level0.to_numpy()).all()


def test_graphml_round_trip_through_networkx_and_igraph(frames, tmp_path):
    out = tmp_path / "graph.graphml"
    export_graph(frames, out, "graphml")
    g = nx.read_graphml(out)
    assert g.number_of_nodes() == len(frames.nodes)
    assert g.number_of_edges() == len(frames.edges)
    heaviest = frames.edges.sort_values("weight").iloc[-1]
    data = g.edges[heaviest["source"], heaviest["target"]]
    assert data["kind"] == heaviest["kind"] and data["relations"] == heaviest["relations"]
    assert data["weight"] == pytest.approx(heaviest["weight"])
    first = frames.nodes.iloc[0]
    assert g.nodes[first["id"]]["name"] == first["name"] == g.nodes[first["id"]]["label"]

    ig = igraph.Graph.Read_GraphML(str(out))
    assert (ig.vcount(), ig.ecount()) == (len(frames.nodes), len(frames.edges))
    ids = {v["id"]: v.index for v in ig.vs}
    assert ig.get_eid(ids[heaviest["source"]], ids[heaviest["target"]], error=False) >= 0


def test_gexf_round_trip(frames, tmp_path):
    out = tmp_path / "graph.gexf"
    export_graph(frames, out, "gexf")
    g = nx.read_gexf(out)
    assert (g.number_of_nodes(), g.number_of_edges()) == (len(frames.nodes), len(frames.edges))
    synonyms = frames.edges[frames.edges["kind"] == "synonym"]
    for source, target in zip(synonyms["source"], synonyms["target"], strict=True):
        assert g.has_edge(source, target)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_table_export_round_trip(frames, tmp_path, fmt):
    written = export_graph(frames, tmp_path / "out", fmt)
    assert sorted(p.name for p in written) == [f"edges.{fmt}", f"nodes.{fmt}"]
    back = read_tables(tmp_path / "out", fmt)
    pd.testing.assert_frame_equal(back.nodes, frames.nodes, check_dtype=False)
    key = ["source", "target", "kind"]
    assert back.edges[key].equals(frames.edges[key])
    assert np.allclose(back.edges["weight"], frames.edges["weight"])


def test_passage_nodes_and_mentions(graph_index, tmp_path):
    with_passages = graph_frames(graph_index.dir, passages=True)
    chunks = graph_index.dir.table("tables/chunks.parquet")
    mentions = graph_index.dir.table("tables/mentions.parquet")
    entity_only = graph_frames(graph_index.dir)
    assert len(with_passages.nodes) == len(entity_only.nodes) + len(chunks)
    expected = {(f"e{e}", f"p{c}") for e, c in zip(mentions["entity"], mentions["chunk"],
                                                     strict=True)}
    got = with_passages.edges[with_passages.edges["kind"] == "mention"]
    assert set(zip(got["source"], got["target"], strict=True)) == expected
    passages = with_passages.nodes[with_passages.nodes["kind"] == "passage"]
    assert set(passages["doc_id"]) == set(chunks["doc_id"].astype(str))


def test_cli_export_and_bad_format(graph_index, tmp_path, capsys):
    out = tmp_path / "g.graphml"
    assert gpurag_main(["export", str(graph_index.path), "--format", "graphml", "-o",
                        str(out)]) == 0
    assert "relation" in capsys.readouterr().out
    assert nx.read_graphml(out).number_of_nodes() > 0
    with pytest.raises(ConfigError):
        export_graph(graph_frames(graph_index.dir), tmp_path / "x", "dot")
