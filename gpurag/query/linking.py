"""Question entity linking by surface form: every entity named in the question, found by exact
match of question n-grams against the alias table (normalized as in alias resolution).

Embedding search finds entities *like* the question; linking finds the entities the question
*names*, each of which then gets its own share of the walk's reset mass, so a comparison of
"X or Y" reaches both X and Y. Longer matches win over the matches they contain
("Brenmoor University" over "Brenmoor").
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpurag.resolve.normalize import FUNCTION_WORDS, alias_keys, normalize_name

_WORD = re.compile(r"[^\W_][\w'’.\-&]*", re.UNICODE)
# Plain spans (keys read off the words, not normalized): none of these characters ...
_NOT_PLAIN = re.compile(r"[^\x00-\x7f]|['`&.]")
_PIECE = re.compile(r"[a-z0-9]+")
# ... nor led by an article, nor ended by a company suffix or a Roman numeral (the words
# normalize_name drops or rewrites; tests/query/test_linking_plain.py checks the lists).
_ARTICLES = frozenset(("the", "a", "an"))
_SUFFIXES = frozenset((
    "co", "ltd", "limited", "inc", "incorporated", "corp", "corporation", "llc", "plc", "gmbh",
    "ag", "sa", "lp", "llp", "pty", "bv", "nv", "srl", "oy", "ab", "kk", "sarl"))
_ROMAN = re.compile(r"[ivxl]+")
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th)")  # "21st" -> "21"
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

    def __len__(self) -> int:
        return len(self._entity_of)

    def link(self, questions: list[str]) -> list[list[LinkedEntity]]:
        """For each question, the entities it names (maximal, non-overlapping matches).
        A retrieval links its batch once and hands the result to every stage that needs it
        (the walk's reset, the title head, the second hop); nothing is remembered here."""
        return self.link_batch(questions).lists()

    def link_batch(self, questions: list[str]) -> LinkedBatch:
        """The entities the questions name (as :meth:`link`), as arrays."""
        return self._link(questions)

    def _link(self, questions: list[str]) -> LinkedBatch:
        spans: list[tuple[int, int, int]] = []  # (question, start, end)
        keys: list[str | None] = []  # the span's key where it is plain, else None
        slow: list[str] = []  # the text of every other span
        for qi, question in enumerate(questions):
            self._spans(qi, question, spans, keys, slow)
        if not spans:
            return LinkedBatch.from_lists([[] for _ in questions])
        computed = iter(normalize_name(slow))
        keys = [next(computed) if key is None else key for key in keys]
        entity_of = self._entity_of
        hits = [(qi, start, end, entity_of[key])
                for (qi, start, end), key in zip(spans, keys, strict=True)
                if key in entity_of]
        # Longest first; drop matches overlapping a longer one already taken.
        hits.sort(key=lambda h: (h[0], -(h[2] - h[1]), h[1]))
        taken: list[list[tuple[int, int]]] = [[] for _ in questions]
        kept: list[tuple[int, int, int, int]] = []
        for qi, start, end, entity in hits:
            if any(start < e and s < end for s, e in taken[qi]):
                continue
            taken[qi].append((start, end))
            kept.append((qi, start, end, int(entity)))
        kept.sort(key=lambda h: (h[0], h[1]))
        arr = np.array(kept, np.int64).reshape(-1, 4)
        return LinkedBatch(arr[:, 0].copy(), arr[:, 3].copy(), arr[:, 1].copy(),
                           arr[:, 2].copy(), len(questions))

    def _spans(self, qi: int, question: str, spans: list, keys: list, slow: list) -> None:
        """Every span of up to ``MAX_NGRAM`` words that starts with a capital or a digit.

        A plain span (ASCII words, no two single letters in a row, no ordinal like "21st", no
        apostrophe, ampersand or dot, not led by an article nor ended by a company suffix or
        a Roman numeral) has the
        key :func:`normalize_name` would give it, its lower-cased words joined by spaces
        (:func:`plain_key`), read off the question's words; the other spans are normalized."""
        tokens = list(_WORD.finditer(question))
        bad = [m.start() for m in _NOT_PLAIN.finditer(question)]
        pieces = [_PIECE.findall(m.group().lower()) for m in tokens]
        for i, m in enumerate(tokens):
            if not _capitalized(m.group()):
                continue  # names start with a capital or a digit
            start = m.start()
            first_bad = bisect_left(bad, start)
            words: list[str] = []
            plain = not pieces[i] or pieces[i][0] not in _ARTICLES
            for j in range(i, min(i + self._max_words, len(tokens))):
                end = tokens[j].end()
                spans.append((qi, start, end))
                plain = (plain and (first_bad == len(bad) or bad[first_bad] >= end)
                         and not any(map(_ORDINAL.fullmatch, pieces[j])))
                if plain:
                    for w in pieces[j]:  # two single letters in a row are initials
                        if len(w) == 1 and w.isalpha() and words and len(words[-1]) == 1 \
                                and words[-1].isalpha():
                            plain = False
                        words.append(w)
                if plain and words[-1] not in _SUFFIXES and not _ROMAN.fullmatch(words[-1]):
                    keys.append(" ".join(words))
                else:
                    keys.append(None)
                    slow.append(question[start:end])


def plain_key(span: str) -> str:
    """The key of a plain span (see :meth:`EntityLinker._spans`): its lower-cased ASCII
    words joined by single spaces (what :func:`normalize_name` makes of it)."""
    return " ".join(_PIECE.findall(span.lower()))


@dataclass(frozen=True)
class LinkedBatch:
    """The entities a batch's questions name, as arrays: ``q`` (question), ``entity``,
    ``start``/``end`` (character span), by question then start; ``n``: questions."""

    q: np.ndarray
    entity: np.ndarray
    start: np.ndarray
    end: np.ndarray
    n: int

    @classmethod
    def from_lists(cls, rows: list[list[LinkedEntity]]) -> LinkedBatch:
        """From :meth:`EntityLinker.link`'s per-question lists."""
        flat = [e for row in rows for e in row]
        return cls(np.repeat(np.arange(len(rows), dtype=np.int64), [len(r) for r in rows]),
                   np.array([e.entity_id for e in flat], np.int64),
                   np.array([e.start for e in flat], np.int64),
                   np.array([e.end for e in flat], np.int64), len(rows))

    def lists(self) -> list[list[LinkedEntity]]:
        """Per question, its :class:`LinkedEntity` list (the shape results carry)."""
        out: list[list[LinkedEntity]] = [[] for _ in range(self.n)]
        for qi, e, s, t in zip(self.q.tolist(), self.entity.tolist(), self.start.tolist(),
                               self.end.tolist(), strict=True):
            out[qi].append(LinkedEntity(e, s, t))
        return out
