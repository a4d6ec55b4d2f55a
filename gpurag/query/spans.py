"""Candidate name spans of a whole batch of questions, as arrays (one pass, no loop over questions).

A candidate span is a run of up to ``MAX_NGRAM`` words whose first word starts with a capital or
a digit. A *plain* span (ASCII words, no two single letters in a row, no ordinal like "21st", no
apostrophe, backtick, ampersand or dot, not led by an article nor ended by a company suffix or a
Roman numeral) has the key :func:`~gpurag.resolve.normalize.normalize_name` would give it: its
lower-cased ``[a-z0-9]`` pieces joined by spaces. Such keys are never built as strings here: each
piece gets a word id (:class:`WordHasher`) and each span a 64-bit hash of its id sequence, so a
batch's spans are looked up against the alias keys with one ``searchsorted``; the other spans'
texts go through ``normalize_name``.

The words, pieces and spans come from one regex pass each over the batch's questions joined by
newlines (no word crosses a newline), then NumPy over all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_WORD = re.compile(r"[^\W_][\w'’.\-&]*", re.UNICODE)
# Plain spans (keys read off the words, not normalized): none of these characters ...
_NOT_PLAIN = re.compile(r"[^\x00-\x7f]|['`&.]")
_PIECE = re.compile(r"[a-z0-9]+")
# ... no ordinal piece ("21st" -> "21"), nor led by an article, nor ended by a company suffix or
# a Roman numeral (the words normalize_name drops or rewrites; tests/query/test_linking_plain.py
# checks the lists), no two single letters in a row (initials). A piece is a maximal [a-z0-9]
# run of the ASCII-lowered text.
ARTICLES = frozenset(("the", "a", "an"))
SUFFIXES = frozenset((
    "co", "ltd", "limited", "inc", "incorporated", "corp", "corporation", "llc", "plc", "gmbh",
    "ag", "sa", "lp", "llp", "pty", "bv", "nv", "srl", "oy", "ab", "kk", "sarl"))


_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th)")
_ROMAN = re.compile(r"[ivxl]+")
ORDINAL, SINGLE, ARTICLE, ENDS = 1, 2, 4, 8  # what a piece is, as bits


class _Kinds(dict):
    """Piece -> its kind bits, filled as pieces are met (bounded: cleared past a million)."""

    def __missing__(self, piece: str) -> int:
        kind = ((ORDINAL if _ORDINAL.fullmatch(piece) else 0)
                | (SINGLE if len(piece) == 1 and piece.isalpha() else 0)
                | (ARTICLE if piece in ARTICLES else 0)
                | (ENDS if piece in SUFFIXES or _ROMAN.fullmatch(piece) else 0))
        if len(self) > 1_000_000:
            self.clear()
        self[piece] = kind
        return kind


_KINDS = _Kinds()
MAX_NGRAM = 6
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_PLAIN_KEY = re.compile(r"[a-z0-9]+(?: [a-z0-9]+)*")
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class Spans:
    """A batch's candidate spans: ``q`` (question), ``start``/``end`` (character span in the
    question), ``plain`` and, for plain spans, ``lo``/``hi`` (their pieces are
    ``pieces[lo:hi]``), ordered by question, first word, then length."""

    q: np.ndarray
    start: np.ndarray
    end: np.ndarray
    plain: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    pieces: list[str]  # every [a-z0-9] piece of the batch's ASCII-lowered text, in order

    def __len__(self) -> int:
        return len(self.q)

    def key(self, i: int) -> str:
        """The key of plain span ``i``: its pieces joined by spaces."""
        return " ".join(self.pieces[self.lo[i]:self.hi[i]])


def candidate_spans(questions: list[str], max_words: int = MAX_NGRAM) -> Spans:
    """Every candidate span of every question (see the module docstring), as arrays."""
    text = "\n".join(questions)
    qstart = np.cumsum([0] + [len(s) + 1 for s in questions], dtype=np.int64)[:-1]
    words = np.array([m.span() for m in _WORD.finditer(text)], np.int64).reshape(-1, 2)
    ws, we = words[:, 0], words[:, 1]
    n = len(ws)
    capital = np.flatnonzero(np.fromiter(
        (c.isupper() or c.isdigit() for c in map(text.__getitem__, ws.tolist())), bool, n))
    wq = np.searchsorted(qstart, ws, side="right") - 1  # each word's question

    lower = text.translate(_ASCII_LOWER)  # same length as text (str.lower may not be)
    found = [(m.start(), m.group()) for m in _PIECE.finditer(lower)]
    ps = np.array([s for s, _ in found], np.int64)
    pieces = [p for _, p in found]
    # Every piece lies inside one word (a word swallows every letter or digit after its first).
    pw = np.searchsorted(ws, ps, side="right") - 1
    every = np.arange(n)
    wlo = np.searchsorted(pw, every, side="left")  # the word's pieces: wlo..whi
    whi = np.searchsorted(pw, every, side="right")
    has = whi > wlo
    kinds = np.fromiter(map(_KINDS.__getitem__, pieces), np.int8, len(pieces))
    single = (kinds & SINGLE) > 0
    # per piece p: ordinal pieces before p; initials (two single letters) ending at or before p
    ordinals = np.concatenate([[0], np.cumsum((kinds & ORDINAL) > 0)])
    initials = np.concatenate([[0], np.cumsum(single[1:] & single[:-1])])
    led, ended = (kinds & ARTICLE) > 0, (kinds & ENDS) > 0
    at_first, at_last = np.minimum(wlo, len(ps) - 1), np.maximum(whi - 1, 0)
    bad = np.array([m.start() for m in _NOT_PLAIN.finditer(text)], np.int64)

    i = np.repeat(capital, max_words)
    j = (capital[:, None] + np.arange(max_words)).ravel()
    ok = (j < n) & (wq[np.minimum(j, n - 1)] == wq[i])  # within the question
    i, j = i[ok], j[ok]
    start, end = ws[i], we[j]
    lo, hi = wlo[i], whi[j]
    plain = (np.searchsorted(bad, end) == np.searchsorted(bad, start)) & has[i]
    if len(ps):
        plain &= (~led[at_first[i]] & ~ended[at_last[j]] & (ordinals[hi] == ordinals[lo])
                  & (initials[np.maximum(hi - 1, lo)] == initials[lo]))
    q = wq[i]
    return Spans(q, start - qstart[q], end - qstart[q], plain, lo, hi, pieces)


class WordHasher:
    """Word ids of alias-key words and a 64-bit polynomial hash of word-id sequences, so a
    plain span's key is found among the alias keys by one ``searchsorted`` of its hash (the
    few hits are then checked against the key's text)."""

    def __init__(self, keys: list[str], base: int = 0x9E3779B97F4A7C15) -> None:
        """``keys``: the alias keys; those that are not plain (``[a-z0-9]`` words joined by
        single spaces) can match no plain span and are left out. ``base``: odd."""
        self.keys = keys
        rows = [r for r, k in enumerate(keys) if _PLAIN_KEY.fullmatch(k)]
        kept = [keys[r] for r in rows]
        flat = " ".join(kept).split(" ") if kept else []
        self.word_id: dict[str, int] = {}  # 1, 2, ... as first met; 0: no key's word
        ids = np.fromiter((self.word_id.setdefault(w, len(self.word_id) + 1) for w in flat),
                          np.uint64, len(flat))
        lengths = np.array([k.count(" ") + 1 for k in kept], np.int64)
        ends = np.cumsum(lengths)
        for _ in range(8):  # a base under which no two kept keys share a hash
            self._set_base(base)
            hashes = self.hash(ids, ends - lengths, ends)
            order = np.argsort(hashes, kind="stable")
            hashes = hashes[order]
            if not len(hashes) or bool(np.all(hashes[1:] != hashes[:-1])):
                break
            base = (base * 6364136223846793005 + 1442695040888963407) & _MASK | 1
        else:  # pragma: no cover - distinct word sequences colliding under 8 bases
            raise RuntimeError("alias keys: no collision-free word hash found")
        self.sorted_hashes = hashes
        self.sorted_rows = np.array(rows, np.int64)[order]

    def _set_base(self, base: int) -> None:
        self.base = base
        # (base ** t, base ** -t mod 2 ** 64; the base is odd), replaced as one tuple so that
        # service threads hashing concurrently never see a new table beside an old one
        self._tables = (np.ones(1, np.uint64), np.ones(1, np.uint64))

    def _powers(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        tables = self._tables
        if len(tables[0]) < n:
            m = max(n, 2 * len(tables[0]))
            tables = (np.cumprod(np.r_[1, np.full(m - 1, self.base, np.uint64)],
                                 dtype=np.uint64),
                      np.cumprod(np.r_[1, np.full(m - 1, pow(self.base, -1, 1 << 64),
                                                  np.uint64)], dtype=np.uint64))
            self._tables = tables
        return tables

    def word_ids(self, pieces: list[str]) -> np.ndarray:
        """Each piece's word id (1..V), 0 for a word no kept key has."""
        get = self.word_id.get
        return np.fromiter((get(p, 0) for p in pieces), np.uint64, len(pieces))

    def hash(self, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The hash of each run ``ids[lo:hi]`` (non-empty): sum of ``id * base ** (hi-1-t)``
        modulo 2 ** 64, from one prefix sum of ``id * base ** -t``."""
        pw, inv = self._powers(len(ids) + 1)
        with np.errstate(over="ignore"):
            prefix = np.concatenate([np.zeros(1, np.uint64),
                                     np.cumsum(ids * inv[:len(ids)], dtype=np.uint64)])
            return (prefix[hi] - prefix[lo]) * pw[np.maximum(hi - 1, 0)]

    def find(self, pieces: list[str], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """For each run of pieces ``pieces[lo:hi]``, the row (into the ``keys`` given) of the
        key with exactly those words, else -1."""
        out = np.full(len(lo), -1, np.int64)
        if not len(lo) or not len(self.sorted_hashes):
            return out
        h = self.hash(self.word_ids(pieces), lo, hi)
        at = np.minimum(np.searchsorted(self.sorted_hashes, h), len(self.sorted_hashes) - 1)
        cand = np.flatnonzero(self.sorted_hashes[at] == h)
        rows = self.sorted_rows[at[cand]]
        same = [self.keys[r] == " ".join(pieces[a:b]) for r, a, b in zip(
            rows.tolist(), lo[cand].tolist(), hi[cand].tolist(), strict=True)]
        out[cand[same]] = rows[same]
        return out
