"""Dense retrieval: question embedding -> FAISS top-k over passage embeddings."""

from __future__ import annotations

import numpy as np


def dense_scores(passage_index, question_vecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` passage (scores, row ids) for each question vector."""
    from gpurag.vectors import search

    return search(passage_index, question_vecs, k)
