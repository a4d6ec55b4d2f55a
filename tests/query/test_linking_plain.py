"""Question linking reads the key of a plain span off its words instead of normalizing it;
every span it treats so is one that normalize_name would give that same key, and linking
finds what normalizing every span found."""

from __future__ import annotations

import pandas as pd

from gpurag.query import spans as linking
from gpurag.query.linking import EntityLinker, plain_key
from gpurag.query.spans import candidate_spans
from gpurag.resolve.normalize import normalize_name

QUESTIONS = [
    "What is known about The Beatles & Co. and AT&T Inc. in World War II?",
    "Did J. R. R. Tolkien's Hobbit outsell Back to the Future Part III?",
    "Where are İstanbul Üniversitesi, İzmir Bay and Beyoncé Knowles?",
    "Was Smith and Sons Ltd older than The Who or An American Tail?",
    "Louis XIV of France met Pope Pius X on U.S. Route 66 near St. Louis",
    "Rock 'n' Roll Hall and Tom & Jerry: X-Men Origins, Mary-Kate Olsen, McDonald's Corp",
    "Apollo 11 mission of the 1st Battalion in the 21st Century Fox era, 1961 to 2004",
    "A B Testing Co and The Lord of the Rings: The Two Towers (2002 film) by Peter Jackson",
]
ALIASES = ["Tom and Jerry", "Louis XIV", "World War 2", "Jrr Tolkien", "AT&T", "Istanbul",
           "The Who", "Apollo 11", "St Louis", "Beyonce Knowles", "X Men", "Smith and Sons",
           "American Tail", "1 Battalion", "21 Century Fox", "Mary Kate Olsen", "Peter Jackson",
           "The Lord of the Rings: The Two Towers", "Rock n Roll Hall", "McDonalds", "Pius X",
           "AB Testing", "Back to the Future Part 3", "Hobbit", "Beatles"]


def _spans(question: str) -> tuple[list, list, list]:
    sp = candidate_spans([question])
    spans = list(zip(sp.q.tolist(), sp.start.tolist(), sp.end.tolist(), strict=True))
    keys = [sp.key(i) if sp.plain[i] else None for i in range(len(sp))]
    slow = [question[s:e] for (_, s, e), k in zip(spans, keys, strict=True) if k is None]
    return spans, keys, slow


def test_every_plain_span_has_the_key_normalize_name_gives_it():
    plain = 0
    for question in QUESTIONS:
        spans, keys, slow = _spans(question)
        texts = [question[s:e] for _, s, e in spans]
        assert [t for t, k in zip(texts, keys, strict=True) if k is None] == slow
        for text, key in zip(texts, keys, strict=True):
            if key is not None:
                plain += 1
                assert key == normalize_name([text])[0] == plain_key(text), text
    assert plain > 50  # most spans are plain


def test_the_words_normalize_name_rewrites_are_never_read_off():
    for word in linking.SUFFIXES:
        assert normalize_name([f"Foo {word}"])[0] == "foo"
    for article in linking.ARTICLES:
        assert normalize_name([f"{article} Foo Bar"])[0] == "foo bar"
    assert normalize_name(["Foo xi"])[0] == "foo 11"


def test_linking_finds_what_normalizing_every_span_finds():
    table = pd.DataFrame({"name": ALIASES, "entity_id": range(len(ALIASES))})
    linker = EntityLinker(table)
    got = linker.link(QUESTIONS)
    # the reference: every span normalized, longest non-overlapping matches
    entity_of = dict(zip(linker.keys, linker.entities.tolist(), strict=True))
    for question, found in zip(QUESTIONS, got, strict=True):
        spans, _, _ = _spans(question)
        hits = sorted(((-(e - s), s, e, entity_of[k]) for (_, s, e), k in zip(
            spans, normalize_name([question[s:e] for _, s, e in spans]), strict=True)
            if k in entity_of))
        taken, want = [], []
        for _, s, e, ent in hits:
            if not any(s < b and a < e for a, b in taken):
                taken.append((s, e))
                want.append((s, e, ent))
        assert [(x.start, x.end, x.entity_id) for x in found] == sorted(want)
    assert sum(map(len, got)) >= 15
