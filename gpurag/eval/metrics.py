"""The retrieval metrics, moved to :mod:`gpurag.metrics` (every layer scores with them); kept
here so ``from gpurag.eval.metrics import ...`` still works."""

from __future__ import annotations

from gpurag.metrics import (
    all_gold_at,
    all_gold_per_question,
    gold_ranks,
    mrr,
    recall_at,
    recall_per_question,
    summarize,
)

__all__ = ["all_gold_at", "all_gold_per_question", "gold_ranks", "mrr", "recall_at",
           "recall_per_question", "summarize"]
