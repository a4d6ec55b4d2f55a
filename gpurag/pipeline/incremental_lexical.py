"""The BM25 model of a local update, from the stored one and the changed chunks only.

bm25s stores, for each (term, passage) pair, the Lucene BM25 weight ``idf(df, N) * tf / (tf +
k1 * (1 - b + b * dl / avgdl))``. The term frequencies ``tf`` and passage lengths ``dl`` are not
stored, but they follow from the weights: within a passage ``K = k1 * (1 - b + b * dl /
avgdl)`` is one number, each weight gives ``K / tf``, and the largest of those is ``K`` itself
(when the passage has a term seen once); then ``tf = K / (K / tf)`` rounded, ``dl`` their sum.
A passage whose terms all occur ``m >= 2`` times (one in 50k enwiki passages: enough to send
every update of a large index to a rebuild) gives ``K / m`` instead; ``K``'s formula fixes its
``m`` (:func:`_least_tf`). The recovery checks itself (every tf must be a whole number and the
lengths must give back every ``K``: then every stored weight is the formula's, without
computing them twice); when it does not hold (another scoring variant) the model is rebuilt
from all chunks as before. The formula and the passage text are
:mod:`gpurag.query.lexical`'s (:func:`~gpurag.query.lexical.lucene_weights`,
:func:`~gpurag.query.lexical.passage_texts`).

A local insert within the build profile's ``lexical_reweight_growth`` (and within
:data:`AVGDL_DRIFT` of the stored average passage length) writes only the new
chunks' counts as a delta (:func:`delta_part`, :mod:`gpurag.query.lexical_delta`); the rest
(a delete, an insert past that bound) re-weights the whole model: the stored counts (the base's
recovered, the delta's as stored) with the change applied. An update then tokenizes only the
new chunks (terms new to the vocabulary get ids after the
stored ones), drops the removed passages' pairs, and recomputes every weight with the new
``N``, document frequencies and ``avgdl`` in one vectorized pass: the scores are a full
build's (the vocabulary ids, and so the files, are not).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from gpurag.query import lexical_delta
from gpurag.query.lexical import lucene_idf, lucene_weights, passage_texts

RTOL = 1e-4
# A BM25 delta keeps the stored passages' length normalization at the ``avgdl`` of the last
# full weighting (only N and the document frequencies are brought up to date on read), so an
# insert whose passages would move the average length by more than this share of it
# re-weights the whole model instead, as past ``lexical_reweight_growth``: inserted passages
# much longer (or shorter) than the stored ones otherwise shift the stored passages' scores
# (review of issue 34: 60-word passages into 12-word ones at 10% growth, avgdl +39%, changed
# the top 5 of 22% of the questions; at this bound the drift of every stored weight's length
# term stays within about b times it).
AVGDL_DRIFT = 0.02


def recover_counts(model) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(tf, term, doc, dl)`` of the stored model's pairs, or None when they cannot be
    recovered exactly (see the module docstring)."""
    if (getattr(model, "method", None), getattr(model, "idf_method", None)) != (
            "lucene", "lucene") or getattr(model, "nonoccurrence_array", None) is not None:
        return None
    s = model.scores
    data = np.asarray(s["data"], np.float64)
    doc = np.asarray(s["indices"], np.int64)
    indptr = np.asarray(s["indptr"], np.int64)
    n_docs, n_terms = int(s["num_docs"]), len(indptr) - 1
    term = np.repeat(np.arange(n_terms, dtype=np.int64), np.diff(indptr))
    idf = lucene_idf(np.diff(indptr), n_docs).astype(np.float64)
    if not len(data) or (idf[term] <= 0).any() or (data <= 0).any():
        return None
    tfc = data / idf[term]
    if (tfc >= 1).any():
        return None
    ratio = (1 - tfc) / tfc  # K / tf
    k = np.zeros(n_docs)
    np.maximum.at(k, doc, ratio)  # K / (the passage's least tf); ratios are > 0
    held = np.bincount(doc, minlength=n_docs) > 0
    rel = k[doc] / ratio  # tf / the passage's least tf
    k1, b = float(model.k1), float(model.b)
    m = _least_tf(k, np.bincount(doc, weights=rel, minlength=n_docs), held, k1, b)
    if m is None:
        return None
    raw = m[doc] * rel
    tf = np.maximum(np.rint(raw), 1)
    if not np.allclose(raw, tf, rtol=RTOL, atol=0):  # a K / tf that is no whole tf
        return None
    dl = np.bincount(doc, weights=tf, minlength=n_docs)
    norm = k1 * ((1 - b) + b * dl / dl.mean())
    if not np.allclose(norm[held], (m * k)[held], rtol=RTOL):
        return None
    # each stored weight is idf * tf / (K + tf) with this tf and K: the formula's own
    return tf, term, doc, dl


def _least_tf(k: np.ndarray, rel_len: np.ndarray, held: np.ndarray, k1: float, b: float
              ) -> np.ndarray | None:
    """Each passage's least term frequency ``m`` (1 for almost all). A passage whose terms
    all occur ``m >= 2`` times gives ``k = K / m`` and a length ``rel_len = dl / m``. Where
    ``m = 1``, ``K = k1 * (1 - b + b * dl / avgdl)`` gives ``avgdl`` back, the same from every
    such passage: the median over all passages is it. Then ``m = k1 (1 - b) / (k - k1 b rel_len
    / avgdl)``, rounded; None when that is no whole number >= 1 or the lengths do not average
    to ``avgdl``."""
    if not held.any():
        return np.ones(len(k))
    with np.errstate(divide="ignore", invalid="ignore"):
        implied = k1 * b * rel_len[held] / (k[held] - k1 * (1 - b))
    finite = implied[np.isfinite(implied) & (implied > 0)]
    if not len(finite):
        return None
    avgdl = float(np.sort(finite)[(len(finite) - 1) // 2])
    den = k - k1 * b * rel_len / avgdl
    if (den[held] <= 0).any():
        return None
    raw = np.where(held, k1 * (1 - b) / np.where(held, den, 1), 1)
    m = np.maximum(np.rint(raw), 1)
    if not np.allclose(raw, m, rtol=RTOL, atol=0):
        return None
    if not np.isclose(float((m * rel_len).mean()), avgdl, rtol=RTOL):
        return None
    return m


def stored_counts(model, folder: Path | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(tf, term, doc, dl)`` of every passage of the stored model: the base ``model``'s
    recovered (:func:`recover_counts`) and, with a delta in ``folder``
    (:mod:`gpurag.query.lexical_delta`), the delta's stored counts after them (``model``'s
    vocabulary is then extended by the delta's words); None when the base's cannot be
    recovered."""
    counts = recover_counts(model)
    meta = lexical_delta.read_meta(folder) if folder is not None else None
    if counts is None or meta is None:
        return counts
    tf, term, doc, dl = counts
    e = lexical_delta.sorted_entries(lexical_delta.load_parts(folder, meta))
    n = int(meta["docs"])
    d_dl = np.bincount(e["doc"] - len(dl), weights=e["tf"].astype(np.float64),
                       minlength=n - len(dl))
    vocab = dict(model.vocab_dict)
    base_terms = len(np.asarray(model.scores["indptr"])) - 1
    for i, word in enumerate(meta["words"]):
        vocab[str(word)] = base_terms + i
    model.vocab_dict = vocab
    return (np.concatenate([tf, e["tf"].astype(np.float64)]),
            np.concatenate([term, e["term"]]), np.concatenate([doc, e["doc"]]),
            np.concatenate([dl, d_dl]))


def updated_model(model, keep: np.ndarray, new_texts: list[str], bm25s,
                  folder: Path | None = None) -> object | None:
    """The stored bm25s ``model`` (with the delta in ``folder``, if any) with the passages
    ``~keep`` removed (later ones renumbered) and ``new_texts`` appended, every weight
    recomputed; None when its counts cannot be recovered."""
    counts = stored_counts(model, folder)
    if counts is None:
        return None
    tf, term, doc, dl = counts
    new_pos = np.cumsum(keep) - 1
    stay = keep[doc]
    tf, term, doc = tf[stay], term[stay], new_pos[doc[stay]]
    dl = dl[keep]
    vocab = dict(model.vocab_dict)
    new_pairs = (np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
    if new_texts:
        tok = bm25s.tokenize(new_texts, stopwords="en", show_progress=False)
        words = np.empty(len(tok.vocab), dtype=object)
        for word, i in tok.vocab.items():
            words[i] = word
        terms, docs, tfs, lengths = [], [], [], []
        base = int(keep.sum())
        for j, ids in enumerate(tok.ids):
            lengths.append(len(ids))
            for word_id, n in Counter(ids).items():
                word = words[word_id]
                if word not in vocab:
                    vocab[word] = len(vocab)
                terms.append(vocab[word])
                docs.append(base + j)
                tfs.append(n)
        new_pairs = (np.asarray(tfs, np.float64), np.asarray(terms, np.int64),
                     np.asarray(docs, np.int64))
        dl = np.concatenate([dl, np.asarray(lengths, np.float64)])
    tf, term, doc = _merged_pairs((tf, term, doc), new_pairs)
    n_terms = max(len(vocab), int(term.max()) + 1 if len(term) else 0)
    weights = lucene_weights(tf, term, doc, dl, n_terms, float(model.k1), float(model.b))
    model.scores = {
        "data": weights,
        "indices": doc.astype(np.int32),
        "indptr": np.concatenate([[0], np.cumsum(np.bincount(term, minlength=n_terms))]
                                 ).astype(np.int64),
        "num_docs": len(dl),
    }
    model.vocab_dict = vocab
    model.unique_token_ids_set = set(vocab.values())
    return model


def _merged_pairs(stored: tuple[np.ndarray, np.ndarray, np.ndarray],
                  new: tuple[np.ndarray, np.ndarray, np.ndarray]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``(tf, term, doc)`` pairs of ``stored`` and ``new`` in ``(term, doc)`` order (the
    stored model's column order). The stored pairs come in that order already (a CSC matrix
    with sorted rows) and every new passage follows the stored ones, so each new pair goes at
    the end of its term's run: an insertion of the few new pairs, not a sort of all of
    them (a sort where the stored pairs are not in order)."""
    tf, term, doc = stored
    n_tf, n_term, n_doc = new
    step = np.diff(term)
    if not ((step > 0) | ((step == 0) & (np.diff(doc) > 0))).all():
        tf, term, doc = (np.concatenate([a, b]) for a, b in zip(stored, new, strict=True))
        order = np.lexsort((doc, term))
        return tf[order], term[order], doc[order]
    if not len(n_term):
        return tf, term, doc
    order = np.lexsort((n_doc, n_term))
    n_tf, n_term, n_doc = n_tf[order], n_term[order], n_doc[order]
    at = np.searchsorted(term, n_term, side="right")
    return np.insert(tf, at, n_tf), np.insert(term, at, n_term), np.insert(doc, at, n_doc)


def write_lexical_delta(stored_folder: Path, out_folder: Path, n_stored: int, keep: np.ndarray,
                        new_chunks: pd.DataFrame) -> bool:
    """Write the updated BM25 model of the stored one at ``stored_folder`` (``n_stored``
    passages) into ``out_folder``; False (nothing written) when it must be rebuilt."""
    from gpurag.query.lexical import _bm25s

    bm25s = _bm25s()
    try:
        model = bm25s.BM25.load(str(stored_folder), mmap=False, show_progress=False)
    except Exception:  # an unreadable copy: rebuild
        return False
    meta = None
    try:
        meta = lexical_delta.read_meta(stored_folder)
    except ValueError:
        return False
    if int(model.scores.get("num_docs", -1)) != (meta["base_docs"] if meta else n_stored):
        return False
    texts = passage_texts(new_chunks)
    if meta is not None and int(meta["docs"]) != n_stored:
        return False
    updated = updated_model(model, keep, texts, bm25s, stored_folder)
    if updated is None:
        return False
    updated.save(str(out_folder), show_progress=False)
    return True


def tokenized_pairs(texts: list[str], vocab: dict[str, int], first_doc: int, next_id: int,
                    bm25s) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """``(tf, term, doc, lengths, words)`` of ``texts`` (passages ``first_doc`` on), tokenized
    as bm25s indexes them; words new to ``vocab`` are added to it (ids ``next_id`` on: not
    ``len(vocab)``, as bm25s' vocabulary may hold an empty word at the id past its terms) and
    returned in id order."""
    tf, terms, docs, lengths, words_new = [], [], [], [], []
    if texts:
        tok = bm25s.tokenize(texts, stopwords="en", show_progress=False)
        words = np.empty(len(tok.vocab), dtype=object)
        for word, i in tok.vocab.items():
            words[i] = word
        for j, ids in enumerate(tok.ids):
            lengths.append(len(ids))
            for word_id, n in Counter(ids).items():
                word = words[word_id]
                if word not in vocab:
                    vocab[word] = next_id + len(words_new)
                    words_new.append(word)
                terms.append(vocab[word])
                docs.append(first_doc + j)
                tf.append(n)
    return (np.asarray(tf, np.float64), np.asarray(terms, np.int64),
            np.asarray(docs, np.int64), np.asarray(lengths, np.float64), words_new)


def delta_part(model, meta: dict | None, texts: list[str], growth: float, bm25s
               ) -> tuple[np.ndarray, dict] | None:
    """The entries ``(term, doc, tf)`` of a new BM25 delta part for passages ``texts`` over
    the stored base ``model`` and its delta (``meta``, None: none yet), and the delta's new
    meta; None when the model must be re-weighted whole instead (``N`` more than ``growth``
    past the last full weighting, the average passage length more than
    :data:`AVGDL_DRIFT` from its, or the base's counts not recoverable). Readers weight the
    entries (:func:`~gpurag.query.lexical_delta.with_delta`)."""
    if meta is None:  # the first insert over this base: its total length, once
        counts = recover_counts(model)
        if counts is None:
            return None
        n_b = int(model.scores["num_docs"])
        meta = {"format": 1, "k1": float(model.k1), "b": float(model.b), "base_docs": n_b,
                "base_terms": len(np.asarray(model.scores["indptr"])) - 1,
                "base_len": float(counts[3].sum()), "weighted_docs": n_b, "docs": n_b,
                "total_len": float(counts[3].sum()), "words": [], "parts": []}
    n_now = int(meta["docs"]) + len(texts)
    if n_now > meta["weighted_docs"] * (1 + growth):
        return None
    vocab = dict(model.vocab_dict)
    for i, word in enumerate(meta["words"]):
        vocab[str(word)] = meta["base_terms"] + i
    next_id = int(meta["base_terms"]) + len(meta["words"])
    tf, term, doc, lengths, words = tokenized_pairs(texts, vocab, int(meta["docs"]), next_id,
                                                    bm25s)
    if drifts(meta, n_now, float(meta["total_len"]) + float(lengths.sum())):
        return None
    entries = np.empty(len(tf), lexical_delta.ENTRY)
    entries["term"], entries["doc"], entries["tf"] = term, doc, tf
    entries = entries[np.lexsort((doc, term))]
    return entries, {**meta, "docs": n_now, "total_len": float(meta["total_len"]) + float(
        lengths.sum()), "words": [*meta["words"], *words]}


def drifts(meta: dict, n_docs: int, total_len: float) -> bool:
    """Whether ``n_docs`` passages of ``total_len`` words in all move the average passage
    length more than :data:`AVGDL_DRIFT` from the last full weighting's (the base's)."""
    base_docs, base_len = int(meta["base_docs"]), float(meta["base_len"])
    if base_docs <= 0 or base_len <= 0 or n_docs <= 0:
        return base_len > 0 or total_len > 0
    return abs((total_len / n_docs) / (base_len / base_docs) - 1) > AVGDL_DRIFT


def append_delta(writer, d, new_chunks: pd.DataFrame, growth: float, n_stored: int) -> bool:
    """Write the BM25 model of an insert of ``new_chunks`` into the version ``writer``
    writes as a delta (:mod:`gpurag.query.lexical_delta`): the stored model's files kept, the
    new passages' entries a part (:func:`delta_part`). False (nothing written) when it must
    be re-weighted whole instead, or the stored model does not cover ``n_stored`` passages
    (the chunks that stay, in order: the model's passages)."""
    import json

    from gpurag.query.lexical import _bm25s
    from gpurag.store import layout

    bm25s = _bm25s()
    folder = d.file(layout.LEXICAL_DIR)
    try:
        meta = (lexical_delta.read_meta(folder)
                if d.has(f"{layout.LEXICAL_DIR}/{lexical_delta.META}") else None)
        model = bm25s.BM25.load(str(folder), mmap=True, show_progress=False)
    except Exception:  # an unreadable copy: re-weighted (or rebuilt) whole
        return False
    if int(meta["docs"] if meta else model.scores["num_docs"]) != n_stored:
        return False  # not the model of the ``n_stored`` passages: re-weighted or rebuilt
    made = delta_part(model, meta, passage_texts(new_chunks), growth, bm25s)
    if made is None:
        return False
    entries, meta = made
    for rel in layout.LEXICAL_FILES:
        writer.keep(d, rel)
    parts = writer.append_part(d, lexical_delta.PART_REL, entries,
                               lexical_delta.sorted_entries)
    meta["parts"] = [Path(p).name for p in parts]
    writer.path(f"{layout.LEXICAL_DIR}/{lexical_delta.META}").write_text(
        json.dumps(meta, sort_keys=True), encoding="utf-8")
    return True
