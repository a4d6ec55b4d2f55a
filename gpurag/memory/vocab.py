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

import numpy as np
import pandas as pd

from gpurag.extract.fast import ENTITY_PATTERN, SINGLE_WORD_DROP
from gpurag.resolve.normalize import normalize_name

MAX_TOKENS = 6
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_TOKEN = re.compile(r"[^\W_]+")
_LOWER = re.compile(r"(?<![^\W\d_])[a-z][a-z]+(?![^\W\d_])")
_GROUPS_KEPT = frozenset(("NAME", "WORK", "DATE"))
MAX_NAME_CHARS = 80
# chat openers the name regex takes for the start of a name ("Hey Li Hua", "Thanks Wolfgang")
INTERJECTIONS = frozenset((
    "hey", "hi", "hello", "thanks", "thank", "sure", "yes", "yeah", "yep", "oh", "wow", "ok",
    "okay", "dear", "good", "great", "well", "haha", "congrats", "congratulations", "sorry",
    "please", "hmm", "absolutely", "awesome", "cool", "nice", "lol", "omg",
))


def split_camel(text: str) -> str:
    """``"WolfgangSchulz"`` -> ``"Wolfgang Schulz"``."""
    return _CAMEL.sub(" ", text)


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
        self._tok_cache: dict[str, str] = {}
        self._name_cache: dict[str, list[str]] = {}  # surface -> its normalized tokens
        self._canon: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    # -- growing ------------------------------------------------------------------------------
    def learn(self, texts: Sequence[str]) -> None:
        """Add the names the fast extractor's pattern finds in ``texts`` to the vocabulary."""
        if not texts:
            return
        names = [m.group() for text in texts for m in ENTITY_PATTERN.finditer(text)
                 if m.lastgroup in _GROUPS_KEPT and len(m.group()) <= MAX_NAME_CHARS
                 and m.group() not in SINGLE_WORD_DROP]
        if names:
            cache = self._name_cache
            fresh = list(dict.fromkeys(n for n in names if n not in cache))
            if fresh:
                if len(cache) > 1_000_000:
                    cache.clear()
                cache.update(zip(fresh, name_tokens(fresh), strict=True))
            for name in names:
                toks = cache[name]
                if not toks:
                    continue
                key = "".join(toks)
                self.cap_count[key] += 1
                if key not in self.index:
                    self.index[key] = len(self.keys)
                    self.keys.append(key)
                    self.surfaces.append(name)
                    self.n_tokens.append(len(toks))
                    self.first_last.append((toks[0], toks[-1]))
                    self._canon = None
        self.lower_words.update(w for text in texts for w in _LOWER.findall(text))

    # -- matching -----------------------------------------------------------------------------
    def tag(self, text: str) -> list[int]:
        """Entity ids (raw, not canonical) whose key occurs in ``text`` starting at a
        capitalized token."""
        raw = _TOKEN.findall(split_camel(text))
        if not raw:
            return []
        cache = self._tok_cache
        missing = [t for t in raw if t not in cache]
        if missing:
            if len(cache) > 1_000_000:
                cache.clear()
            cache.update(zip(missing, normalize_name(missing), strict=True))
        toks = [cache[t] for t in raw]
        found: list[int] = []
        index = self.index
        n = len(toks)
        for i in range(n):
            first = raw[i][0]
            if not (first.isupper() or first.isdigit()):
                continue
            key = ""
            for j in range(i, min(n, i + MAX_TOKENS)):
                key += toks[j].replace(" ", "")
                hit = index.get(key)
                if hit is not None:
                    found.append(hit)
        return list(dict.fromkeys(found))

    def canonical(self) -> np.ndarray:
        """Canonical entity id of every entry (-1 for common words); cached until it grows."""
        if self._canon is not None and len(self._canon) == len(self.keys):
            return self._canon
        n = len(self.keys)
        canon = np.arange(n, dtype=np.int64)
        if n:
            single = np.asarray(self.n_tokens) == 1
            cap = np.asarray([self.cap_count[k] for k in self.keys], dtype=np.float64)
            low = np.asarray([self.lower_words.get(k, 0) for k in self.keys], dtype=np.float64)
            opener = np.asarray([a in INTERJECTIONS for a, _ in self.first_last])
            common = (single & (low >= np.maximum(1.0, 0.2 * cap))) | opener
            # one-word aliases of the unique longer entry starting or ending with that word
            ends: dict[str, list[int]] = {}
            for i in np.flatnonzero(~single):
                a, b = self.first_last[i]
                ends.setdefault(a, []).append(int(i))
                if b != a:
                    ends.setdefault(b, []).append(int(i))
            for i in np.flatnonzero(single & ~common):
                owners = ends.get(self.keys[i])
                if owners is not None and len(owners) == 1:
                    canon[i] = owners[0]
            canon[common] = -1
        self._canon = canon
        return canon

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
