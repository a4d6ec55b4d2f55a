"""The fast extractor's character classes, built at import, are the per-character ones."""

from __future__ import annotations

import re

from gpurag.extract import fast


def _per_character(pred) -> str:
    """The definition: every BMP character ``pred`` accepts, as ranges (the old loop)."""
    codes = [c for c in range(0x10000) if pred(chr(c))]
    parts, i = [], 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        lo, hi = chr(codes[i]), chr(codes[j])
        parts.append(re.escape(lo) if i == j else f"{re.escape(lo)}-{re.escape(hi)}")
        i = j + 1
    return "[" + "".join(parts) + "]"


def test_the_capital_class_is_every_upper_or_title_case_character_as_ranges():
    want = _per_character(lambda ch: ch.isupper() or ch.istitle())
    capitals = fast._U
    assert capitals == want
    assert fast._char_class(str.isdigit) == _per_character(str.isdigit)
    assert fast._char_class(lambda ch: False) == "[]"
