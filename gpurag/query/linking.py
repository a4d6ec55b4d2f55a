"""Question entity linking by surface form: every entity named in the question, found by exact
match of question n-grams against the alias table (normalized as in alias resolution).

Embedding search finds entities *like* the question; linking finds the entities the question
*names*, each of which then gets its own share of the walk's reset mass, so a comparison of
"X or Y" reaches both X and Y. Longer matches win over the matches they contain
("Brenmoor University" over "Brenmoor").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpurag.resolve.normalize import FUNCTION_WORDS, alias_keys, normalize_name

_WORD = re.compile(r"[^\W_][\w'’.\-&]*", re.UNICODE)
MAX_NGRAM = 6
_DISAMBIGUATION = r"\s*\([^()]*\)\s*$"


@dataclass(frozen=True)
class LinkedEntity:
    """An entity named in a question, with the question's character span of the name."""

    entity_id: int
    start: int
    end: int


def _capitalized(token: str) -> bool:
    return token[:1].isupper() or token[:1].isdigit()


class EntityLinker:
    """Exact surface matching of question n-grams against an index's alias table."""

    def __init__(self, aliases: pd.DataFrame, min_key_chars: int = 3) -> None:
        """``aliases``: ``name`` and ``entity_id`` columns, and ``key`` (each name's
        :func:`normalize_name`) where the index stores it."""
        names = aliases["name"].astype(str)
        ids = aliases["entity_id"].to_numpy(np.int64)
        keys = alias_keys(aliases)
        # Titles such as "Lover Come Back (1961 film)" are also named without their
        # disambiguation; an exact alias wins over such a short form (sorted first below).
        short = names.str.replace(_DISAMBIGUATION, "", regex=True)
        has_short = (short != names).to_numpy()
        frame = pd.DataFrame({
            "key": keys + normalize_name(short[has_short].tolist()),
            "entity": np.concatenate([ids, ids[has_short]]),
            "exact": np.r_[np.ones(len(ids), bool), np.zeros(int(has_short.sum()), bool)]})
        frame = frame[(frame["key"].str.len() >= min_key_chars)
                      & ~frame["key"].isin(FUNCTION_WORDS)]
        # A key shared by several entities is ambiguous: keep the entity with most aliases.
        frame = (frame.groupby(["key", "entity"], sort=False)
                 .agg(exact=("exact", "max"), n=("exact", "size")).reset_index())
        frame = frame.sort_values(["key", "exact", "n"], ascending=[True, False, False],
                                  kind="stable")
        frame = frame.drop_duplicates("key")
        self._entity_of: dict[str, int] = dict(zip(frame["key"], frame["entity"].tolist(),
                                                    strict=True))
        self._max_words = MAX_NGRAM
        # The last batch linked: one retrieval links its questions for the walk, the title
        # head and the second hop (replaced whole, so concurrent callers read a consistent pair).
        self._last: tuple[tuple[str, ...], list[list[LinkedEntity]]] | None = None

    def __len__(self) -> int:
        return len(self._entity_of)

    def link(self, questions: list[str]) -> list[list[LinkedEntity]]:
        """For each question, the entities it names (maximal, non-overlapping matches)."""
        key = tuple(questions)
        last = self._last
        if last is not None and last[0] == key:
            return [list(row) for row in last[1]]
        found = self._link(questions)
        self._last = (key, [list(row) for row in found])
        return found

    def _link(self, questions: list[str]) -> list[list[LinkedEntity]]:
        spans: list[tuple[int, int, int, str]] = []  # (question, start, end, text)
        for qi, question in enumerate(questions):
            tokens = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(question)]
            for i, (start, _, first) in enumerate(tokens):
                if not _capitalized(first):
                    continue  # names start with a capital or a digit
                for j in range(i, min(i + self._max_words, len(tokens))):
                    end = tokens[j][1]
                    spans.append((qi, start, end, question[start:end]))
        if not spans:
            return [[] for _ in questions]
        keys = normalize_name([s[3] for s in spans])
        found: list[list[LinkedEntity]] = [[] for _ in questions]
        hits = [(qi, start, end, self._entity_of[key])
                for (qi, start, end, _), key in zip(spans, keys, strict=True)
                if key in self._entity_of]
        # Longest first; drop matches overlapping a longer one already taken.
        hits.sort(key=lambda h: (h[0], -(h[2] - h[1]), h[1]))
        taken: list[list[tuple[int, int]]] = [[] for _ in questions]
        for qi, start, end, entity in hits:
            if any(start < e and s < end for s, e in taken[qi]):
                continue
            taken[qi].append((start, end))
            found[qi].append(LinkedEntity(int(entity), start, end))
        for row in found:
            row.sort(key=lambda e: e.start)
        return found
