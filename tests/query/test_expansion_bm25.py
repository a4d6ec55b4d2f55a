"""The second hop's expanded BM25 searches read each question's own BM25 row once
(gpurag/query/expansion_bm25.py): the same scores and rows as the product over every
expansion's tokens, bit for bit (issue 26)."""

from __future__ import annotations

import numpy as np

from gpurag.query.expansion_bm25 import expansion_topk
from gpurag.query.second_hop import EXPANSION_HITS


def test_expansions_rank_as_the_product_over_their_tokens(graph_index, questions):
    lexical = graph_index.retriever.lexical
    assert lexical.exact
    names = graph_index.retriever.entity_names
    rng = np.random.default_rng(0)
    qs = [*questions, "", "zzzz qqqq", questions[0] + " " + questions[0]]
    # names as the second hop picks them, plus repeats, a name the question holds, no tokens
    picked = [str(x) for x in rng.choice(names, 60)]
    picked += [qs[0].split()[2], "the the", "", "Paris Paris France", picked[0] + " " + picked[1]]
    tokens, name_tokens = lexical.tokens(qs), lexical.tokens(picked)
    owner = rng.integers(0, len(qs), 400)
    at = rng.integers(0, len(picked), 400)
    owner[-len(picked):] = rng.integers(0, len(qs), len(picked))
    at[-len(picked):] = np.arange(len(picked))
    for k in (EXPANSION_HITS, 1, 40):
        want = lexical.search_tokens(tokens.concat(owner, name_tokens, at), k)
        got = expansion_topk(lexical, tokens, owner, name_tokens, at, k)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0].view(np.int32), want[0].view(np.int32))
    empty = expansion_topk(lexical, tokens, owner[:0], name_tokens, at[:0], EXPANSION_HITS)
    assert empty[0].shape == empty[1].shape == (0, EXPANSION_HITS)


def test_a_batchs_bm25_rows_are_computed_once(graph_index, questions, monkeypatch):
    """The seed search's BM25 rows of the questions are kept on their tokens; the expansions
    read those (one sparse product per batch of questions, not two)."""
    import scipy.sparse as sp

    lexical = graph_index.retriever.lexical
    tokens = lexical.tokens(questions[:5])
    first = lexical.scores(tokens)
    assert lexical.scores(tokens) is first
    other = lexical.tokens(questions[:5])
    np.testing.assert_array_equal(lexical.scores(other).toarray(), first.toarray())
    products = []
    real = sp.csr_array.__matmul__
    monkeypatch.setattr(sp.csr_array, "__matmul__",
                        lambda a, b: products.append(a.shape) or real(a, b))
    lexical.search_tokens(tokens, 20)
    names = lexical.tokens(["Paris", "France"])
    expansion_topk(lexical, tokens, np.array([0, 1, 1]), names, np.array([0, 1, 0]),
                   EXPANSION_HITS)
    assert products == []
    lexical.scores(lexical.tokens(questions[:2]))  # new tokens: scored (the patch sees it)
    assert products == [(2, lexical.matrix.shape[0])]


def test_cached_bm25_rows_are_sorted_when_made_and_not_changed_by_the_expansions(
        graph_index, questions):
    """The rows kept on the tokens (shared with the seed search) come sorted by passage from
    ``scores``; the expansions only read them (no in-place sort of a cached array)."""
    lexical = graph_index.retriever.lexical
    tokens = lexical.tokens(questions[:6])
    rows = lexical.scores(tokens)
    assert rows.has_sorted_indices
    assert all((np.diff(rows.indices[a:b]) > 0).all()
               for a, b in zip(rows.indptr[:-1], rows.indptr[1:], strict=True))
    before = rows.indices.copy(), rows.data.copy()
    names = lexical.tokens([str(x) for x in graph_index.retriever.entity_names[:8]])
    expansion_topk(lexical, tokens, np.arange(6) % 6, names, np.arange(6), EXPANSION_HITS)
    assert lexical.scores(tokens) is rows
    np.testing.assert_array_equal(rows.indices, before[0])
    np.testing.assert_array_equal(rows.data, before[1])


def test_a_narrower_top_k_is_the_prefix_of_the_seed_searchs(graph_index, questions,
                                                            monkeypatch):
    """The expansions' question top-k is cut from the seed search's wider one on the same rows
    (the order is total: score, then the lower row), not ranked again; ties included."""
    import scipy.sparse as sp

    import gpurag.query.lexical as lex

    lexical = graph_index.retriever.lexical
    qs = [*questions, "", "zzzz qqqq", "the of and"]
    real = lex.sparse_topk
    calls: list[int] = []
    for k in (1, EXPANSION_HITS, 7, 40):
        tokens = lexical.tokens(qs)
        wide = lexical.search_tokens(tokens, 40)
        monkeypatch.setattr(lex, "sparse_topk", lambda m, kk: calls.append(kk) or real(m, kk))
        got = lexical.top(tokens, k)
        monkeypatch.setattr(lex, "sparse_topk", real)
        assert calls == []  # sliced, not ranked again
        want = real(lexical.scores(lexical.tokens(qs)), k)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0].view(np.int32), want[0].view(np.int32))
        np.testing.assert_array_equal(got[1], wide[1][:, :k])
        wide[0][:] = -1  # a caller's changes to its result do not reach the kept copy
        np.testing.assert_array_equal(lexical.top(tokens, k)[0], want[0])
    # a tie-heavy row: every passage the same score; ties by the lower row at every width
    n = lexical.n
    tied = sp.csr_array((np.full(n, 0.5, np.float32), np.arange(n), np.array([0, n])),
                        shape=(1, n))
    for k in (1, 3, 9):
        np.testing.assert_array_equal(real(tied, 9)[1][:, :k], real(tied, k)[1])
    # without a wider search the rows are ranked as before
    fresh = lexical.tokens(questions[:3])
    np.testing.assert_array_equal(lexical.top(fresh, 5)[1],
                                  real(lexical.scores(fresh), 5)[1])
