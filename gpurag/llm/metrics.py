"""Answer metrics: exact match and token F1 with SQuAD-style normalization, best over aliases."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles (a/an/the), single spaces."""
    text = str(text).lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(answers: str | Sequence[str]) -> list[str]:
    if isinstance(answers, str):
        return [answers]
    return [str(a) for a in answers if a is not None and str(a) != ""] or [""]


def exact_match(prediction: str, answers: str | Sequence[str]) -> float:
    """1.0 when the normalized prediction equals any normalized gold answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(answers)))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, answers: str | Sequence[str]) -> float:
    """Token-overlap F1 of the normalized texts, the best over the gold answers."""
    pred = normalize_answer(prediction).split()
    return max(_f1(pred, normalize_answer(g).split()) for g in _golds(answers))


def gold_answers(question: dict[str, Any]) -> list[str]:
    """``answer`` plus ``answer_aliases`` of a question record (shared/data format)."""
    golds = [question.get("answer", "")]
    golds += list(question.get("answer_aliases") or [])
    return [str(g) for g in dict.fromkeys(golds) if g is not None and str(g) != ""]


def answer_scores(predictions: Sequence[str],
                  answers: Sequence[str | Sequence[str]]) -> dict[str, float]:
    """Mean exact match and F1 of a batch: ``{"em", "f1", "n"}``."""
    if len(predictions) != len(answers):
        raise ValueError("predictions and answers differ in length")
    n = len(predictions)
    if n == 0:
        return {"em": 0.0, "f1": 0.0, "n": 0}
    em = sum(exact_match(p, a) for p, a in zip(predictions, answers, strict=True))
    f1 = sum(f1_score(p, a) for p, a in zip(predictions, answers, strict=True))
    return {"em": em / n, "f1": f1 / n, "n": n}
