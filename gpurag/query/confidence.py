"""An absolute confidence per result: how likely the corpus holds what the question asks about.

Graph scores are relative (the top passage is always 1.0), so a question about something the
corpus never mentions still gets a confident-looking list. The confidence here is a logistic
model over absolute signals of the question against the whole index:

- ``dense_top``: the best cosine between the question and a passage;
- ``entity_top``: the best cosine between the question and an entity name;
- ``bm25_top``: the best BM25 score of a passage, per question term (``log1p``);
- ``named``: the share of the question's capitalized words (after the first) that fall inside
  a name the index knows (1 when the question has none);
- ``linked``: whether the question names any entity of the index at all.

Its weights were fitted by ``bench/confidence.py`` on the shared multi-hop sets, with answerable
questions against questions whose entities were removed from the corpus (their passages and
every passage naming them), and are reported in ``docs/results.md``. The model reads only index
structures and one extra top-1 search of each kind; it never changes the ranking.
"""

from __future__ import annotations

import re
import time
from typing import Any

import numpy as np

FEATURES = ("dense_top", "entity_top", "bm25_top", "named", "linked")
# Fitted by bench/confidence.py on hotpotqa_train100 + musique_train100 (docs/results.md):
# standardized features -> logit.
MEAN = np.array([0.539181, 0.604802, 0.487328, 0.651731, 0.802083])
SCALE = np.array([0.132491, 0.108596, 0.158307, 0.374979, 0.398429])
WEIGHTS = np.array([1.062435, -0.200186, 0.517728, 1.394043, 0.15548])
BIAS = -0.250152

_WORD = re.compile(r"[^\W_][\w'’.\-&]*", re.UNICODE)
_NOT_NAMES = frozenset({"what", "which", "who", "whom", "whose", "where", "when", "why",
                        "how", "is", "are", "was", "were", "did", "do", "does", "the", "a",
                        "an", "in", "of", "and", "or", "i", "name", "between"})


def named_share(question: str, spans: list[tuple[int, int]]) -> float:
    """Share of the capitalized words of ``question`` (after its first, question words and
    articles aside) inside one of the linked ``spans``; 1.0 when there is none."""
    words = [(m.start(), m.group()) for m in _WORD.finditer(question)][1:]
    caps = [s for s, w in words if (w[:1].isupper() or w[:1].isdigit())
            and w.lower() not in _NOT_NAMES]
    if not caps:
        return 1.0
    inside = sum(any(a <= s < b for a, b in spans) for s in caps)
    return inside / len(caps)


def features(index: Any, questions: list[str], qvecs: np.ndarray,
             linked: list | None = None) -> np.ndarray | None:
    """``(q, len(FEATURES))`` float64, or None for an index without a knowledge graph.
    ``linked``: the entities each question names, where the retrieval linked them already."""
    retriever = index.retriever
    if retriever is None:
        return None
    from gpurag.vectors import search

    dense, _ = search(index.passage_search, qvecs, 1)
    if retriever.n_ent:
        ent, _ = retriever._search("entity", qvecs, 1)
    else:
        ent = np.zeros((len(questions), 1), np.float32)
    bm25, _ = retriever.lexical.search(questions, 1)
    terms = np.array([max(len(_WORD.findall(q)), 1) for q in questions], np.float64)
    if linked is None:
        linked = retriever.linker.link(questions)
    named = np.array([named_share(q, [(e.start, e.end) for e in row])
                      for q, row in zip(questions, linked, strict=True)])
    return np.stack([
        np.nan_to_num(dense[:, 0].astype(np.float64), nan=0.0),
        np.nan_to_num(ent[:, 0].astype(np.float64), nan=0.0),
        np.log1p(np.maximum(bm25[:, 0].astype(np.float64), 0.0) / terms),
        named,
        np.array([float(bool(row)) for row in linked]),
    ], axis=1)


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


def add_confidence(index: Any, results: list[Any], qvecs: np.ndarray,
                   linked: list | None = None) -> None:
    """Set ``result.confidence`` of each result (left None for an index without a graph);
    ``linked`` as in :func:`features`."""
    x = features(index, [r.question for r in results], qvecs, linked)
    if x is None:
        return
    for r, c in zip(results, confidence(x), strict=True):
        r.confidence = float(c)


def defer_confidence(index: Any, results: list[Any], qvecs: np.ndarray,
                     linked: list | None = None) -> None:
    """Give ``results`` their confidence on its first read, for the whole batch at once
    (:mod:`gpurag.query.deferred`): the same values :func:`add_confidence` sets, at no cost
    to a caller that never reads them. The time it took is added to each result's
    ``timings_ms["confidence"]`` when it runs."""
    from gpurag.query.deferred import Pending

    def run() -> None:
        t0 = time.perf_counter()
        add_confidence(index, results, qvecs, linked)
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
