"""Evaluation datasets: a folder with ``corpus.jsonl`` and ``questions.jsonl``."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from gpurag.errors import InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Question:
    """One evaluation question with its supporting passages."""

    id: str
    question: str
    answer: str
    answer_aliases: tuple[str, ...]
    gold_ids: tuple[str, ...]
    type: str
    hops: int


@dataclass
class Dataset:
    """A corpus file and the questions over it."""

    name: str
    root: Path
    corpus: Path
    questions: list[Question]
    skipped: dict[str, int] = field(default_factory=dict)
    triples: Path | None = None


def load_dataset(root: str | Path) -> Dataset:
    """Read the questions of a dataset folder; questions without gold ids are counted apart."""
    root = Path(root)
    corpus, qfile = root / "corpus.jsonl", root / "questions.jsonl"
    for path in (corpus, qfile):
        if not path.is_file():
            raise InputError(f"dataset {root}: {path.name} is missing")
    questions: list[Question] = []
    skipped = {"no gold_ids": 0, "bad line": 0}
    with open(qfile, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
                q = Question(
                    id=str(rec.get("id", lineno)), question=str(rec["question"]),
                    answer=str(rec.get("answer", "")),
                    answer_aliases=tuple(str(a) for a in rec.get("answer_aliases") or []),
                    gold_ids=tuple(dict.fromkeys(str(g) for g in rec.get("gold_ids") or [])),
                    type=str(rec.get("type", "")), hops=int(rec.get("hops") or 0),
                )
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError,
                    ValueError) as exc:
                log.warning("%s:%d: skipped question (%s)", qfile, lineno, exc)
                skipped["bad line"] += 1
                continue
            if not q.gold_ids:
                skipped["no gold_ids"] += 1
                continue
            questions.append(q)
    triples = root / "triples.jsonl"
    return Dataset(root.name, root, corpus, questions, skipped,
                   triples if triples.is_file() else None)
