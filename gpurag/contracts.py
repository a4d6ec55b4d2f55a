"""Contract checks every extractor, embedder and reranker must pass (like scikit-learn's
``check_estimator``): the same small verbs, deterministic results, documented shapes and
dtypes. The test suite runs them over every registered implementation; a new one can call
them in its own tests. Plain ``assert``s, so pytest shows the failing condition."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from gpurag.extract.base import MENTION_COLUMNS, RELATION_COLUMNS, Extraction


def check_extractor(make: Callable[[], Any], chunks: pd.DataFrame, offset: int = 100) -> None:
    """``make()`` builds the extractor; ``chunks`` (``chunk_id``, ``title``, ``text``, ...) name
    some entities. Checks the name, the tables and their columns, that chunk positions are
    offset batch rows and spans lie in the text, determinism, and an empty batch."""
    ex = make()
    assert isinstance(ex.name, str) and ex.name
    out = ex.extract(chunks, offset=offset)
    assert isinstance(out, Extraction)
    assert set(MENTION_COLUMNS) <= set(out.mentions.columns)
    assert set(RELATION_COLUMNS) <= set(out.relations.columns)
    assert len(out.mentions), "the chunks name entities"
    last = offset + len(chunks) - 1
    m = out.mentions
    assert m["chunk"].between(offset, last).all()
    texts = chunks["text"].to_numpy()
    located = m[m["start"] >= 0]
    for chunk, start, end in zip(located["chunk"], located["start"], located["end"],
                                 strict=True):
        assert 0 <= start < end <= len(texts[chunk - offset])
    assert out.relations["chunk"].between(offset, last).all()
    assert all(isinstance(v, (int, np.integer)) for v in out.stats.values())
    again = make().extract(chunks, offset=offset)
    pd.testing.assert_frame_equal(out.mentions.reset_index(drop=True),
                                  again.mentions.reset_index(drop=True))
    pd.testing.assert_frame_equal(out.relations.reset_index(drop=True),
                                  again.relations.reset_index(drop=True))
    empty = ex.extract(chunks.iloc[:0], offset=0)
    assert len(empty.mentions) == 0 and len(empty.relations) == 0


def check_embedder(emb: Any, texts: list[str]) -> None:
    """Attributes, ``(n, dim)`` float32 unit rows, determinism, batch-size invariance (to float
    noise), an empty batch and ``count_tokens``. ``texts`` are non-empty sentences."""
    from gpurag.embed.base import Embedder

    assert isinstance(emb, Embedder)
    assert isinstance(emb.name, str) and emb.dim > 0 and emb.max_tokens > 0
    batch = [*texts, "", "x"]
    vecs = emb.encode(batch, batch_size=3)
    assert vecs.shape == (len(batch), emb.dim) and vecs.dtype == np.float32
    assert np.isfinite(vecs).all()
    np.testing.assert_allclose(np.linalg.norm(vecs[:len(texts)], axis=1), 1.0, atol=1e-3)
    np.testing.assert_array_equal(emb.encode(batch, batch_size=3), vecs)
    np.testing.assert_allclose(emb.encode(batch, batch_size=64), vecs, atol=1e-3)
    assert emb.encode([], batch_size=4).shape == (0, emb.dim)
    counts = emb.count_tokens(batch)
    assert len(counts) == len(batch) and all(isinstance(c, int) and c >= 0 for c in counts)


def check_reranker(rr: Any, qvecs: np.ndarray, cand: np.ndarray, ppr_scores: np.ndarray,
                   dense: tuple[np.ndarray, np.ndarray]) -> None:
    """``score`` gives finite float32 ``(q, c)`` scores, deterministic, and a question scored
    alone gets its rows of the batch."""
    out = rr.score(qvecs, cand, ppr_scores, dense)
    assert out.shape == cand.shape and out.dtype == np.float32 and np.isfinite(out).all()
    np.testing.assert_array_equal(rr.score(qvecs, cand, ppr_scores, dense), out)
    one = rr.score(qvecs[:1], cand[:1], ppr_scores[:1], (dense[0][:1], dense[1][:1]))
    np.testing.assert_allclose(one, out[:1], atol=1e-5)
