"""The second hop: from a first-hop passage the walk reaches the bridge entity's own page, above
the passage's other neighbours (title edges weigh more than plain mentions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpurag import Index
from gpurag.graph import csr
from gpurag.graph.ppr import ppr
from gpurag.pipeline.graph_stage import mention_weights

CORPUS = Path(__file__).parent / "data" / "bridge_corpus.jsonl"
QUESTION = "Where was the performer of Hello Love born?"
NEIGHBOUR_PAGES = ("rich", "capitol", "bakersfield", "buckaroos")


@pytest.fixture(scope="module")
def indexes(tmp_path_factory) -> dict[float, Index]:
    root = tmp_path_factory.mktemp("bridge")
    return {w: Index.build(CORPUS, root / f"title{w}", show_progress=False, title_edge_weight=w)
            for w in (10.0, 1.0)}


def test_mention_weights_mark_title_pairs_only():
    mentions = pd.DataFrame({"entity": [0, 1, 0, 2, 1], "chunk": [0, 0, 0, 1, 1],
                             "label": ["TITLE", "NAME", "NAME", "TITLE", "NAME"]})
    # pairs in first-seen order: (0,0) title, (1,0), (2,1) title, (1,1)
    assert mention_weights(mentions, 7.0).tolist() == [7.0, 1.0, 7.0, 1.0]


def _page_mass(index: Index, entity_name: str) -> dict[str, float]:
    """PPR mass on each page, walking from one entity alone."""
    aliases = index.dir.table("tables/aliases.parquet")
    entity = int(aliases.loc[aliases["name"] == entity_name, "entity_id"].iloc[0])
    g = csr.load(index.dir.file("graph"))
    reset = np.zeros((1, g.n_nodes))
    reset[0, entity] = 1.0
    n_ent = len(index.dir.table("tables/entities.parquet"))
    mass = ppr(g, reset, damping=0.8, tol=1e-10, method="power")[0, n_ent:]
    return dict(zip(index.chunks["doc_id"], mass.tolist(), strict=True))


def test_walk_from_the_question_entity_prefers_the_bridge_page(indexes):
    weighted = _page_mass(indexes[10.0], "Hello Love")
    plain = _page_mass(indexes[1.0], "Hello Love")
    assert all(weighted["owens"] > weighted[p] for p in NEIGHBOUR_PAGES)
    # The title edge is what does it: the bridge page's lead over the best other neighbour
    # grows when title edges weigh more.
    lead = {name: m["owens"] / max(m[p] for p in NEIGHBOUR_PAGES)
            for name, m in (("weighted", weighted), ("plain", plain))}
    assert lead["weighted"] > lead["plain"]


def test_bridge_question_ranks_first_hop_then_bridge_page(indexes):
    result = indexes[10.0].query(QUESTION, k=6)
    assert result.doc_ids[:2] == ["song", "owens"]
    assert "Hello Love" in {s.name for s in result.seeds}
