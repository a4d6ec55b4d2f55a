"""Lexical passage retrieval: BM25 (bm25s) over chunk title + text, built in memory on first use.

Graph retrieval uses it as a second passage seed source beside dense search and, fused with the
dense ranking, for the head of the list: on entity-heavy questions exact name matches are what
dense MiniLM embeddings blur.

A batch is scored as one sparse product, its questions' term counts ``(q, V)`` times bm25s'
precomputed ``(V, n)`` term-passage scores, and the top-``k`` is taken over each question's
nonzero scores (:func:`sparse_topk`): bm25s scores each question alone and selects with an
``argpartition`` over every passage's score, most of them 0, which is slow on such tie-heavy
arrays and breaks ties in no defined order. The product sums each passage's term scores in the
question's token order in float32, as bm25s does, so the scores are bm25s' to the bit; ties
are broken by the lower passage row.
"""

from __future__ import annotations

import logging
import re
from itertools import chain
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from gpurag.once import built_once
from gpurag.query.lexical_delta import lucene_idf, with_delta


def _bm25s():
    import bm25s

    # bm25s sets its own logger to DEBUG; its progress lines are not ours to print.
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


SMALL_SORT = 8192  # entries up to which a top-k sorts them all (the bucket pass costs more)
_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # bm25s.tokenize's default pattern


class Tokens:
    """Token ids of a batch of texts in CSR form: text ``i``'s ids are
    ``ids[indptr[i]:indptr[i + 1]]``, in text order (a repeated word repeats)."""

    def __init__(self, indptr: np.ndarray, ids: np.ndarray) -> None:
        self.indptr, self.ids = indptr, ids
        # (index, rows): the texts' BM25 rows once an index scored them (BM25Index.scores),
        # so the second hop's expansions reuse the seed search's rows
        self.scored: tuple[object, sp.csr_array] | None = None
        # (index, k, scores, rows): a copy of the widest top-k taken from those rows
        # (BM25Index.search_tokens), whose prefix is every narrower top-k (BM25Index.top)
        self.ranked: tuple[object, int, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def concat(self, left: np.ndarray, other: Tokens, right: np.ndarray) -> Tokens:
        """Per pair ``(left[j], right[j])``, this batch's text ``left[j]`` followed by
        ``other``'s text ``right[j]``: the tokens of the two texts joined by a space."""
        from gpurag.query.sparse_rows import csr_rows

        left, right = np.asarray(left, np.int64), np.asarray(right, np.int64)
        a_len = np.diff(self.indptr)[left]
        b_len = np.diff(other.indptr)[right]
        pair = np.arange(len(left))
        a_own, a_ids = csr_rows(pair, self.indptr[left], a_len, self.ids)
        b_own, b_ids = csr_rows(pair, other.indptr[right], b_len, other.ids)
        # each pair's own tokens first, then the other's: a stable sort by pair
        own = np.concatenate([a_own, b_own])
        order = np.argsort(own, kind="stable")
        indptr = np.zeros(len(left) + 1, np.int64)
        np.cumsum(a_len + b_len, out=indptr[1:])
        return Tokens(indptr, np.concatenate([a_ids, b_ids])[order])


class BM25Index:
    """BM25 over an index's chunks; ``search`` returns top-``k`` (scores, chunk rows).

    Built from the chunks in memory, or loaded (memory-mapped) from the copy an index build
    saved (:meth:`save`, :meth:`load`): at 148k passages building takes 11 s on 2 cores,
    loading well under one."""

    def __init__(self, chunks: pd.DataFrame | None = None, *, model=None, n: int = 0,
                 doc_ids: np.ndarray | None = None) -> None:
        self._bm25s = _bm25s()
        self._matrix: sp.csr_array | None = None
        self._lookup: dict[str, int] | None = None
        # the chunk id of each model passage, where the model holds only the chunks a local
        # delete left (its passages in order: the model a build of them gives); None: all
        self.doc_ids = None if doc_ids is None else np.asarray(doc_ids, np.int64)
        if model is not None:
            self.model, self.n = model, n
            return
        if chunks is None:
            raise ValueError("BM25Index needs chunks or a loaded model")
        corpus = passage_texts(chunks)
        tokens = self._bm25s.tokenize(corpus, stopwords="en", show_progress=False)
        self.model = self._bm25s.BM25()
        self.model.index(tokens, show_progress=False)
        self.n = len(corpus)

    def save(self, folder: str | Path) -> None:
        """Write the model's arrays and vocabulary into ``folder``."""
        self.model.save(str(folder), show_progress=False)

    @classmethod
    def load(cls, folder: str | Path, n: int, deleted: np.ndarray | None = None) -> BM25Index:
        """The model :meth:`save` wrote for ``n`` chunks, memory-mapped; with ``deleted``
        (sorted chunk ids a local delete removed) the model covers the other chunks, in
        order, and searches give chunk ids. With a local insert's delta beside it
        (:mod:`gpurag.query.lexical_delta`) the delta's passages (model passages after the
        stored ones: the live chunks go on in order) are appended, in memory."""
        model = _bm25s().BM25.load(str(folder), mmap=True, show_progress=False)
        model = with_delta(model, folder)  # local inserts' delta columns, if any
        live = _live_ids(n, deleted)
        _check_model(model, n if live is None else len(live), folder)
        return cls(model=model, n=n, doc_ids=live)

    @classmethod
    def over_live(cls, chunks: pd.DataFrame, deleted: np.ndarray | None) -> BM25Index:
        """The model of the ``chunks`` not ``deleted`` (built in memory), searched by id."""
        live = _live_ids(len(chunks), deleted)
        if live is None:
            return cls(chunks)
        index = cls(chunks.iloc[live].reset_index(drop=True), doc_ids=live)
        index.n = len(chunks)
        return index

    # -- the batched path -----------------------------------------------------------------
    @property
    def exact(self) -> bool:
        """Whether the sparse product reproduces the model's scores: a plain numpy model
        whose variant adds no score for absent terms (bm25s' default, Lucene)."""
        m = self.model
        return getattr(m, "nonoccurrence_array", None) is None and getattr(
            m, "backend", "numpy") == "numpy"

    @property
    def matrix(self) -> sp.csr_array:
        """bm25s' precomputed term-passage scores as a ``(V, n)`` CSR array (no copy)."""
        def build() -> sp.csr_array:
            s = self.model.scores
            indptr = np.asarray(s["indptr"])
            indices, n = np.asarray(s["indices"]), int(s["num_docs"])
            if self.doc_ids is not None:  # model passages -> chunk ids (increasing: in order)
                indices, n = self.doc_ids[indices].astype(indices.dtype), self.n
            return sp.csr_array((np.asarray(s["data"]), indices, indptr),
                                shape=(len(indptr) - 1, n), copy=False)

        return built_once(self, "_matrix", build)

    def tokens(self, texts: list[str]) -> Tokens:
        """The texts' token ids as bm25s' tokenizer and vocabulary give them (lower case, its
        word pattern, English stopwords dropped, words outside the vocabulary dropped)."""
        def lookup() -> dict[str, int]:
            stop = set(self._bm25s.stopwords.STOPWORDS_EN)
            return {t: int(i) for t, i in self.model.vocab_dict.items() if t not in stop}

        get = built_once(self, "_lookup", lookup).get
        words = list(map(_TOKEN.findall, map(str.lower, texts)))
        ids = np.fromiter((get(w, -1) for w in chain.from_iterable(words)), np.int64)
        owner = np.repeat(np.arange(len(texts)), list(map(len, words)))
        keep = ids >= 0
        indptr = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(np.bincount(owner[keep], minlength=len(texts)), out=indptr[1:])
        return Tokens(indptr, ids[keep])

    def scores(self, tokens: Tokens) -> sp.csr_array:
        """``(q, n)`` float32 BM25 scores of the tokenized texts, nonzero entries only, each
        row's by passage (kept on ``tokens`` and returned again for the same tokens: a batch's
        texts are scored once; not to be changed in place)."""
        if tokens.scored is not None and tokens.scored[0] is self:
            return tokens.scored[1]
        q = len(tokens)
        terms = sp.csr_array((np.ones(len(tokens.ids), np.float32), tokens.ids, tokens.indptr),
                             shape=(q, self.matrix.shape[0]), copy=False)
        # kept in token order, repeats unsummed: each passage's score sums its term scores
        # in the question's order, in float32, as bm25s adds them
        terms.has_canonical_format = False
        out = terms @ self.matrix
        out = out if isinstance(out, sp.csr_array) else sp.csr_array(out)
        out.sort_indices()  # by passage before it is cached: expansion_bm25 looks up in it
        tokens.scored = (self, out)
        return out

    def search_tokens(self, tokens: Tokens, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, chunk rows) per tokenized text, -1 padded (score 0)."""
        k = min(k, self.n)
        if k <= 0 or not len(tokens):
            return (np.zeros((len(tokens), max(k, 0)), np.float32),
                    np.full((len(tokens), max(k, 0)), -1, np.int64))
        out = sparse_topk(self.scores(tokens), k)
        if tokens.ranked is None or tokens.ranked[0] is not self or tokens.ranked[1] < k:
            tokens.ranked = (self, k, out[0].copy(), out[1].copy())
        return out

    def top(self, tokens: Tokens, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``sparse_topk(self.scores(tokens), k)``: the first ``k`` columns of a wider top-k
        :meth:`search_tokens` took of the same rows when there is one (the order is total:
        score, then the lower row; :func:`_top_buckets` keeps every tie at the cut), else
        ranked afresh."""
        k = min(k, self.n)
        held = tokens.ranked
        if held is not None and held[0] is self and held[1] >= k:
            return held[2][:, :k], held[3][:, :k]
        return sparse_topk(self.scores(tokens), k)

    def search(self, questions: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, chunk rows) per question; rows of -1 pad questions with fewer
        matching passages (score 0). Ties: lower row first."""
        k = min(k, self.n)
        if k <= 0 or not questions:
            return (np.zeros((len(questions), max(k, 0)), np.float32),
                    np.full((len(questions), max(k, 0)), -1, np.int64))
        if not self.exact:
            return self._search_bm25s(questions, k)
        return self.search_tokens(self.tokens(questions), k)

    def _by_id(self, scores: np.ndarray) -> np.ndarray:
        """bm25s' per-passage scores of the model's passages, by chunk id."""
        if self.doc_ids is None:
            return scores
        out = np.zeros(self.n, np.float32)
        out[self.doc_ids] = scores
        return out

    def _search_bm25s(self, questions: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """bm25s' own scoring, one question at a time (a model variant the product does not
        reproduce), with the same top-``k`` selection."""
        tokens = self._bm25s.tokenize(questions, stopwords="en", show_progress=False,
                                      return_ids=False)
        rows = [self._by_id(self.model.get_scores(t)) if t else np.zeros(self.n, np.float32)
                for t in tokens]
        dense = sp.csr_array(np.vstack(rows).astype(np.float32))
        dense.data = np.where(dense.data > 0, dense.data, 0).astype(np.float32)
        dense.eliminate_zeros()
        return sparse_topk(dense, k)


def _live_ids(n: int, deleted: np.ndarray | None) -> np.ndarray | None:
    """The ids of ``n`` chunks that are not ``deleted``, None when none is."""
    if deleted is None or not len(deleted):
        return None
    live = np.ones(n, bool)
    live[np.asarray(deleted, np.int64)] = False
    return np.flatnonzero(live)


def sparse_topk(scores: sp.csr_array, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``scores`` (``(q, n)``, positive float32 entries), the ``k`` best entries:
    (scores ``(q, k)`` float32, columns ``(q, k)`` int64), best first, ties by the lower
    column, padded with score 0 and column -1.

    One sort of the nonzero entries: each becomes an int64 key (row, inverted score bits,
    column) when those fit in 63 bits (a positive float's bits order as the float does), a
    lexsort otherwise; only the ``k`` kept per row are decoded."""
    from gpurag.query.sparse_rows import csr_positions

    q, n = scores.shape
    out_s = np.zeros((q, k), np.float32)
    out_r = np.full((q, k), -1, np.int64)
    if not scores.nnz:
        return out_s, out_r
    scores = _top_buckets(scores, k)
    indptr = scores.indptr.astype(np.int64)
    counts = np.diff(indptr)
    data = np.asarray(scores.data, np.float32)
    # the first min(count, k) sorted entries of each row
    take = np.minimum(counts, k)
    qr, sel = csr_positions(np.arange(q), indptr[:-1], take)
    pos = sel - indptr[qr]
    col_bits = max(int(n - 1).bit_length(), 1)
    row_bits = max(int(q - 1).bit_length(), 1)
    if row_bits + 31 + col_bits <= 63 and float(data.min()) > 0:
        key = np.repeat(np.arange(q, dtype=np.int64) << (31 + col_bits), counts)
        key |= (np.int64(0x7FFFFFFF) - data.view(np.int32)).astype(np.int64) << col_bits
        key |= scores.indices
        key.sort()
        key = key[sel]
        col = key & ((1 << col_bits) - 1)
        value = (np.int64(0x7FFFFFFF) - ((key >> col_bits) & 0x7FFFFFFF)).astype(
            np.int32).view(np.float32)
    else:
        owner = np.repeat(np.arange(q, dtype=np.int64), counts)
        order = np.lexsort((scores.indices, -data, owner))[sel]
        col, value = scores.indices[order].astype(np.int64), data[order]
    out_s[qr, pos] = value
    out_r[qr, pos] = col
    return out_s, out_r


def passage_texts(chunks: pd.DataFrame) -> list[str]:
    """The text BM25 indexes for each chunk: its title, a newline, its text."""
    if not len(chunks):
        return []
    return (chunks["title"].fillna("").astype(str) + "\n" + chunks["text"].astype(str)).tolist()


def lucene_weights(tf: np.ndarray, term: np.ndarray, doc: np.ndarray, dl: np.ndarray,
                   n_terms: int, k1: float, b: float) -> np.ndarray:
    """The float32 weights bm25s stores for (``term``, ``doc``) pairs of term frequency ``tf``
    over passages of lengths ``dl``: ``idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))``."""
    n_docs = len(dl)
    idf = lucene_idf(np.bincount(term, minlength=n_terms), n_docs)
    avg = dl.mean() if n_docs else 0.0
    norm = k1 * ((1 - b) + b * dl[doc] / avg)
    return (idf[term] * (tf / (norm + tf))).astype(np.float32)


def _top_buckets(scores: sp.csr_array, k: int) -> sp.csr_array:
    """``scores`` less the entries that cannot be in their row's top ``k``, found without a
    sort: each positive float32 score falls in a bucket of its exponent and top three mantissa
    bits (buckets order as the scores do; 63 below the row's best, then one for the rest); per
    row, the buckets from the best down until they hold ``k`` entries are kept, so every entry
    of the top ``k`` and every entry tied with its last stays. The sort that follows sees
    about ``k`` entries per row, not every passage a word hits."""
    indptr = scores.indptr.astype(np.int64)
    counts = np.diff(indptr)
    q = len(counts)
    if scores.nnz <= max(4 * k * q, SMALL_SORT):  # sorted as they are: cheaper than the pass
        return scores
    data = np.asarray(scores.data, np.float32)
    if not float(data.min()) > 0:
        return scores
    bucket = data.view(np.int32) >> 20
    full = counts > 0
    top = np.zeros(q, np.int32)
    top[full] = np.maximum.reduceat(bucket, indptr[:-1][full])
    owner = np.repeat(np.arange(q), counts)
    # buckets relative to the row's best; the 256-fold-and-lower tail shares bucket 0
    width = 64
    bucket = np.maximum(bucket - top[owner] + (width - 1), 0)
    per_row = np.bincount(owner * width + bucket, minlength=q * width).reshape(q, width)
    from_top = np.cumsum(per_row[:, ::-1], axis=1)  # entries in the best buckets
    # the lowest bucket kept: where the count from the top first reaches k (else bucket 0)
    reach = from_top >= min(k, 1 << 62)
    cut = np.where(reach.any(axis=1), width - 1 - reach.argmax(axis=1), 0)
    keep = bucket >= cut[owner]
    if keep.all():
        return scores
    out_ptr = np.zeros(q + 1, np.int64)
    np.cumsum(np.bincount(owner[keep], minlength=q), out=out_ptr[1:])
    return sp.csr_array((data[keep], scores.indices[keep], out_ptr), shape=scores.shape)


def _check_model(model, n: int, folder: str | Path) -> None:
    """The loaded BM25 arrays index only what exists (a resealed copy with ids out of range
    failed at query time with an IndexError); ``ValueError`` naming what is wrong."""
    scores = model.scores
    data, indices, indptr = (np.asarray(scores[k]) for k in ("data", "indices", "indptr"))
    problems = []
    if int(scores.get("num_docs", n)) != n:
        problems.append(f"it covers {scores.get('num_docs')} passages, the index has {n}")
    if indices.ndim != 1 or data.shape != indices.shape or indptr.ndim != 1 or not indptr.size:
        problems.append("its CSC arrays have the wrong shapes")
    elif (int(indptr[0]) != 0 or int(indptr[-1]) != indices.size
          or bool(np.any(indptr[1:] < indptr[:-1]))):
        problems.append("its column pointer does not run from 0 to the number of entries")
    elif indices.size and (int(indices.min()) < 0 or int(indices.max()) >= n):
        problems.append(f"it holds passage rows outside [0, {n})")
    vocab = np.fromiter(model.vocab_dict.values(), dtype=np.int64, count=len(model.vocab_dict))
    if vocab.size and (int(vocab.min()) < 0 or int(vocab.max()) >= max(indptr.size, 1)):
        problems.append("its vocabulary points past its columns")
    if problems:
        raise ValueError(f"BM25 copy in {folder}: {'; '.join(problems)}")
