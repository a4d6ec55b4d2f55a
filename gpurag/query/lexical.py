"""Lexical passage retrieval: BM25 (bm25s) over chunk title + text, built in memory on first use.

Graph retrieval uses it as a second passage seed source beside dense search and, fused with the
dense ranking, for the head of the list: on entity-heavy questions exact name matches are what
dense MiniLM embeddings blur.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd


def _bm25s():
    import bm25s

    # bm25s sets its own logger to DEBUG; its progress lines are not ours to print.
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


class BM25Index:
    """BM25 over an index's chunks; ``search`` returns top-``k`` (scores, chunk rows).

    Built from the chunks in memory, or loaded (memory-mapped) from the copy an index build
    saved (:meth:`save`, :meth:`load`): at 148k passages building takes 11 s on 2 cores,
    loading well under one."""

    def __init__(self, chunks: pd.DataFrame | None = None, *, model=None, n: int = 0) -> None:
        self._bm25s = _bm25s()
        if model is not None:
            self.model, self.n = model, n
            return
        if chunks is None:
            raise ValueError("BM25Index needs chunks or a loaded model")
        corpus = (chunks["title"].fillna("").astype(str) + "\n"
                  + chunks["text"].astype(str)).tolist()
        tokens = self._bm25s.tokenize(corpus, stopwords="en", show_progress=False)
        self.model = self._bm25s.BM25()
        self.model.index(tokens, show_progress=False)
        self.n = len(corpus)

    def save(self, folder: str | Path) -> None:
        """Write the model's arrays and vocabulary into ``folder``."""
        self.model.save(str(folder), show_progress=False)

    @classmethod
    def load(cls, folder: str | Path, n: int) -> BM25Index:
        """The model :meth:`save` wrote for ``n`` chunks, memory-mapped."""
        model = _bm25s().BM25.load(str(folder), mmap=True, show_progress=False)
        _check_model(model, n, folder)
        return cls(model=model, n=n)

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
