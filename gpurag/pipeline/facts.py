"""Facts: short texts embedded for retrieval, each linked to the entities it names.

With labelled relations (LLM or imported triples) a fact is a unique (head, relation, tail)
triple. With only co-occurrence relations (the rule-based extractors) a fact is a sentence that
names two or more entities: the sentence says *how* they are related even though no extractor
labelled it, so a question about that relation still finds its entities.

The table's ``typed`` column tells them apart: True for a labelled triple (it names exactly two
entities and how they relate, which the second hop reads, :mod:`gpurag.query.second_hop`),
False for a sentence.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpurag.extract.sentences import sentence_spans


def triple_facts(rel: pd.DataFrame, cooccurs: str) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Facts from labelled relations: table plus fact->entity CSR (indptr, entity ids)."""
    labelled = rel[rel["relation"] != cooccurs]
    facts = (labelled.groupby(["head_entity", "relation", "tail_entity"], sort=False)
             .agg(weight=("weight", "sum"), chunk=("chunk", "min"), head=("head", "first"),
                  tail=("tail", "first")).reset_index())
    facts["text"] = facts["head"] + " " + facts["relation"] + " " + facts["tail"]
    facts["typed"] = True
    ents = np.stack([facts["head_entity"].to_numpy(np.int64),
                     facts["tail_entity"].to_numpy(np.int64)], axis=1).ravel()
    indptr = np.arange(0, 2 * len(facts) + 1, 2, dtype=np.int64)
    return facts[["chunk", "weight", "text", "typed"]], indptr, ents


def sentence_facts(chunks: pd.DataFrame, mentions: pd.DataFrame
                   ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Facts from sentences naming 2+ distinct entities: table plus fact->entity CSR."""
    texts = chunks["text"].astype(str).tolist()
    row, start, end = sentence_spans(texts)
    located = mentions[mentions["start"] >= 0]
    m_chunk = located["chunk"].to_numpy(np.int64)
    m_start = located["start"].to_numpy(np.int64)
    # Global sentence id of each mention: sentences are sorted by (row, start).
    key_sent = row * (1 << 32) + start
    key_ment = m_chunk * (1 << 32) + m_start
    sid = np.searchsorted(key_sent, key_ment, side="right") - 1
    pairs = pd.DataFrame({"sentence": sid, "entity": located["entity"].to_numpy(np.int64)})
    pairs = pairs.drop_duplicates().sort_values(["sentence", "entity"], kind="stable")
    n_ent = pairs.groupby("sentence", sort=True)["entity"].size()
    multi = n_ent.index[n_ent.to_numpy() >= 2].to_numpy()
    pairs = pairs[pairs["sentence"].isin(multi)]
    fact_of_sentence = pd.Series(np.arange(len(multi)), index=multi)
    fact_id = fact_of_sentence.reindex(pairs["sentence"]).to_numpy()
    counts = np.bincount(fact_id, minlength=len(multi))
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    text = [texts[r][s:e].strip() for r, s, e in zip(row[multi], start[multi], end[multi],
                                                      strict=True)]
    facts = pd.DataFrame({"chunk": row[multi].astype(np.int64),
                          "weight": np.ones(len(multi), np.float32), "text": text,
                          "typed": np.zeros(len(multi), bool)})
    return facts, indptr, pairs["entity"].to_numpy(np.int64)
