"""BM25 baseline over an index's chunks (bm25s, built in memory)."""

from __future__ import annotations

import numpy as np
import pandas as pd


class BM25Retriever:
    """Lexical retrieval with bm25s over chunk title + text."""

    def __init__(self, chunks: pd.DataFrame) -> None:
        import bm25s

        self._bm25s = bm25s
        corpus = (chunks["title"].fillna("") + "\n" + chunks["text"]).tolist()
        tokens = bm25s.tokenize(corpus, stopwords="en", show_progress=False)
        self.model = bm25s.BM25()
        self.model.index(tokens, show_progress=False)
        self.n = len(corpus)

    def search(self, questions: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, chunk rows) per question."""
        k = min(k, self.n)
        tokens = self._bm25s.tokenize(questions, stopwords="en", show_progress=False)
        rows, scores = self.model.retrieve(tokens, k=k, show_progress=False)
        return np.asarray(scores, dtype=np.float32), np.asarray(rows, dtype=np.int64)
