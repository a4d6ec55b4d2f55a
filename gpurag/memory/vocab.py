"""Entity vocabulary grown from the traces, and tagging by dictionary match (no model call).

New names come from the fast extractor's regex (:class:`gpurag.extract.fast.FastExtractor`);
each name's key is its :func:`gpurag.resolve.normalize.normalize_name` form with CamelCase
split first and spaces dropped, so "Li Hua", "LiHua" and "li hua" are one entry. Tagging a
text looks up every run of 1..``MAX_TOKENS`` word tokens that starts with a capitalized token
in the key dictionary. A one-word entry that mostly occurs in lower case ("Hey", "Thanks") is a
common word, not an entity; a one-word entry that is the first or last word of exactly one
longer entry ("Wolfgang" -> "Wolfgang Schulz") is an alias of it (as the build's rules do).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from itertools import compress, filterfalse

import numpy as np
import pandas as pd

from gpurag.extract.fast import (
    _LOWER_WORD,  # a lower-case ASCII word of 2+ letters, not inside a longer word
    _SEP,  # joins a batch's texts: no name, word or token crosses it
    ENTITY_PATTERN,
    SINGLE_WORD_DROP,
)
from gpurag.extract.fast import _U as _CAPITAL  # the pattern's own class of capitals
from gpurag.resolve.normalize import normalize_name

MAX_TOKENS = 6
# a lower-case letter before a capital (the pattern opens with a class: the regex engine skips
# to those letters; the same splits as a space put at each (?<=[a-z])(?=[A-Z]))
_CAMEL = re.compile(r"[a-z](?=[A-Z])")
_TOKEN = re.compile(r"[^\W_]+")
_TOKEN_OR_SEP = re.compile(rf"[^\W_]+|{_SEP}")
_GROUPS_KEPT = frozenset(("NAME", "WORK", "DATE"))
MAX_NAME_CHARS = 80
# every position a match of ENTITY_PATTERN can start at, or the curly opening quote just
# before it (a superset): each of its alternatives opens with an upper/title-case letter
# (names, month names, quoted titles), or with a digit at a word boundary (dates, years: those
# alternatives open with \b), or follows a curly opening quote; the pattern is tried only
# there (not at the digits inside "Ann12"). One character class (the word boundary before a
# digit tested after it), so the regex engine skips to those characters; a curly quote stands
# for the position after it, tried even where the last match ends at it (see find_names)
_CANDIDATE = re.compile(rf"[{_CAPITAL[1:-1]}\d“](?<!\w\d)")
CACHE_MAX = 1_000_000  # entries of a tokenization cache before it is emptied
# chat openers the name regex takes for the start of a name ("Hey Li Hua", "Thanks Wolfgang")
INTERJECTIONS = frozenset((
    "hey", "hi", "hello", "thanks", "thank", "sure", "yes", "yeah", "yep", "oh", "wow", "ok",
    "okay", "dear", "good", "great", "well", "haha", "congrats", "congratulations", "sorry",
    "please", "hmm", "absolutely", "awesome", "cool", "nice", "lol", "omg",
))


def find_names(text: str) -> list[str]:
    """The names, works and dates of ``ENTITY_PATTERN`` in ``text`` (at most
    ``MAX_NAME_CHARS`` long): what ``finditer`` finds, the pattern tried only at the positions
    where a match can start (``_CANDIDATE``), so the scan of the others is one simple pass."""
    out = []
    end = 0
    match = ENTITY_PATTERN.match
    for c in _CANDIDATE.finditer(text):
        p = c.start()
        if p < end:
            # inside the last match: only a curly quote that ends it leaves a spot to try
            if p + 1 < end or text[p] != "“":
                continue
            p += 1
            m = match(text, p)
        else:
            m = match(text, p)
            # (at a curly quote the pattern matches only after another one; else the spot
            # after it is the candidate)
            if m is None and text[p] == "“":
                p += 1
                m = match(text, p)
        if m is not None:
            end = m.end()
            if m.lastgroup in _GROUPS_KEPT and end - p <= MAX_NAME_CHARS:
                out.append(m.group())
    return out


def split_camel(text: str) -> str:
    """``"WolfgangSchulz"`` -> ``"Wolfgang Schulz"``."""
    return _CAMEL.sub(r"\g<0> ", text)


def name_tokens(names: Sequence[str]) -> list[list[str]]:
    """Normalized word tokens of each surface name (CamelCase split)."""
    return [k.split() for k in normalize_name([split_camel(n) for n in names])]


class Vocabulary:
    """Surface keys -> entity ids, with counts used to drop common words and find aliases.

    Names come from the fast extractor's ``ENTITY_PATTERN`` (its regex pass, without the
    pandas assembly that costs ~1 ms a call); its one-word drop list applies too.
    """

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.surfaces: list[str] = []
        self.n_tokens: list[int] = []
        self.first_last: list[tuple[str, str]] = []
        self.index: dict[str, int] = {}
        self.cap_count = Counter()  # key -> capitalized occurrences seen by the extractor
        self.lower_words = Counter()  # lower-case words seen in traces
        self._tok_cache: dict[str, str] = {}  # token -> its normalized form, spaces dropped
        self._tok_start: dict[str, str] = {}  # cached tokens that may start an entry -> key
        self._name_cache: dict[str, list[str]] = {}  # surface -> its normalized tokens
        self._name_key: dict[str, str] = {}  # surface -> its key (those tokens joined)
        self._canon: np.ndarray | None = None
        self._canon_list: tuple[np.ndarray, list[int]] | None = None
        self._prefixes: set[str] = {""}  # prefixes of keys[:_prefixes_n] (see tag)
        self._prefixes_n = 0
        self._prefixes_of: list[str] | None = None
        self._parts_of: list[str] | None = None  # entry parts of keys[:_parts_n] (canonical)
        self._parts_n = 0
        self._single: list[int] = []
        self._opener: list[bool] = []
        self._ends: dict[str, list[int]] = {}

    def __len__(self) -> int:
        return len(self.keys)

    # -- growing ------------------------------------------------------------------------------
    def learn(self, texts: Sequence[str]) -> None:
        """Add the names the fast extractor's pattern finds in ``texts`` to the vocabulary
        (one pass over the batch: the texts joined, the pattern tried where a match can
        start, :func:`find_names`)."""
        if not texts:
            return
        joined = _SEP.join(texts)
        names = list(filterfalse(SINGLE_WORD_DROP.__contains__, find_names(joined)))
        if names:
            cache, key_of = self._name_cache, self._name_key
            if len(cache) > CACHE_MAX:
                cache.clear()
                key_of.clear()
            fresh = list(dict.fromkeys(filterfalse(cache.__contains__, names)))
            if fresh:
                cache.update(zip(fresh, name_tokens(fresh), strict=True))
                key_of.update((n, "".join(cache[n])) for n in fresh)
            keys = list(map(key_of.__getitem__, names))
            self.cap_count.update(filter(None, keys))
            index = self.index
            # the batch's new keys in order of first occurrence, each with its first surface
            new = [k for k in dict.fromkeys(filter(None, keys)) if k not in index]
            if new:
                first = dict(zip(reversed(keys), reversed(names), strict=True))
                for key in new:
                    name = first[key]
                    toks = cache[name]
                    index[key] = len(self.keys)
                    self.keys.append(key)
                    self.surfaces.append(name)
                    self.n_tokens.append(len(toks))
                    self.first_last.append((toks[0], toks[-1]))
                self._canon = None
        self.lower_words.update(_LOWER_WORD.findall(joined))

    # -- matching -----------------------------------------------------------------------------
    def tag(self, text: str) -> list[int]:
        """Entity ids (raw, not canonical) whose key occurs in ``text`` starting at a
        capitalized token."""
        return self.tag_many([text])[0]

    def tag_many(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`tag` of each of ``texts``: the batch tokenized in one pass (its texts joined
        by the separator, which no token holds; text by text where a text holds it), its new
        tokens normalized in one call, and entries looked up from each token that may start
        one, never past its text's last token."""
        n_texts = len(texts)
        if not n_texts:
            return []
        joined = _SEP.join(texts)
        ends: list[int] = []  # where each text's tokens end (at its separator)
        if joined.count(_SEP) == n_texts - 1:
            flat = _TOKEN_OR_SEP.findall(split_camel(joined))
            i, find = -1, flat.index  # (one C-level scan per text, not a test per token)
            for _ in range(n_texts - 1):
                i = find(_SEP, i + 1)
                ends.append(i)
        else:  # a text holds the separator itself
            flat = []
            for t in texts:
                flat.extend(_TOKEN.findall(split_camel(t)))
                ends.append(len(flat))
                flat.append(_SEP)
            flat.pop()
            ends.pop()
        cache, starts = self._tok_cache, self._tok_start
        missing = [t for t in dict.fromkeys(flat) if t not in cache and t != _SEP]
        if missing:
            if len(cache) + len(missing) > CACHE_MAX:
                cache.clear()
                starts.clear()
                missing = [t for t in dict.fromkeys(flat) if t != _SEP]
            cache.update(zip(missing, (k.replace(" ", "") for k in normalize_name(missing)),
                             strict=True))
            starts.update((t, cache[t]) for t in missing if t[0].isupper() or t[0].isdigit())
        toks = list(map(cache.get, flat, flat))  # (the separator stays itself)
        prefixes = self._key_prefixes()
        # tokens that may start an entry and whose own key starts one (else no run does)
        at = list(compress(range(len(flat)), map(prefixes.__contains__,
                                                 map(starts.get, flat))))
        ends.append(len(flat))
        get = self.index.get
        out: list[list[int]] = [[] for _ in range(n_texts)]
        k, stop = 0, ends[0]
        for i in at:
            while i > stop:
                k += 1
                stop = ends[k]
            key = toks[i]
            hit = get(key)
            if hit is not None:
                out[k].append(hit)
            j = i + 1
            last = i + MAX_TOKENS if i + MAX_TOKENS < stop else stop
            while j < last:
                key += toks[j]
                if key not in prefixes:  # no entry starts so: no longer run is one either
                    break
                hit = get(key)
                if hit is not None:
                    out[k].append(hit)
                j += 1
        return [list(dict.fromkeys(f)) if len(f) > 1 else f for f in out]

    def _key_prefixes(self) -> set[str]:
        """Every prefix of every key (the keys too), extended as keys are appended."""
        keys = self.keys
        if self._prefixes_of is not keys or self._prefixes_n > len(keys):
            self._prefixes, self._prefixes_n, self._prefixes_of = {""}, 0, keys
        if self._prefixes_n < len(keys):
            add = self._prefixes.update
            for k in keys[self._prefixes_n:]:
                add(k[:e] for e in range(1, len(k) + 1))
            self._prefixes_n = len(keys)
        return self._prefixes

    def canonical(self) -> np.ndarray:
        """Canonical entity id of every entry (-1 for common words); cached until it grows.
        What depends on an entry alone (its token count, whether it opens with an
        interjection, the longer entries a word starts or ends) is kept between calls and
        extended; the counts, which change, are read for the one-word entries only."""
        if self._canon is not None and len(self._canon) == len(self.keys):
            return self._canon
        n = len(self.keys)
        canon = np.arange(n, dtype=np.int64)
        if n:
            single_idx, opener, ends = self._entry_parts()
            single_keys = [self.keys[i] for i in single_idx.tolist()]
            cap = np.fromiter(map(self.cap_count.__getitem__, single_keys), np.float64,
                              count=len(single_keys))
            low = np.fromiter((self.lower_words.get(k, 0) for k in single_keys), np.float64,
                              count=len(single_keys))
            common = opener.copy()
            common[single_idx] |= low >= np.maximum(1.0, 0.2 * cap)
            # one-word aliases of the unique longer entry starting or ending with that word
            for i, k in zip(single_idx.tolist(), single_keys, strict=True):
                if common[i]:
                    continue
                owners = ends.get(k)
                if owners is not None and len(owners) == 1:
                    canon[i] = owners[0]
            canon[common] = -1
        self._canon = canon
        return canon

    def canonical_list(self) -> list[int]:
        """:meth:`canonical` as a list (for per-id lookups in Python), kept with it."""
        canon = self.canonical()
        if self._canon_list is None or self._canon_list[0] is not canon:
            self._canon_list = (canon, canon.tolist())
        return self._canon_list[1]

    def _entry_parts(self) -> tuple[np.ndarray, np.ndarray, dict[str, list[int]]]:
        """(ids of the one-word entries, whether each entry opens with an interjection,
        first/last word -> the longer entries with it), extended to the entries added."""
        keys = self.keys
        if self._parts_of is not keys or self._parts_n > len(keys):
            self._parts_of, self._parts_n = keys, 0
            self._single, self._opener, self._ends = [], [], {}
        lo, n = self._parts_n, len(keys)
        if lo < n:
            ends = self._ends
            for i in range(lo, n):
                a, b = self.first_last[i]
                self._opener.append(a in INTERJECTIONS)
                if self.n_tokens[i] == 1:
                    self._single.append(i)
                    continue
                ends.setdefault(a, []).append(i)
                if b != a:
                    ends.setdefault(b, []).append(i)
            self._parts_n = n
        return (np.asarray(self._single, np.int64), np.asarray(self._opener, bool),
                self._ends)

    # -- persistence --------------------------------------------------------------------------
    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({
            "key": self.keys, "surface": self.surfaces,
            "n_tokens": np.asarray(self.n_tokens, dtype=np.int32),
            "first": [a for a, _ in self.first_last], "last": [b for _, b in self.first_last],
            "cap_count": np.asarray([self.cap_count[k] for k in self.keys], dtype=np.int64),
        })

    def lower_frame(self) -> pd.DataFrame:
        words = list(self.lower_words)
        return pd.DataFrame({"word": words, "count": np.asarray(
            [self.lower_words[w] for w in words], dtype=np.int64)})

    @classmethod
    def from_frames(cls, entities: pd.DataFrame, lower: pd.DataFrame) -> Vocabulary:
        v = cls()
        v.keys = entities["key"].astype(str).tolist()
        v.surfaces = entities["surface"].astype(str).tolist()
        v.n_tokens = entities["n_tokens"].astype(int).tolist()
        v.first_last = list(zip(entities["first"].astype(str), entities["last"].astype(str),
                                strict=True))
        v.index = {k: i for i, k in enumerate(v.keys)}
        v.cap_count = Counter(dict(zip(v.keys, entities["cap_count"].astype(int), strict=True)))
        v.lower_words = Counter(dict(zip(lower["word"].astype(str), lower["count"].astype(int),
                                         strict=True)))
        return v
