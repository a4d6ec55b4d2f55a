"""Canonical lookup keys for entity surface names.

``normalize_name`` maps names that surely denote the same thing to one key: Unicode NFKC,
accents stripped, lower case, ``&`` -> ``and``, possessives and punctuation dropped, initials
joined (``J. R. R. Tolkien`` -> ``jrr tolkien``), leading articles and company suffixes
removed, ordinal digits and trailing Roman numerals turned into numbers (``World War II`` ->
``world war 2``), whitespace collapsed. A name that would normalize to nothing keeps its
lower-cased form.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FUNCTION_WORDS", "normalize_name", "number_signature", "roman_to_int"]

_APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "`": "'", "´": "'", "ʼ": "'"})
_POSSESSIVE = re.compile(r"(?<=\w)'s\b|(?<=s)'(?=\s|$)")
_INITIAL_DOT = re.compile(r"(?<![^\W\d_])([^\W\d_])\.")  # "j." -> "j " (single letter + dot)
_TIGHT_AMPERSAND = re.compile(r"(?<=\w)&(?=\w)")  # AT&T -> att
_PUNCT = re.compile(r"[^\w\s]|_")
_INITIAL_RUN = re.compile(r"(?<!\S)[^\W\d_](?:\s+[^\W\d_](?!\S))+")  # "j r r" -> "jrr"
_ORDINAL = re.compile(r"\b(\d+)(?:st|nd|rd|th)\b")
_ARTICLE = re.compile(r"^(?:the|a|an)\s+(?=\S)")
_SUFFIXES = ("co", "ltd", "limited", "inc", "incorporated", "corp", "corporation", "llc", "plc",
             "gmbh", "ag", "sa", "lp", "llp", "pty", "bv", "nv", "srl", "oy", "ab", "kk", "sarl")
_SUFFIX = re.compile(r"(?:\s+(?:and\s+)?(?:" + "|".join(_SUFFIXES) + r"))+$")
_SUFFIX_WORDS = frozenset(_SUFFIXES)
_ROMAN_TAIL = re.compile(r"(?<=\S)\s+((?=[ivxl])(?:xl|l?x{0,3})(?:ix|iv|v?i{0,3}))$")
_SPACES = re.compile(r"\s+")
_MONTHS = (
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december",
)
_MONTH_TAG = {m: f"m{i}" for i, m in enumerate(_MONTHS, start=1)}
_MONTH_TAG.update({m[:3]: tag for m, tag in _MONTH_TAG.items()} | {"sept": "m9"})
_MONTH_STEMS = tuple(sorted({m[:3] for m in _MONTHS}))
_NUMBERS = re.compile(r"\d+|\b(?:" + "|".join(sorted(_MONTH_TAG, key=len, reverse=True)) + r")\b")

_ROMAN_VALUES = {"i": 1, "v": 5, "x": 10, "l": 50}
_ROMAN_LETTERS = frozenset(_ROMAN_VALUES)

FUNCTION_WORDS = frozenset(
    (
        "of", "the", "and", "a", "an", "de", "la", "le", "du", "des", "di", "da", "del",
        "della", "von", "van", "der", "den", "y", "for", "in", "on", "at", "to",
    )
)


class _MarkTable(dict):
    """``str.translate`` table deleting combining marks (accents after NFKD), filled as
    characters are met (the whole table would be 1.1M ``unicodedata`` calls per process)."""

    def __missing__(self, code: int) -> int | None:
        value = None if unicodedata.category(chr(code)) == "Mn" else code
        self[code] = value
        return value


@cache
def _strip_marks() -> dict[int, int | None]:
    return _MarkTable()


def roman_to_int(numeral: str) -> int:
    """Value of a lower-case Roman numeral made of i, v, x, l."""
    total = 0
    prev = 0
    for ch in reversed(numeral):
        value = _ROMAN_VALUES[ch]
        total += -value if value < prev else value
        prev = max(prev, value)
    return total


def _roman_tail(match: re.Match[str]) -> str:
    numeral = match.group(1)
    if not numeral or (len(numeral) == 1 and numeral != "i"):  # "malcolm x" stays
        return match.group(0)
    return f" {roman_to_int(numeral)}"


def _normalize_one(name: str) -> str:
    """The regex chain of the module docstring. Each step runs only where it can match (a
    cheap substring or character-class test that every match needs): most names skip most
    steps, with the same key."""
    if name.isascii():
        s = name.lower().replace("`", "'")
    else:
        s = unicodedata.normalize("NFKC", name)
        s = unicodedata.normalize("NFKD", s).translate(_strip_marks())
        s = s.lower().translate(_APOSTROPHES)
    if "'" in s:
        s = _POSSESSIVE.sub("", s)
    if "&" in s:
        s = _TIGHT_AMPERSAND.sub("", s).replace("&", " and ")
    if "'" in s:  # after the ampersands: "a'&b" has no tight ampersand
        s = s.replace("'", "")
    if "." in s:
        s = _INITIAL_DOT.sub(r"\1 ", s)
    bare = s.replace(" ", "")
    if not bare.isalnum():  # else no punctuation or underscore (\w is isalnum plus "_")
        s = _PUNCT.sub(" ", s)
    if "  " in s or not s.isprintable():  # every whitespace but " " is unprintable
        s = _SPACES.sub(" ", s)
    s = s.strip()  # from here on the only whitespace is single spaces between words
    if " " in s:  # a run of initials has two or more words
        s = _INITIAL_RUN.sub(lambda m: m.group(0).replace(" ", ""), s)
    if not bare.isalpha() and ("st" in s or "nd" in s or "rd" in s or "th" in s):
        s = _ORDINAL.sub(r"\1", s)  # (a digit is not alphabetic)
    if s.startswith(("the ", "a ", "an ")):
        s = _ARTICLE.sub("", s)
    if s[s.rfind(" ") + 1:] in _SUFFIX_WORDS:  # a suffix is the last word
        stripped = _SUFFIX.sub("", s)
        if stripped and stripped not in FUNCTION_WORDS:
            s = stripped
    if s[-1:] in _ROMAN_LETTERS and " " in s:  # a numeral is the last word, after another
        s = _ROMAN_TAIL.sub(_roman_tail, s)
    return s or " ".join(name.lower().split())


def normalize_name(names: Sequence[str]) -> list[str]:
    """Normalized lookup key of each name (see the module docstring)."""
    cache: dict[str, str] = {}
    out = []
    for name in names:
        key = cache.get(name)
        if key is None:
            key = cache[name] = _normalize_one(str(name))
        out.append(key)
    return out


def number_signature(normalized: Sequence[str]) -> list[str]:
    """The sorted numbers and month names of each normalized name: names whose signatures
    differ are different things ("apollo 11" / "apollo 12", "3 march 2018" / "3 may 2018")."""
    tag = _MONTH_TAG.get
    return [" ".join(sorted(tag(x, x) for x in _NUMBERS.findall(s))) if _may_number(s) else ""
            for s in normalized]


def _may_number(s: str) -> bool:
    """Whether ``s`` may hold a number or a month name: a digit is not alphabetic, and every
    month name starts with its three-letter stem."""
    return not s.replace(" ", "").isalpha() or any(stem in s for stem in _MONTH_STEMS)


def alias_keys(aliases) -> list[str]:
    """Each alias's lookup key: the ``key`` column an index stores (builds since stop 13), else
    :func:`normalize_name` of the ``name`` column (older indexes, tables made by hand)."""
    return alias_key_column(aliases).tolist()


def alias_key_column(aliases) -> pd.Series:
    """:func:`alias_keys` as a column of ``str`` (no list of every stored key: a local insert
    probes it with its few new keys)."""
    import pandas as pd

    if "key" in aliases:
        return aliases["key"].astype(str)
    return pd.Series(normalize_name(aliases["name"].astype(str).tolist()), index=aliases.index,
                     dtype=object)
