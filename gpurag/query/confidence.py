"""An absolute confidence per result: how likely the corpus holds what the question asks about.

Graph scores are relative (the top passage is always 1.0), so a question about something the
corpus never mentions still gets a confident-looking list. The confidence here is a logistic
model over four absolute signals of the question against the whole index, each with a reason:

- ``dense_top``: the best cosine between the question and a passage (how close the corpus
  comes to the question at all);
- ``dense_gap``: that cosine minus the 5th best. A question about something the corpus holds
  has a passage about *it*, standing out from the rest; a question about an absent entity
  finds only passages alike in topic, with a flat head (a score-spread predictor of query
  performance, as in the IR literature);
- ``known``: the share of the question's information (the idf of its words, function words
  aside) carried by words the corpus uses at all. An absent entity's name is mostly words found
  nowhere else; a word the corpus lacks gets the idf of a word in no passage;
- ``bm25_margin``: (best - second best BM25 score) / best. The rare words of a present name
  pick out its passages; when the name is absent, the remaining words match many passages
  about equally (0 when nothing matches, 1 when one passage alone does).

None of them depend on the retrieval mode or the ranking (a dense and a graph query get the
same confidence), none needs the entity linker. The weights were fitted by
``bench/confidence.py`` on the shared multi-hop sets, answerable questions against questions
whose entities were removed from the corpus, and its cross-validated AUROC (out of fold over
questions, and leave one set out) is reported in ``docs/results.md`` and
``bench/results/confidence_2026-12-01_cpu.md``. The model reads one top-5 dense search, one
top-2 BM25 search and the vocabulary; it never changes the ranking.
"""

from __future__ import annotations

import time
from itertools import chain
from typing import Any

import numpy as np

from gpurag.query.lexical import _TOKEN  # bm25s' word pattern

FEATURES = ("dense_top", "dense_gap", "known", "bm25_margin")
# known: words that say nothing of the subject (question words, auxiliaries, pronouns,
# prepositions), beside bm25s' 33 stopwords; a corpus of chat logs may never write "whom"
FUNCTION_WORDS = frozenset((
    "what", "which", "who", "whom", "whose", "where", "when", "why", "how", "whether", "did",
    "do", "does", "done", "doing", "was", "were", "been", "being", "has", "have", "had",
    "having", "can", "could", "would", "should", "may", "might", "must", "shall", "am", "its",
    "his", "her", "hers", "him", "he", "she", "we", "you", "your", "our", "ours", "my", "me",
    "us", "them", "those", "from", "about", "after", "before", "between", "during", "than",
    "also", "any", "all", "some", "each", "other", "another", "one", "ones", "many", "much",
    "more", "most", "very", "out", "up", "down", "over", "under"))
DENSE_DEPTH = 5  # dense_gap: the best cosine minus this one's
# Fitted by bench/confidence.py on hotpotqa_train100 + musique_train100, the run of
# bench/results/confidence_2026-12-01_cpu.json: standardized features -> logit.
MEAN = np.array([0.539181, 0.156777, 0.88813, 0.169755])
SCALE = np.array([0.132491, 0.104277, 0.169458, 0.143583])
WEIGHTS = np.array([0.731583, 0.53318, 1.644717, 0.740955])
BIAS = -0.320207


def known_share(lexical: Any, questions: list[str]) -> np.ndarray:
    """Per question, the idf mass of its distinct words (stopwords and ``FUNCTION_WORDS``
    aside) that the BM25 vocabulary holds, over the idf mass of all of them (1.0 for a
    question with none).
    A word outside the vocabulary weighs as a word in no passage, idf ``log(1 + 2n + 1)``, and
    so does a word the vocabulary keeps in no live passage (a local delete keeps the deleted
    documents' words in it until compact); ``n``: the live passages (those the model covers),
    as a rebuild without the deleted ones gives."""
    matrix = lexical.matrix  # (V, n): a term's nonzero entries are the passages holding it
    live = getattr(lexical, "doc_ids", None)  # the chunk ids the model covers (None: all)
    n = matrix.shape[1] if live is None else len(live)
    stop = FUNCTION_WORDS.union(lexical._bm25s.stopwords.STOPWORDS_EN)
    vocab = lexical.model.vocab_dict
    words = [{w for w in _TOKEN.findall(q.lower()) if w not in stop} for q in questions]
    ids = np.fromiter((vocab.get(w, -1) for w in chain.from_iterable(words)), np.int64)
    owner = np.repeat(np.arange(len(questions)), [len(w) for w in words])
    at = np.maximum(ids, 0)  # each word's passage count, not every term's (a per-call diff)
    df = (matrix.indptr[at + 1] - matrix.indptr[at]).astype(np.float64)
    freq = np.where(ids >= 0, df, 0.0)
    idf = np.log(1.0 + (n - freq + 0.5) / (freq + 0.5))
    total = np.bincount(owner, idf, minlength=len(questions))
    known = np.bincount(owner, np.where(freq > 0, idf, 0.0), minlength=len(questions))
    return np.where(total > 0, known / np.where(total > 0, total, 1.0), 1.0)


def features(index: Any, questions: list[str], qvecs: np.ndarray) -> np.ndarray | None:
    """``(q, len(FEATURES))`` float64, or None for an index without a knowledge graph."""
    retriever = index.retriever
    if retriever is None:
        return None
    from gpurag.vectors import search

    dense, rows = search(index.passage_search, qvecs, DENSE_DEPTH)
    dense = np.where(rows >= 0, dense.astype(np.float64), np.nan)
    top = np.nan_to_num(dense[:, 0], nan=0.0)
    last = np.nan_to_num(dense[np.arange(len(dense)), np.maximum(
        (rows >= 0).sum(axis=1) - 1, 0)], nan=0.0)
    bm25, _ = retriever.lexical.search(questions, 2)
    bm25 = np.maximum(bm25.astype(np.float64), 0.0)
    margin = np.where(bm25[:, 0] > 0, (bm25[:, 0] - bm25[:, 1])
                      / np.where(bm25[:, 0] > 0, bm25[:, 0], 1.0), 0.0)
    return np.stack([top, top - last, known_share(retriever.lexical, questions), margin],
                    axis=1)


def logits(x: np.ndarray, mean=None, scale=None, weights=None, bias=None) -> np.ndarray:
    """The model's logit of each row of features (the stored weights unless given)."""
    mean = MEAN if mean is None else mean
    scale = SCALE if scale is None else scale
    weights = WEIGHTS if weights is None else weights
    bias = BIAS if bias is None else bias
    return ((x - mean) / scale) @ weights + bias


def confidence(x: np.ndarray) -> np.ndarray:
    """Probability (0 to 1) that each question's subject is in the corpus."""
    return 1.0 / (1.0 + np.exp(-logits(x)))


def add_confidence(index: Any, results: list[Any], qvecs: np.ndarray) -> None:
    """Set ``result.confidence`` of each result (left None for an index without a graph)."""
    x = features(index, [r.question for r in results], qvecs)
    if x is None:
        for r in results:
            r.confidence = None
        return
    for r, c in zip(results, confidence(x), strict=True):
        r.confidence = float(c)


def defer_confidence(index: Any, results: list[Any], qvecs: np.ndarray) -> None:
    """Give ``results`` their confidence on its first read, for the whole batch at once
    (:mod:`gpurag.query.deferred`): the same values :func:`add_confidence` sets, at no cost
    to a caller that never reads them. The time it took is added to each result's
    ``timings_ms["confidence"]`` when it runs."""
    from gpurag.query.deferred import Pending

    def run() -> None:
        t0 = time.perf_counter()
        add_confidence(index, results, qvecs)
        ms = (time.perf_counter() - t0) * 1000 / max(len(results), 1)
        for r in results:
            r.timings_ms["confidence"] = ms

    pending = Pending(run)
    for r in results:
        r.confidence = pending


def withhold(results: list[Any], min_confidence: float) -> None:
    """Empty the results whose confidence is below ``min_confidence`` (passages, chains,
    paths), keeping the confidence that says why; results without one are kept."""
    for r in results:
        if r.confidence is not None and r.confidence < min_confidence:
            r.passages, r.chains, r.paths = [], [], []
