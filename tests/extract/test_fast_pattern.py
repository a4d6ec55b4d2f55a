"""The fast extractor's ``ENTITY_PATTERN`` matches what its plain spelling matched.

The stop words and abbreviations are prefix trees (``fast._alternation``) and a word's letters
run between its separators, where the pattern spelled each word of a list out and looped over
one character at a time (fewer regex steps: the memory's appends and the build's extraction
run it over every text). The plain spelling is rebuilt here from the same parts; both must
find the same matches (start, end, group) on real text and on generated strings made of what
the pattern branches on, and match the same way at every position of those strings.
"""

from __future__ import annotations

import gzip
import itertools
import json
import random
import re
from pathlib import Path

import pytest

from gpurag.extract import fast

REPO = Path(__file__).resolve().parents[2]
SHARED = next((p for p in (REPO.parent / "shared", REPO.parents[1] / "shared")
               if p.exists()), REPO.parent / "shared") / "data"


def _plain() -> re.Pattern:
    """``ENTITY_PATTERN`` as it was spelled before the prefix trees (the reference)."""
    u = fast._U
    stop_alt = "|".join(sorted(fast.STOP_WORDS, key=len, reverse=True))
    word = rf"{u}(?:[^\W_]|['’](?![sS]\b)(?=[^\W_])|-(?=[^\W_]))*"
    token = (rf"(?:(?:{fast._ABBREV})\.(?=[ \t]+{u})"
             rf"|{u}\.(?:[ \t]?{u}\.)*(?:[ \t]?{word})?"
             rf"|{word})")
    name = (rf"\b{fast._YEAR_HEAD}(?={u})(?!(?:{stop_alt})\b)"
            rf"{token}(?:{fast._CONNECT}{token})*{fast._NUMBER_TAIL}")
    return re.compile(rf"(?P<DATE>{fast._DATE})|(?P<WORK>{fast._WORK})|(?P<NAME>{name})"
                      rf"|(?P<YEAR>{fast._YEAR})")


PLAIN = _plain()


def _found(pattern: re.Pattern, text: str) -> list[tuple[int, int, str | None]]:
    return [(m.start(), m.end(), m.lastgroup) for m in pattern.finditer(text)]


def _generated(n: int, seed: int) -> list[str]:
    """Strings of the pieces the pattern branches on: stop words and their prefixes and
    extensions, abbreviations with and without a dot, initials, apostrophes (``'s``, ``’S``),
    hyphens, particles, months, numbers, years, quotes, tabs, separators."""
    rng = random.Random(seed)
    stops = sorted(fast.STOP_WORDS)
    pieces = (stops + [w[:-1] for w in stops if len(w) > 1] + [w + "s" for w in stops[:60]]
              + fast._ABBREV.split("|") + [a + "." for a in fast._ABBREV.split("|")]
              + ["J.", "R.", "U.S.", "U.S", "O'Brien", "O’s", "D'S", "Jean-Luc", "-", "'",
                 "’", "'s", "’s", "of", "the", "de", "la", "von", "&", "y", "May", "Jan.",
                 "Sept.", "March", "5", "12", "31st", "2019", "1999s", "2018–19", "11",
                 "3b", "1,5", "2.5", "\"", "“", "”", "(", ",", ".", "!", "\n", "\t", " ",
                 "  ", "\x00", "Ann", "Berg7", "McDonald", "Zoë", "Élodie", "ǅemal", "Σωκράτης",
                 "école", "name", "x", "Mary’s", "St", "Mrs", "Corp.", "Inc."])
    out = []
    for _ in range(n):
        parts = rng.choices(pieces, k=rng.randint(1, 12))
        seps = rng.choices(["", " ", " ", " ", "\t", ", "], k=len(parts))
        out.append("".join(itertools.chain.from_iterable(zip(seps, parts, strict=True))))
    return out


def test_the_alternation_matches_exactly_its_words():
    words = ["A", "About", "Above", "An", "And", "Any", "Anyone", "Co", "Corp", "Col", "I"]
    alt = re.compile(fast._alternation(words) + r"\Z")
    for w in words:
        assert alt.match(w)
    for other in ["", "Ab", "Abou", "Abouts", "Anyon", "C", "Cor", "Corps", "II", "a"]:
        assert alt.match(other) is None


def test_the_pattern_equals_its_plain_spelling_on_generated_strings():
    texts = _generated(4000, seed=31)
    for text in texts:
        assert _found(fast.ENTITY_PATTERN, text) == _found(PLAIN, text), text
        for p in range(len(text)):  # (the memory tries the pattern at single positions)
            a, b = fast.ENTITY_PATTERN.match(text, p), PLAIN.match(text, p)
            assert (a and (a.end(), a.lastgroup)) == (b and (b.end(), b.lastgroup)), (text, p)


def test_the_pattern_equals_its_plain_spelling_on_dialogues_and_wikipedia():
    from gpurag.memory.synthetic import generate

    corpus, _ = generate(6, seed=3)
    texts = [r["text"] for r in corpus]
    lihua = SHARED / "lihua_world" / "corpus.jsonl"
    if lihua.exists():
        texts += [json.loads(x)["text"] for x in lihua.read_text(encoding="utf-8").splitlines()
                  if x.strip()]
    wiki = SHARED / "enwiki_passages" / "passages.jsonl.gz"
    if wiki.exists():
        with gzip.open(wiki, "rt", encoding="utf-8") as fh:
            texts += [json.loads(x)["text"] for x in itertools.islice(fh, 400)]
    if len(texts) < 1000:
        pytest.skip("the shared corpora are absent")
    joined = "\x00".join(texts)
    found = _found(fast.ENTITY_PATTERN, joined)
    assert len(found) > 5_000
    assert found == _found(PLAIN, joined)
