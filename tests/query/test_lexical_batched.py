"""BM25 for a whole batch as one sparse product with a tie-stable top-k: the same scores as
bm25s to the bit, ties broken by the lower passage row (bm25s' argpartition over every
passage's score broke them in no defined order and is slow on such mostly-zero arrays)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from gpurag.query.lexical import BM25Index, sparse_topk

TEXTS = [
    "Brenmoor University is a university in Oskerby.",
    "The river Osk flows through Oskerby to the coast.",
    "Halvard studied law at Brenmoor University.",
    "Kestrel Dynamics Ltd. was founded in Oskerby in 1961.",
    "The coast of Osk is known for its cliffs and its lighthouse.",
]


@pytest.fixture(scope="module")
def bm25() -> BM25Index:
    # each passage three times (rows i, i + 5, i + 10): every match ties with two copies
    titles = [f"Page {i % 5}" for i in range(15)]
    return BM25Index(pd.DataFrame({"title": titles, "text": TEXTS * 3}))


QUESTIONS = ["Where is Brenmoor University?", "Who founded Kestrel Dynamics in Oskerby?",
             "the of and", "", "coast coast Osk lighthouse", "nothing matches zzz"]


def _bm25s_scores(bm25: BM25Index, texts: list[str]) -> np.ndarray:
    """bm25s' own dense scores, one text at a time."""
    tokens = bm25._bm25s.tokenize(texts, stopwords="en", show_progress=False, return_ids=False)
    return np.vstack([bm25.model.get_scores(t) if t else np.zeros(bm25.n, np.float32)
                      for t in tokens])


def test_scores_are_bm25s_to_the_bit_and_ties_go_to_the_lower_row(bm25):
    scores, rows = bm25.search(QUESTIONS, 7)
    want = _bm25s_scores(bm25, QUESTIONS)
    for i in range(len(QUESTIONS)):
        order = np.lexsort((np.arange(bm25.n), -want[i]))[:7]
        found = want[i][order] > 0
        np.testing.assert_array_equal(rows[i], np.where(found, order, -1))
        np.testing.assert_array_equal(scores[i], np.where(found, want[i][order], 0))
    # the copies of a passage tie: the lowest row comes first, each time
    best = int(rows[0][0])
    assert best < 5 and rows[0][:3].tolist() == [best, best + 5, best + 10]
    assert (rows[2] == -1).all() and (rows[3] == -1).all() and (rows[5] == -1).all()


def test_the_product_matches_bm25s_retrieve(bm25):
    tokens = bm25._bm25s.tokenize(QUESTIONS, stopwords="en", show_progress=False)
    old_rows, old_scores = bm25.model.retrieve(tokens, k=7, show_progress=False)
    scores, _ = bm25.search(QUESTIONS, 7)
    # the same scores in the same order; a row may differ only inside a tie
    np.testing.assert_array_equal(np.where(old_scores > 0, old_scores, 0), scores)
    for i in range(len(QUESTIONS)):
        for v in np.unique(scores[i][scores[i] > 0]):
            assert set(old_rows[i][old_scores[i] == v]) <= set(
                np.flatnonzero(_bm25s_scores(bm25, [QUESTIONS[i]])[0] == v))


def test_a_question_and_a_name_tokenize_as_the_joined_text(bm25):
    questions = ["Who founded Kestrel Dynamics?", "Where does the Osk flow?"]
    names = ["Oskerby", "Brenmoor University", "the", "Kestrel Kestrel"]
    left, right = np.array([0, 0, 1, 1, 0]), np.array([0, 1, 2, 3, 3])
    joined = bm25.tokens([f"{questions[i]} {names[j]}" for i, j in zip(left, right, strict=True)])
    pairs = bm25.tokens(questions).concat(left, bm25.tokens(names), right)
    np.testing.assert_array_equal(pairs.indptr, joined.indptr)
    np.testing.assert_array_equal(pairs.ids, joined.ids)
    a, b = bm25.search_tokens(pairs, 4), bm25.search([f"{questions[i]} {names[j]}"
                                                      for i, j in zip(left, right, strict=True)], 4)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_sparse_topk_keys_and_lexsort_agree():
    rng = np.random.default_rng(3)
    dense = rng.choice([0.0, 0.5, 1.25, 2.0, 3.5], size=(40, 300),
                       p=[0.9, 0.04, 0.03, 0.02, 0.01]).astype(np.float32)
    mat = sp.csr_array(dense)
    want_rows = np.lexsort((np.broadcast_to(np.arange(300), dense.shape), -dense), axis=1)
    scores, rows = sparse_topk(mat, 6)
    want = np.take_along_axis(dense, want_rows, axis=1)[:, :6]
    np.testing.assert_array_equal(scores, want)
    np.testing.assert_array_equal(rows, np.where(want > 0, want_rows[:, :6], -1))
    # too wide for one int64 key (rows x score bits x columns): the lexsort gives the same
    wide = sp.csr_array((mat.data, mat.indices, mat.indptr), shape=(40, 2**40))
    s2, r2 = sparse_topk(wide, 6)
    np.testing.assert_array_equal(s2, scores)
    np.testing.assert_array_equal(r2, rows)


def test_a_model_variant_the_product_cannot_reproduce_uses_bm25s_scoring():
    bm25s = pytest.importorskip("bm25s")
    model = bm25s.BM25(method="bm25l")
    corpus = [f"{t}\n{x}" for t, x in zip(["a"] * 5, TEXTS, strict=True)]
    model.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False),
                show_progress=False)
    index = BM25Index(model=model, n=len(corpus))
    assert not index.exact
    scores, rows = index.search(["Brenmoor University coast"], 3)
    want = _bm25s_scores(index, ["Brenmoor University coast"])[0]
    order = np.lexsort((np.arange(len(corpus)), -want))[:3]
    np.testing.assert_array_equal(rows[0], order)
    np.testing.assert_array_equal(scores[0], want[order])


def test_long_rows_keep_their_top_k_and_its_ties():
    """Rows much longer than k, with many ties at the cut: the answer is the full sort's."""
    rng = np.random.default_rng(11)
    q, n, k = 30, 5000, 5
    dense = np.where(rng.random((q, n)) < 0.3,
                     rng.choice([0.25, 0.5, 1.0, 1.0001, 7.5], size=(q, n)) *
                     rng.choice([1.0, 1.0, 1.0, 1.003], size=(q, n)), 0).astype(np.float32)
    dense[3, :] = 0
    dense[4, :3] = 2.0  # fewer than k entries
    scores, rows = sparse_topk(sp.csr_array(dense), k)
    order = np.lexsort((np.broadcast_to(np.arange(n), dense.shape), -dense), axis=1)[:, :k]
    want = np.take_along_axis(dense, order, axis=1)
    np.testing.assert_array_equal(scores, want)
    np.testing.assert_array_equal(rows, np.where(want > 0, order, -1))


def test_entries_below_the_top_k_buckets_never_reach_the_sort():
    """The prefilter before the sort: a row keeps the score buckets (exponent and three
    mantissa bits) from its best down to the one holding its k-th entry, ties included, and
    rows with fewer than k entries keep everything; the top-k is the full sort's."""
    from gpurag.query.lexical import _top_buckets

    rng = np.random.default_rng(5)
    q, n, k = 12, 8000, 5  # ~19k entries: above SMALL_SORT, so the pass runs
    dense = np.where(rng.random((q, n)) < 0.2, rng.choice([0.1, 0.3, 0.9], (q, n)), 0)
    dense = dense.astype(np.float32)
    dense[0, [7, 9, 11, 13, 15, 17]] = [4.0, 2.0, 2.0, 2.0, 2.0, 2.0]  # a tie across the cut
    dense[1, [5, 6]] = [8.0, 4.5]  # two in high buckets: the rest decides the top-5
    dense[2, :] = 0
    dense[3, :] = 0
    dense[3, [1, 2]] = [1.0, 0.2]  # fewer than k entries
    mat = sp.csr_array(dense)
    kept = _top_buckets(mat, k)
    assert kept.nnz < mat.nnz // 2  # most entries never reach the sort
    assert kept[[0]].nnz == 6 and kept[[3]].nnz == 2
    assert kept[[1]].nnz == 2 + int((dense[1] == 0.9).sum()) - 0  # 8.0, 4.5 and every 0.9
    scores, rows = sparse_topk(mat, k)
    order = np.lexsort((np.broadcast_to(np.arange(n), dense.shape), -dense), axis=1)[:, :k]
    want = np.take_along_axis(dense, order, axis=1)
    np.testing.assert_array_equal(scores, want)
    np.testing.assert_array_equal(rows, np.where(want > 0, order, -1))


def test_a_few_thousand_entries_are_sorted_without_the_bucket_pass():
    """Up to ``SMALL_SORT`` entries the pass costs more than it saves (one question's row):
    the entries go to the sort as they are, with the full sort's top-k."""
    from gpurag.query.lexical import SMALL_SORT, _top_buckets

    rng = np.random.default_rng(3)
    dense = np.where(rng.random((1, 2000)) < 0.4, rng.choice([0.1, 0.3, 0.9, 2.0], (1, 2000)),
                     0).astype(np.float32)
    mat = sp.csr_array(dense)
    assert 4 * 5 < mat.nnz <= SMALL_SORT
    assert _top_buckets(mat, 5) is mat
    scores, rows = sparse_topk(mat, 5)
    order = np.lexsort((np.arange(2000), -dense[0]))[:5]
    np.testing.assert_array_equal(rows[0], order)
    np.testing.assert_array_equal(scores[0], dense[0, order])
