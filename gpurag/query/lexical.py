"""Lexical passage retrieval: BM25 (bm25s) over chunk title + text, built in memory on first use.

Graph retrieval uses it as a second passage seed source beside dense search and, fused with the
dense ranking, for the head of the list: on entity-heavy questions exact name matches are what
dense MiniLM embeddings blur.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd


class BM25Index:
    """BM25 over an index's chunks; ``search`` returns top-``k`` (scores, chunk rows)."""

    def __init__(self, chunks: pd.DataFrame) -> None:
        import bm25s

        # bm25s sets its own logger to DEBUG; its progress lines are not ours to print.
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self._bm25s = bm25s
        corpus = (chunks["title"].fillna("").astype(str) + "\n"
                  + chunks["text"].astype(str)).tolist()
        tokens = bm25s.tokenize(corpus, stopwords="en", show_progress=False)
        self.model = bm25s.BM25()
        self.model.index(tokens, show_progress=False)
        self.n = len(corpus)

    def search(self, questions: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, chunk rows) per question; rows of -1 pad questions with fewer
        matching passages (score 0)."""
        k = min(k, self.n)
        if k <= 0 or not questions:
            return (np.zeros((len(questions), max(k, 0)), np.float32),
                    np.full((len(questions), max(k, 0)), -1, np.int64))
        tokens = self._bm25s.tokenize(questions, stopwords="en", show_progress=False)
        rows, scores = self.model.retrieve(tokens, k=k, show_progress=False)
        rows = np.asarray(rows, dtype=np.int64)
        scores = np.asarray(scores, dtype=np.float32)
        return scores, np.where(scores > 0, rows, -1)
