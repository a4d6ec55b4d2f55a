"""An index's evidence arrays live as long as the index (review Q, bug 3)."""

from __future__ import annotations

import gc
import weakref

from gpurag import Index
from gpurag.query.evidence import evidence_data

QUESTIONS = ["Who designed the Corven Lighthouse?", "Where is Tarnwick?"]


def test_a_closed_and_dropped_index_frees_its_evidence(graph_index_path):
    refs = []
    for _ in range(2):  # two "reloads" of one path
        index = Index.open(graph_index_path)
        results = index.query_batch(QUESTIONS, k=5, mode="graph")
        assert any(r.to_dict()["chains"] for r in results)  # the sentence spans were read
        data = evidence_data(index.retriever)
        assert data.sentences.cache_info().currsize > 0
        refs.append(weakref.ref(data))
        index.close()
        del index, results, data
        gc.collect()
    assert [ref() for ref in refs] == [None, None]
