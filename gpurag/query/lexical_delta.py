"""The BM25 model of local inserts as a delta beside the stored one, searched as one model.

A local insert used to re-weight and write the whole bm25s model (its weights depend on the
passage count ``N``, the document frequencies and ``avgdl``). Now the stored model (the last
full weighting's: a build, a compact, a delete, or an insert that re-weighted) is kept as it is
and an insert writes only its new passages' entries:

* ``lexical/delta.json``: ``k1``/``b``, the base's passages, terms and total length, the
  passage count of the last full weighting, the passages and total length now, the words new
  to the vocabulary (their ids follow the base's), and the parts in order;
* ``lexical/delta.partNNNNN.npy``: entries ``(term, doc, tf, weight)`` sorted by
  ``(term, doc)``; ``weight`` is the Lucene weight with the corpus statistics at that insert
  (``N``, document frequencies and ``avgdl`` over the base, the earlier parts and the new
  passages), ``tf`` what a re-weighting needs.

Every passage's entries live in one piece (the base or one part), so the loaded model is the
base's term-passage matrix with the delta's columns appended (:func:`with_delta`); a query
scores it as one model. The base's weights keep their (stale) statistics: the insert that would
take ``N`` more than ``lexical_reweight_growth`` (build profile) past the last full weighting
re-weights the whole model instead (:mod:`gpurag.pipeline.incremental_lexical`). A model
without a delta reads as it always did: a full build's scores are unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

META = "delta.json"
PART_REL = "lexical/delta.npy"  # the parts' base name (:mod:`gpurag.store.parts`); never written
ENTRY = np.dtype([("term", "<i8"), ("doc", "<i8"), ("tf", "<f4"), ("weight", "<f4")])
KEYS = ("k1", "b", "base_docs", "base_terms", "base_len", "weighted_docs", "docs",
        "total_len", "words", "parts")


def read_meta(folder: str | Path) -> dict[str, Any] | None:
    """The delta's meta in the lexical ``folder``, None without one; ``ValueError`` when it
    lacks a key."""
    path = Path(folder) / META
    if not path.exists():
        return None
    meta = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(meta, dict) or any(k not in meta for k in KEYS) or not isinstance(
            meta["words"], list) or not isinstance(meta["parts"], list):
        raise ValueError(f"BM25 delta {path}: expected the keys {', '.join(KEYS)}")
    return meta


def load_parts(folder: str | Path, meta: dict[str, Any], mmap: bool = False
               ) -> list[np.ndarray]:
    """The delta's parts, oldest first (``ValueError`` on a wrong kind of array)."""
    out = []
    for name in meta["parts"]:
        file = Path(folder) / Path(str(name)).name
        arr = np.load(file, mmap_mode="r" if mmap else None, allow_pickle=False)
        if arr.dtype != ENTRY or arr.ndim != 1:
            raise ValueError(f"BM25 delta part {file}: expected a 1-D {ENTRY} array")
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
    vocabulary extended by the delta's words and its term-passage matrix by the delta's
    columns (one ``O(nnz)`` copy per open). A folder without a delta: ``model`` unchanged."""
    meta = read_meta(folder)
    if meta is None:
        return model
    s = model.scores
    indptr = np.asarray(s["indptr"], np.int64)
    n_b, v_b = int(s["num_docs"]), len(indptr) - 1
    if (n_b, v_b) != (meta["base_docs"], meta["base_terms"]):
        raise ValueError(f"BM25 delta in {folder} was written over another base model")
    vocab = dict(model.vocab_dict)
    for i, word in enumerate(meta["words"]):
        vocab[str(word)] = v_b + i
    n_terms = v_b + len(meta["words"])
    e = sorted_entries(load_parts(folder, meta))
    term, doc = e["term"], e["doc"]
    n = int(meta["docs"])
    if term.size and (int(term.min()) < 0 or int(term.max()) >= n_terms
                      or int(doc.min()) < n_b or int(doc.max()) >= n):
        raise ValueError(f"BM25 delta in {folder}: entries outside its terms or passages")
    ends = np.concatenate([indptr[1:], np.full(n_terms - v_b, indptr[-1], np.int64)])
    at = ends[term]  # each term's new passages follow its stored ones
    counts = np.diff(np.concatenate([[0], ends])) + np.bincount(term, minlength=n_terms)
    model.scores = {
        "data": np.insert(np.asarray(s["data"]), at, e["weight"].astype(np.asarray(
            s["data"]).dtype)),
        "indices": np.insert(np.asarray(s["indices"]), at, doc.astype(np.asarray(
            s["indices"]).dtype)),
        "indptr": np.concatenate([[0], np.cumsum(counts)]).astype(indptr.dtype),
        "num_docs": n,
    }
    model.vocab_dict = vocab
    model.unique_token_ids_set = set(vocab.values())
    return model
