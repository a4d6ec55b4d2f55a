"""The second hop's expanded BM25 searches from each question's own BM25 row (issue 26).

An expansion is a question's tokens followed by an entity name's; its BM25 row is the sparse
product of those tokens with the term-passage scores, summed per passage in token order in
float32 (:meth:`gpurag.query.lexical.BM25Index.scores`). A question has ~15 expansions, so that
product read the question's postings ~15 times. :func:`expansion_topk` reads them once per
question: where an expansion's name has no posting, its score is the question's; where it has,
it is the question's score with the name's term scores added in token order (the float32 sums
the product makes, bit for bit). Since names only add (nonnegative scores, monotone rounding),
an expansion's top-``k`` lies among its question's top-``k`` and the passages its name reaches,
so only those are ranked.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from gpurag.arrays import sorted_lookup
from gpurag.graph.ppr_local import rank_within
from gpurag.query.lexical import BM25Index, Tokens, sparse_topk
from gpurag.query.sparse_rows import csr_positions


def expansion_topk(lexical: BM25Index, tokens: Tokens, owner: np.ndarray, names: Tokens,
                   at: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``lexical.search_tokens(tokens.concat(owner, names, at), k)`` (the same scores and rows,
    ties by the lower row), from each question's BM25 row and each name's postings."""
    owner, at = np.asarray(owner, np.int64), np.asarray(at, np.int64)
    e, n = len(owner), lexical.n
    k = min(k, n)
    if k <= 0 or e == 0:
        return np.zeros((e, max(k, 0)), np.float32), np.full((e, max(k, 0)), -1, np.int64)
    own = lexical.scores(tokens)  # (q, n): each question's row, once, sorted by passage
    top_s, top_r = lexical.top(tokens, k)  # the seed search's top-k, cut to k
    # every posting entry of every expansion's name tokens: (expansion, token position, doc)
    m = lexical.matrix
    lo = names.indptr[at]
    ex, pos = csr_positions(np.arange(e, dtype=np.int64), lo, names.indptr[at + 1] - lo)
    level = pos - lo[ex]
    term = names.ids[pos].astype(np.int64)
    start = np.asarray(m.indptr, np.int64)[term]
    which, ppos = csr_positions(np.arange(term.size, dtype=np.int64), start,
                                np.asarray(m.indptr, np.int64)[term + 1] - start)
    key = ex[which] * n + np.asarray(m.indices, np.int64)[ppos]
    val = np.asarray(m.data, np.float32)[ppos]
    order = np.lexsort((level[which], key))  # by (expansion, doc), then token order
    key, val = key[order], val[order]
    first = np.r_[True, key[1:] != key[:-1]] if key.size else np.zeros(0, bool)
    group = np.cumsum(first) - 1
    touched = key[first]
    # each touched passage starts from its question's score, then adds the name's terms in order
    acc = _row_values(own, owner[touched // n], touched % n)
    step = rank_within(group)
    for r in range(int(step.max()) + 1 if step.size else 0):  # name tokens: a handful
        sel = step == r
        acc[group[sel]] += val[sel]
    # the question's own top-k, for every expansion, where the name did not reach
    top_rows = top_r[owner]
    ok = top_rows >= 0
    top_keys = (np.repeat(np.arange(e, dtype=np.int64), k).reshape(e, k) * n + top_rows)[ok]
    keys = np.concatenate([touched, top_keys])
    vals = np.concatenate([acc, top_s[owner][ok]])
    keys, firsts = np.unique(keys, return_index=True)  # a touched passage's own sum wins
    vals = vals[firsts]
    keep = vals != 0  # as the product drops exact zeros
    keys, vals = keys[keep], vals[keep]
    indptr = np.zeros(e + 1, np.int64)
    np.cumsum(np.bincount(keys // n, minlength=e), out=indptr[1:])
    rows = sp.csr_array((vals, (keys % n).astype(np.int32), indptr), shape=(e, n))
    return sparse_topk(rows, k)


def _row_values(scores: sp.csr_array, row: np.ndarray, col: np.ndarray) -> np.ndarray:
    """float32 ``scores[row[i], col[i]]`` (0 where not stored; rows' indices sorted)."""
    n = scores.shape[1]
    counts = np.diff(scores.indptr)
    keys = (np.repeat(np.arange(scores.shape[0], dtype=np.int64), counts) * n
            + np.asarray(scores.indices, np.int64))
    data = np.asarray(scores.data, np.float32)
    want = row.astype(np.int64) * n + col
    out = np.zeros(want.size, np.float32)
    pos, hit = sorted_lookup(keys, want)
    out[hit] = data[pos[hit]]
    return out
