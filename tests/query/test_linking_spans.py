"""Question linking over a whole batch (gpurag/query/spans.py + linking.py) finds exactly what
the per-question implementation it replaced found: the same candidate spans, the same plain
spans with the same keys, the same linked entities, on a fixture and on the shared sets'
questions (the reference below is that implementation, kept verbatim)."""

from __future__ import annotations

import json
import os
import re
from bisect import bisect_left
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpurag.query.linking import EntityLinker, longest_first
from gpurag.query.spans import WordHasher, candidate_spans
from gpurag.resolve.normalize import normalize_name

REPO = Path(__file__).resolve().parents[2]
DATA = next((d for d in [Path(p) for p in (os.environ.get("GPURAG_SHARED_DATA"),) if p]
             + [REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"]
             if d.is_dir()), REPO.parent / "shared" / "data")
SETS = ("musique_train100", "hotpotqa_train100", "lihua_world")
FIXTURE = [
    "What is known about The Beatles & Co. and AT&T Inc. in World War II?",
    "Did J. R. R. Tolkien's Hobbit outsell Back to the Future Part III?",
    "Where are İstanbul Üniversitesi, İzmir Bay and Beyoncé Knowles?",
    "Was Smith and Sons Ltd older than The Who or An American Tail?",
    "Louis XIV of France met Pope Pius X on U.S. Route 66 near St. Louis",
    "Rock 'n' Roll Hall and Tom & Jerry: X-Men Origins, Mary-Kate Olsen, McDonald's Corp",
    "Apollo 11 mission of the 1st Battalion in the 21st Century Fox era, 1961 to 2004",
    "A B Testing Co and The Lord of the Rings: The Two Towers (2002 film) by Peter Jackson",
    "", "   ", "no capitals here at all", "İ", "Ǆemal and ǅemal met K-9 Kelvin (K) in 2nd-3rd AB",
    "Mr X Y Z and 1st 2nd 33rd 4th, I II IV Ltd Inc Co LLC ab The A An The",
    "a\nb New\nYork", "O'Brien’s band the A-Team's CEO: Dr. Who & Co.; Ms. Marvel ...",
    "Über Straße 12th Precinct — Æon Flux, naïve Café Noir in São Paulo",
    "1 2 3 4 5 6 7 8 9 10 11 12 13 Alpha Beta Gamma Delta Epsilon Zeta Eta Theta",
]
ALIASES = ["Tom and Jerry", "Louis XIV", "World War 2", "Jrr Tolkien", "AT&T", "Istanbul",
           "The Who", "Apollo 11", "St Louis", "Beyonce Knowles", "X Men", "Smith and Sons",
           "American Tail", "1 Battalion", "21 Century Fox", "Mary Kate Olsen", "Peter Jackson",
           "The Lord of the Rings: The Two Towers", "Rock n Roll Hall", "McDonalds", "Pius X",
           "AB Testing", "Back to the Future Part 3", "Hobbit", "Beatles", "New York",
           "Alpha Beta Gamma", "Beta Gamma Delta Epsilon", "12 Precinct", "Sao Paulo",
           "Cafe Noir", "Ms Marvel", "Dr Who", "Obriens", "K 9", "Mr Xyz", "Ab"]

# -- the per-question implementation this replaced (main before the batched spans) ----------
_WORD = re.compile(r"[^\W_][\w'’.\-&]*", re.UNICODE)
_NOT_PLAIN = re.compile(r"[^\x00-\x7f]|['`&.]")
_PIECE = re.compile(r"[a-z0-9]+")
_ARTICLES = frozenset(("the", "a", "an"))
_SUFFIXES = frozenset((
    "co", "ltd", "limited", "inc", "incorporated", "corp", "corporation", "llc", "plc", "gmbh",
    "ag", "sa", "lp", "llp", "pty", "bv", "nv", "srl", "oy", "ab", "kk", "sarl"))
_ROMAN = re.compile(r"[ivxl]+")
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th)")


def _reference_spans(qi: int, question: str, spans: list, keys: list, slow: list) -> None:
    tokens = list(_WORD.finditer(question))
    bad = [m.start() for m in _NOT_PLAIN.finditer(question)]
    pieces = [_PIECE.findall(m.group().lower()) for m in tokens]
    for i, m in enumerate(tokens):
        if not (m.group()[:1].isupper() or m.group()[:1].isdigit()):
            continue
        start = m.start()
        first_bad = bisect_left(bad, start)
        words: list[str] = []
        plain = not pieces[i] or pieces[i][0] not in _ARTICLES
        for j in range(i, min(i + 6, len(tokens))):
            end = tokens[j].end()
            spans.append((qi, start, end))
            plain = (plain and (first_bad == len(bad) or bad[first_bad] >= end)
                     and not any(map(_ORDINAL.fullmatch, pieces[j])))
            if plain:
                for w in pieces[j]:
                    if len(w) == 1 and w.isalpha() and words and len(words[-1]) == 1 \
                            and words[-1].isalpha():
                        plain = False
                    words.append(w)
            if plain and words[-1] not in _SUFFIXES and not _ROMAN.fullmatch(words[-1]):
                keys.append(" ".join(words))
            else:
                keys.append(None)
                slow.append(question[start:end])


def _reference_link(entity_of: dict[str, int], questions: list[str]) -> list[tuple]:
    spans, keys, slow = [], [], []
    for qi, question in enumerate(questions):
        _reference_spans(qi, question, spans, keys, slow)
    computed = iter(normalize_name(slow))
    keys = [next(computed) if key is None else key for key in keys]
    hits = [(qi, start, end, entity_of[key])
            for (qi, start, end), key in zip(spans, keys, strict=True) if key in entity_of]
    hits.sort(key=lambda h: (h[0], -(h[2] - h[1]), h[1]))
    taken: list[list[tuple[int, int]]] = [[] for _ in questions]
    kept = []
    for qi, start, end, entity in hits:
        if any(start < e and s < end for s, e in taken[qi]):
            continue
        taken[qi].append((start, end))
        kept.append((qi, start, end, int(entity)))
    return sorted(kept, key=lambda h: (h[0], h[1]))


# -- question sets -------------------------------------------------------------------------
def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


@pytest.fixture(scope="module")
def shared() -> tuple[list[str], list[str]]:
    """The shared sets' questions, plus bench-style ones made from their passages' titles
    (bench/query.py's form), and an alias table of their titles and OpenIE entities."""
    if not all((DATA / s / "questions.jsonl").is_file() for s in SETS):
        pytest.skip(f"shared data not found under {DATA}")
    questions, names = [], []
    for s in SETS:
        questions += [r["question"] for r in _jsonl(DATA / s / "questions.jsonl")]
        corpus = _jsonl(DATA / s / "corpus.jsonl")
        names += [r["title"] for r in corpus]
        questions += [f"What is known about {r['title']}: {' '.join(r['text'].split()[4:12])}?"
                      for r in corpus[::6]]
        triples = DATA / s / "triples.jsonl"
        if triples.is_file():
            names += [str(e) for r in _jsonl(triples) for e in r.get("entities", [])]
    return questions, names


def _batch_spans(questions: list[str]) -> tuple[list, list]:
    sp = candidate_spans(questions)
    rows = list(zip(sp.q.tolist(), sp.start.tolist(), sp.end.tolist(), strict=True))
    keys = [sp.key(i) if sp.plain[i] else None for i in range(len(sp))]
    return rows, keys


def _check_spans(questions: list[str]) -> int:
    want_spans, want_keys, _ = [], [], []
    for qi, question in enumerate(questions):
        _reference_spans(qi, question, want_spans, want_keys, [])
    got_spans, got_keys = _batch_spans(questions)
    assert got_spans == want_spans
    for span, got, want in zip(got_spans, got_keys, want_keys, strict=True):
        assert got == want, (questions[span[0]][span[1]:span[2]], got, want)
    return len(got_spans)


def _check_link(names: list[str], questions: list[str]) -> int:
    linker = EntityLinker(pd.DataFrame({"name": names, "entity_id": range(len(names))}))
    entity_of = dict(zip(linker.keys, linker.entities.tolist(), strict=True))
    got = linker.link_batch(questions)
    rows = list(zip(got.q.tolist(), got.start.tolist(), got.end.tolist(), got.entity.tolist(),
                    strict=True))
    assert rows == _reference_link(entity_of, questions)
    return len(rows)


def test_spans_equal_the_per_question_reference_on_the_fixture():
    assert _check_spans(FIXTURE) > 150
    for question in FIXTURE:  # a batch of one, and each question's spans alone
        _check_spans([question])


def test_linking_equals_the_per_question_reference_on_the_fixture():
    assert _check_link(ALIASES, FIXTURE) >= 20
    assert _check_link(ALIASES, FIXTURE[:1]) >= 2
    assert _check_link(ALIASES, []) == 0
    assert _check_link(ALIASES, ["", "nothing named"]) == 0


def test_spans_and_links_equal_the_reference_on_the_shared_sets(shared):
    questions, names = shared
    assert _check_spans(questions) > 15_000
    assert _check_link(names, questions) > 1_000


def test_longest_first_keeps_the_longest_then_leftmost_non_overlapping():
    q = np.array([0, 0, 0, 0, 1, 1, 1])
    start = np.array([0, 4, 2, 10, 0, 3, 0])
    end = np.array([3, 9, 9, 12, 5, 8, 8])
    kept = sorted(longest_first(q, start, end).tolist())
    # q0: [2,9) (7) first, then [4,9) and [0,3) overlap it, [10,12) stays; q1: [0,8) alone
    assert kept == [2, 3, 6]


def test_word_hash_matches_only_the_same_words():
    hasher = WordHasher(["alpha beta", "gamma", "not plain!", "beta"])
    pieces = ["alpha", "beta", "gamma", "delta"]
    assert hasher.word_ids(pieces).tolist()[3] == 0
    rows = hasher.find(pieces, np.array([0, 1, 2, 3, 0]), np.array([2, 2, 3, 4, 3]))
    assert rows.tolist() == [0, 3, 1, -1, -1]
    # base 1: a hash of the word multiset only, so "beta alpha" hashes as "alpha beta" does
    hasher = WordHasher(["alpha beta", "beta"], base=1)
    assert hasher.base == 1
    assert hasher.find(["beta", "alpha"], np.array([0]), np.array([2])).tolist() == [-1]
    assert hasher.find(["alpha", "beta"], np.array([0, 1]), np.array([2, 2])).tolist() == [0, 1]
    assert WordHasher(["alpha beta", "gamma"], base=1).base != 1  # keys collided: rehashed
