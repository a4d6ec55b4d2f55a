"""The BM25 model of local inserts as a delta beside the stored one, searched as one model.

A local insert used to re-weight and write the whole bm25s model (its weights depend on the
passage count ``N``, the document frequencies and ``avgdl``). Now the stored model (the last
full weighting's: a build, a compact, a delete, or an insert that re-weighted) is kept as it is
and an insert writes only its new passages' counts:

* ``lexical/delta.json``: ``k1``/``b``, the base's passages, terms and total length, the
  passage count of the last full weighting, the passages and total length now, the words new
  to the vocabulary (their ids follow the base's), and the parts in order;
* ``lexical/delta.partNNNNN.npy``: entries ``(term, doc, tf)`` sorted by ``(term, doc)``.

Opening the model (:func:`with_delta`, ``O(nnz)`` once) weights them with the corpus
statistics of now (``N``, document frequencies and ``avgdl`` over the base and the delta: the
Lucene weights a rebuild gives these passages) and rescales each base weight by its term's
``idf_now / idf_stored`` (exact in ``N`` and the document frequencies; only the base passages'
length normalization keeps the ``avgdl`` of the last full weighting). Every passage's entries
live in one piece, so the model is the base's term-passage matrix with the delta's columns
appended, and a query scores it as one model. The insert that would take ``N`` more than
``lexical_reweight_growth`` (build profile) past the last full weighting, or move the
average passage length more than :data:`~gpurag.pipeline.incremental_lexical.AVGDL_DRIFT`
(2%) from its, re-weights the whole model instead
(:mod:`gpurag.pipeline.incremental_lexical`), which bounds that ``avgdl`` drift and the
delta's share of the model. A model without a delta reads as it always did: a
full build's scores are unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from gpurag.errors import IndexFormatError

META = "delta.json"
PART_REL = "lexical/delta.npy"  # the parts' base name (:mod:`gpurag.store.parts`); never written
ENTRY = np.dtype([("term", "<i8"), ("doc", "<i8"), ("tf", "<f4")])
# Stored entries rescaled per step of :func:`with_delta` (a block of whole terms: one term
# with more is a block of its own).
RESCALE_BLOCK = 1 << 16
KEYS = ("k1", "b", "base_docs", "base_terms", "base_len", "weighted_docs", "docs",
        "total_len", "words", "parts")


class DeltaFormatError(IndexFormatError, ValueError):
    """A BM25 delta that does not fit its meta or its base model: a corrupt index (a
    ``ValueError`` too, for the update paths that test a delta's meta)."""


def lucene_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """bm25s' Lucene idf ``log(1 + (N - df + 0.5) / (df + 0.5))`` as it stores it (float32; 0
    where no passage holds the term)."""
    df = np.asarray(df, np.float64)
    idf = np.log(1 + (n_docs - df + 0.5) / (df + 0.5))
    return np.where(df > 0, idf, 0).astype(np.float32)



def read_meta(folder: str | Path) -> dict[str, Any] | None:
    """The delta's meta in the lexical ``folder``, None without one; ``ValueError`` when it
    lacks a key."""
    path = Path(folder) / META
    if not path.exists():
        return None
    meta = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(meta, dict) or any(k not in meta for k in KEYS) or not isinstance(
            meta["words"], list) or not isinstance(meta["parts"], list):
        raise DeltaFormatError(f"BM25 delta {path}: expected the keys {', '.join(KEYS)}")
    return meta


def load_parts(folder: str | Path, meta: dict[str, Any], mmap: bool = False
               ) -> list[np.ndarray]:
    """The delta's parts, oldest first (``ValueError`` on a wrong kind of array)."""
    out = []
    for name in meta["parts"]:
        file = Path(folder) / Path(str(name)).name
        arr = np.load(file, mmap_mode="r" if mmap else None, allow_pickle=False)
        if arr.dtype != ENTRY or arr.ndim != 1:
            raise DeltaFormatError(f"BM25 delta part {file}: expected a 1-D {ENTRY} array")
        out.append(arr)
    return out


def sorted_entries(parts: list[np.ndarray]) -> np.ndarray:
    """The entries of ``parts`` in ``(term, doc)`` order (each passage is in one part)."""
    if not parts:
        return np.zeros(0, ENTRY)
    e = np.concatenate([np.asarray(p, ENTRY) for p in parts])
    if len(parts) == 1:
        return e
    return e[np.lexsort((e["doc"], e["term"]))]


def with_delta(model, folder: str | Path) -> object:
    """The bm25s ``model`` (the stored base) with the delta in ``folder`` applied: its
    vocabulary extended by the delta's words, the delta's passages weighted and appended as
    columns, the base's weights rescaled to the document frequencies and passage count of now
    (see the module docstring). A folder without a delta: ``model`` unchanged."""
    meta = read_meta(folder)
    if meta is None:
        return model
    s = model.scores
    indptr = np.asarray(s["indptr"], np.int64)
    n_b, v_b = int(s["num_docs"]), len(indptr) - 1
    if (n_b, v_b) != (meta["base_docs"], meta["base_terms"]):
        raise DeltaFormatError(f"BM25 delta in {folder} was written over another base model")
    words = [str(word) for word in meta["words"]]
    n_terms = v_b + len(words)
    e = sorted_entries(load_parts(folder, meta))
    term, doc, tf = e["term"], e["doc"], e["tf"].astype(np.float64)
    n = int(meta["docs"])
    if term.size and (int(term.min()) < 0 or int(term.max()) >= n_terms
                      or int(doc.min()) < n_b or int(doc.max()) >= n or float(tf.min()) < 1):
        raise DeltaFormatError(f"BM25 delta in {folder}: entries outside its terms or passages")
    base_df = np.diff(indptr)
    df = np.bincount(term, minlength=n_terms)
    df[:v_b] += base_df
    idf = lucene_idf(df, n)  # float32, as bm25s stores it
    # the base's weights: idf_stored * g(tf, dl, avgdl_stored) -> idf_now * the same g
    idf_old = lucene_idf(base_df, n_b).astype(np.float64)
    scale = np.divide(idf[:v_b], idf_old, out=np.ones(v_b), where=idf_old > 0)
    data = s["data"]  # memory-mapped: read a block at a time
    # the delta's weights: Lucene's with the statistics of now (lucene_weights' arithmetic)
    dl = np.bincount(doc - n_b, weights=tf, minlength=n - n_b)
    k1, b = float(meta["k1"]), float(meta["b"])
    norm = k1 * ((1 - b) + b * dl[doc - n_b] / (float(meta["total_len"]) / n))
    weight = (idf[term] * (tf / (norm + tf))).astype(data.dtype)
    indices = s["indices"]
    # every term's new passages follow its stored ones: the merged arrays allocated once and
    # filled a block of terms at a time (a block's base entries rescaled and placed, then the
    # delta's), no whole-matrix temporaries
    d_df = np.bincount(term, minlength=n_terms)
    counts = np.concatenate([base_df, np.zeros(n_terms - v_b, np.int64)]) + d_df
    out_indptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum(counts, out=out_indptr[1:])
    del counts
    out_data = np.empty(int(out_indptr[-1]), data.dtype)
    out_indices = np.empty(int(out_indptr[-1]), indices.dtype)
    before = np.zeros(n_terms + 1, np.int64)  # delta entries of the terms before each
    np.cumsum(d_df, out=before[1:])
    t0 = 0
    while t0 < v_b:  # blocks of terms holding about RESCALE_BLOCK stored entries
        t1 = int(np.searchsorted(indptr, indptr[t0] + RESCALE_BLOCK, "right")) - 1
        t1 = min(max(t1, t0 + 1), v_b)
        lo, hi = int(indptr[t0]), int(indptr[t1])
        reps = base_df[t0:t1]
        dst = np.arange(lo, hi, dtype=np.int64) + np.repeat(before[t0:t1], reps)
        out_data[dst] = (np.asarray(data[lo:hi]) * np.repeat(scale[t0:t1], reps)
                         ).astype(data.dtype)
        out_indices[dst] = indices[lo:hi]
        t0 = t1
    ends = np.concatenate([indptr[1:], np.full(n_terms - v_b, indptr[-1], np.int64)])
    at = ends[term] + np.arange(term.size)  # the delta's places (np.insert's)
    out_data[at] = weight
    out_indices[at] = doc.astype(indices.dtype)
    model.scores = {
        "data": out_data,
        "indices": out_indices,
        "indptr": out_indptr,  # int64, as np.asarray(indptr, np.int64) above
        "num_docs": n,
    }
    # the vocabulary extended in place (a copy of it would be the model's size again); the
    # token id set as bm25s makes it, set(vocab.values())
    vocab = model.vocab_dict
    ids = getattr(model, "unique_token_ids_set", None)
    fresh = isinstance(ids, set) and len(ids) == len(vocab) and not any(
        word in vocab for word in words)
    for i, word in enumerate(words):
        vocab[word] = v_b + i
    if fresh:
        ids.update(range(v_b, n_terms))
    else:
        model.unique_token_ids_set = set(vocab.values())
    return model
