"""The BM25 delta's application before it was blocked (gpurag/query/lexical_delta.py at
21109dc): the reference the blocked rescale must equal bit for bit
(tests/query/test_lexical_delta_blocks.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpurag.query import lexical_delta as ld


def with_delta_reference(model, folder: str | Path) -> object:
    """:func:`gpurag.query.lexical_delta.with_delta` as it was before the blocked rescale
    (whole-matrix arrays, ``np.insert``, a copied vocabulary): the tests' reference."""
    meta = ld.read_meta(folder)
    if meta is None:
        return model
    s = model.scores
    indptr = np.asarray(s["indptr"], np.int64)
    n_b, v_b = int(s["num_docs"]), len(indptr) - 1
    if (n_b, v_b) != (meta["base_docs"], meta["base_terms"]):
        raise ld.DeltaFormatError(f"BM25 delta in {folder} was written over another base model")
    vocab = dict(model.vocab_dict)
    for i, word in enumerate(meta["words"]):
        vocab[str(word)] = v_b + i
    n_terms = v_b + len(meta["words"])
    e = ld.sorted_entries(ld.load_parts(folder, meta))
    term, doc, tf = e["term"], e["doc"], e["tf"].astype(np.float64)
    n = int(meta["docs"])
    base_df = np.diff(indptr)
    df = np.bincount(term, minlength=n_terms)
    df[:v_b] += base_df
    idf = ld.lucene_idf(df, n)  # float32, as bm25s stores it
    # the base's weights: idf_stored * g(tf, dl, avgdl_stored) -> idf_now * the same g
    idf_old = ld.lucene_idf(base_df, n_b).astype(np.float64)
    scale = np.divide(idf[:v_b], idf_old, out=np.ones(v_b), where=idf_old > 0)
    data = np.asarray(s["data"])
    base = (data * np.repeat(scale, base_df)).astype(data.dtype)
    # the delta's weights: Lucene's with the statistics of now (lucene_weights' arithmetic)
    dl = np.bincount(doc - n_b, weights=tf, minlength=n - n_b)
    k1, b = float(meta["k1"]), float(meta["b"])
    norm = k1 * ((1 - b) + b * dl[doc - n_b] / (float(meta["total_len"]) / n))
    weight = (idf[term] * (tf / (norm + tf))).astype(data.dtype)
    ends = np.concatenate([indptr[1:], np.full(n_terms - v_b, indptr[-1], np.int64)])
    at = ends[term]  # each term's new passages follow its stored ones
    counts = np.diff(np.concatenate([[0], ends])) + np.bincount(term, minlength=n_terms)
    indices = np.asarray(s["indices"])
    model.scores = {
        "data": np.insert(base, at, weight),
        "indices": np.insert(indices, at, doc.astype(indices.dtype)),
        "indptr": np.concatenate([[0], np.cumsum(counts)]).astype(indptr.dtype),
        "num_docs": n,
    }
    model.vocab_dict = vocab
    model.unique_token_ids_set = set(vocab.values())
    return model
