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

from gpurag.query.spans import MAX_NGRAM, WordHasher, candidate_spans
from gpurag.resolve.normalize import FUNCTION_WORDS, alias_keys, normalize_name

_PIECE = re.compile(r"[a-z0-9]+")
_DISAMBIGUATION = r"\s*\([^()]*\)\s*$"


@dataclass(frozen=True)
class LinkedEntity:
    """An entity named in a question, with the question's character span of the name."""

    entity_id: int
    start: int
    end: int


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
        self.keys: list[str] = frame["key"].tolist()  # unique: one entity each
        self.entities = frame["entity"].to_numpy(np.int64)
        self._row_of = {key: row for row, key in enumerate(self.keys)}
        self._words = WordHasher(self.keys)
        self._max_words = MAX_NGRAM

    def __len__(self) -> int:
        return len(self.keys)

    def link(self, questions: list[str]) -> list[list[LinkedEntity]]:
        """For each question, the entities it names (maximal, non-overlapping matches).
        A retrieval links its batch once and hands the result to every stage that needs it
        (the walk's reset, the title head, the second hop); nothing is remembered here."""
        return self.link_batch(questions).lists()

    def link_batch(self, questions: list[str]) -> LinkedBatch:
        """The entities the questions name (as :meth:`link`), as arrays."""
        return self._link(questions)

    def _link(self, questions: list[str]) -> LinkedBatch:
        """One pass over the batch: its candidate spans (:func:`candidate_spans`), the plain
        ones found by their words' hash, the others by their normalized text; then per
        question the longest matches that overlap no longer one."""
        spans = candidate_spans(questions, self._max_words)
        row = np.full(len(spans), -1, np.int64)
        plain = np.flatnonzero(spans.plain)
        if len(plain):
            row[plain] = self._words.find(spans.pieces, spans.lo[plain], spans.hi[plain])
        slow = np.flatnonzero(~spans.plain)
        if len(slow):  # normalize_name is per name anyway: so is the probe
            get = self._row_of.get
            row[slow] = [get(key, -1) for key in normalize_name([
                questions[q][a:b] for q, a, b in zip(spans.q[slow].tolist(),
                                                     spans.start[slow].tolist(),
                                                     spans.end[slow].tolist(), strict=True)])]
        hit = np.flatnonzero(row >= 0)
        if not len(hit):
            return LinkedBatch(*(np.zeros(0, np.int64),) * 4, len(questions))
        q, start, end = spans.q[hit], spans.start[hit], spans.end[hit]
        keep = longest_first(q, start, end)
        q, start, end = q[keep], start[keep], end[keep]
        entity = self.entities[row[hit[keep]]]
        order = np.lexsort((start, q))
        return LinkedBatch(q[order], entity[order], start[order], end[order], len(questions))


def longest_first(q: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Indices of the spans kept when, per question, spans are taken longest first (then
    leftmost) unless they overlap one already taken: rounds over all questions at once, each
    deciding every span whose overlapping predecessors are all decided."""
    order = np.lexsort((start, start - end, q))
    q, s, e = q[order], start[order], end[order]
    n = len(q)
    if n < 2 or bool(np.all(q[1:] != q[:-1])):  # no question with two matches
        return order
    lo = np.searchsorted(q, q, side="left")  # first span of the question, in this order
    before = np.arange(n) - lo
    b = np.repeat(np.arange(n), before)  # pairs (a, b): a ahead of b, same question
    a = lo[b] + np.arange(len(b)) - np.repeat(np.cumsum(before) - before, before)
    over = (s[a] < e[b]) & (s[b] < e[a])
    a, b = a[over], b[over]
    if not len(a):
        return order
    state = np.zeros(n, np.int8)  # 0 undecided, 1 taken, 2 dropped
    while True:
        open_ = state == 0
        if not open_.any():
            break
        waits = np.zeros(n, bool)
        waits[b[state[a] == 0]] = True
        blocked = np.zeros(n, bool)
        blocked[b[state[a] == 1]] = True
        state[open_ & blocked] = 2
        state[open_ & ~blocked & ~waits] = 1
    return order[state == 1]


def plain_key(span: str) -> str:
    """The key of a plain span (see :mod:`gpurag.query.spans`): its lower-cased ASCII
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
