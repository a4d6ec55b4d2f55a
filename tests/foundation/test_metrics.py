"""Retrieval metrics on hand-made rankings with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from gpurag.metrics import (
    all_gold_at,
    all_gold_per_question,
    gold_ranks,
    mrr,
    recall_at,
    recall_per_question,
    summarize,
)


def test_gold_ranks_collapse_duplicates_and_mark_missing():
    assert gold_ranks(["a", "b", "a", "c"], ["c", "a", "z"]) == [3, 1, None]


def test_metrics_on_known_ranks():
    ranks = [[1, 3], [2, None], [6, 7, 9]]
    # recall@2: q1 1/2, q2 1/2, q3 0/3
    assert recall_at(ranks, 2) == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    # recall@5: q1 2/2, q2 1/2, q3 0/3
    assert recall_at(ranks, 5) == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    # all gold in the top 8: only q1 (q3 has rank 9, q2 misses one)
    assert all_gold_at(ranks, 8) == pytest.approx(1 / 3)
    assert mrr(ranks) == pytest.approx((1 + 1 / 2 + 1 / 6) / 3)
    row = summarize(ranks)
    assert set(row) == {"recall@2", "recall@5", "all_gold@8", "mrr"}


def test_no_gold_found_gives_zero():
    assert mrr([[None, None]]) == 0.0
    assert recall_at([[None]], 5) == 0.0
    assert all_gold_at([[None, 1]], 8) == 0.0


def test_per_question_metrics_are_the_rows_of_the_means():
    ranks = [[1, 3], [2, None], [6, 7, 9], []]  # the last question has no gold
    assert recall_per_question(ranks, 5).tolist() == [1.0, 0.5, 0.0, 0.0]
    assert all_gold_per_question(ranks, 8).tolist() == [1.0, 0.0, 0.0, 1.0]
    assert recall_at(ranks, 5) == float(np.mean([1.0, 0.5, 0.0, 0.0]))
    assert all_gold_at(ranks, 8) == 0.5
    assert recall_at([], 5) == all_gold_at([], 8) == 0.0


def test_the_old_eval_metrics_path_still_imports():
    """gpurag/eval/metrics.py moved to gpurag/metrics.py; the old path re-exports it."""
    import gpurag.metrics as new
    from gpurag.eval import metrics as old

    for name in ("gold_ranks", "recall_at", "all_gold_at", "mrr", "summarize",
                 "recall_per_question", "all_gold_per_question"):
        assert getattr(old, name) is getattr(new, name)
