"""The graph query's stages over whole batches: a batch ranks each question as it ranks alone,
the title head source gives the per-question order without a per-question loop, linking as
arrays is the per-question lists, and the second hop reads the retriever's public parts."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from gpurag.query.linking import LinkedBatch
from gpurag.query.seeds import title_pages, title_rows

QUERY = Path(__file__).resolve().parents[2] / "gpurag" / "query"


def _plain(results):
    return [([p.chunk_id for p in r.passages], [round(p.score, 6) for p in r.passages],
             [(s.entity_id, s.via) for s in r.seeds],
             [(p.chunk_id, tuple(p.entities)) for p in r.paths]) for r in results]


def test_a_batch_ranks_each_question_as_it_ranks_alone(graph_index, questions):
    batch = graph_index.query_batch(questions, k=6, mode="graph", evidence=False)
    alone = [graph_index.query(q, k=6, mode="graph", evidence=False) for q in questions]
    assert _plain(batch) == _plain(alone)
    assert any(r.paths for r in batch) and any(r.seeds for r in batch)


def _title_rows_per_question(named: LinkedBatch, title_entity, dense_rows):
    """The former per-question loop: titled pages in dense order, then the rest by row."""
    out = np.full(dense_rows.shape, -1, np.int64)
    for qi in range(named.n):
        ents = named.entity[named.q == qi]
        if not len(ents):
            continue
        hits = np.flatnonzero(np.isin(title_entity, ents))
        order = np.argsort(np.argmax(dense_rows[qi][:, None] == hits[None, :], axis=0)
                           + (~np.isin(hits, dense_rows[qi])) * len(dense_rows[qi]),
                           kind="stable")
        hits = hits[order][: out.shape[1]]
        out[qi, : len(hits)] = hits
    return out


def test_title_rows_are_the_per_question_order():
    rng = np.random.default_rng(3)
    n_psg, n_ent, q, d = 300, 40, 50, 12
    title_entity = np.where(rng.random(n_psg) < 0.6, rng.integers(0, n_ent, n_psg), -1)
    per_q = rng.integers(0, 4, q)
    named = LinkedBatch(np.repeat(np.arange(q), per_q), rng.integers(0, n_ent, per_q.sum()),
                        np.zeros(per_q.sum(), np.int64), np.ones(per_q.sum(), np.int64), q)
    dense = np.stack([rng.permutation(n_psg)[:d] for _ in range(q)])
    dense[rng.random((q, d)) < 0.1] = -1
    got = title_rows(named, title_pages(title_entity, n_ent), dense)
    assert np.array_equal(got, _title_rows_per_question(named, title_entity, dense))
    assert (got >= 0).sum() > q  # the case has titled pages, in and outside the dense rows


def test_linking_as_arrays_is_the_per_question_lists(graph_index, questions):
    linker = graph_index.retriever.linker
    batch = linker.link_batch(questions)
    assert batch.n == len(questions) and len(batch.entity)
    assert batch.lists() == linker.link(questions)
    assert LinkedBatch.from_lists(batch.lists()).lists() == batch.lists()


def test_the_second_hop_reads_no_private_member_of_another_object():
    """``second_hop.py`` once read ``retriever._chunks`` and ``retriever._matrices()``."""
    tree = ast.parse((QUERY / "second_hop.py").read_text(encoding="utf-8"))
    private = [f"{ast.unparse(node)}" for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr.startswith("_")
               and not node.attr.startswith("__")
               and not (isinstance(node.value, ast.Name) and node.value.id == "self")]
    assert private == []
