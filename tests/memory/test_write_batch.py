"""The batch-first write path gives what the per-trace forms gave: names found where the
pattern can start equal ``finditer``'s, a batch tagged at once equals each text tagged alone,
the discourse rules with the batch's prefilters equal the rules run in full, and the log lines
and content keys spelled out equal the JSON encoders' output."""

from __future__ import annotations

import hashlib
import json
import random
import re
import zlib

import numpy as np
import pytest

from gpurag.extract.fast import ENTITY_PATTERN, SINGLE_WORD_DROP
from gpurag.memory import Memory
from gpurag.memory.discourse import (
    _ATTRIBUTE_WORDS,
    _OWNER_WORDS,
    _RELATIVE_WORDS,
    ATTRIBUTE_WORDS,
    OWNERS,
    PRONOUN,
    PRONOUNS,
    RELATIVES,
    Discourse,
    _may_match,
    batch_flags,
)
from gpurag.memory.log import Trace, content_key, line, record
from gpurag.memory.vocab import MAX_NAME_CHARS, Vocabulary, find_names, name_tokens
from tests.memory.test_fast_paths import _conversation_texts, _plain_tag

TRICKY = [
    "Hey Li Hua, WolfgangSchulz met Dr. Mira Okafor-Reyes in January 2020 (and 1999).",
    '"Big Film" was shown; he said "Quiet Place" twice. “The Book” and “small print”.',
    "“unclosed quote", 'x"Not A Work" and "Lower case" and "',
    "St. Louis, U.S. Army, J. R. R. Tolkien",
    "Apollo 11 and Formula 1 on 3 March 2018; 2018 Winter Olympics in Zürich, ÄÖÜ Straße.",
    "Ⓐ circled Ⓑ letters, ǅ titlecase ǅurić, Σίσυφος ΣΟΦΟΣ, ٣ digits ١٢, 東京 Tokyo",
    "", "no capitals at all here", "A", "1", "“", '"', "O'Brien's and D’Arcy’s dog",
    "Mary Ann Smith Jones Brown Green White of York 2023 Vol 2.", "Name_With_Underscore Bob",
    "Line one Alpha\nLine two Beta\tGamma", "Trailing Capital", "ends with quote “X",
    "Ann12 Berg7 met x2020 and 3March2018 on 12 May 2020, ab1999 1999s 2018–19 Apollo11",
    "“12 angry men” and “7”, _2020 and (1999) 5th of May 2001",
    "naïve cafés éclair ab_cd 1ab ab1 _ab aB Ab ““Twice” “”“Thrice Q” ends“",
    'A "Quote“" b Carl”',  # a match ends at a curly quote: the spot after it is still tried
]


class _Emb:
    """A 4-dimensional stand-in embedder (every vector the same): these tests are about the
    write path, not the ranking."""

    name, dim, max_tokens = "e", 4, 64

    def encode(self, texts, batch_size=64):
        return np.ones((len(texts), 4), np.float32) / 2


# the lower-case words learn and the fast extractor count, as first written (the shared
# gpurag.extract.fast._LOWER_WORD now opens with a class)
_PLAIN_LOWER = re.compile(r"(?<![^\W\d_])[a-z][a-z]+(?![^\W\d_])")


def _plain_names(text: str) -> list[str]:
    return [m.group() for m in ENTITY_PATTERN.finditer(text)
            if m.lastgroup in ("NAME", "WORK", "DATE") and len(m.group()) <= MAX_NAME_CHARS]


def _random_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    parts = ["Ann", "Berg", "met", "the", "of", "“", "”", '"', "'s", "Dr.", "St.", "2020",
             "March", "12", "x", ",", ".", ":", "Ünal", "ǅ", "Ⓐ", "\t", "-", "he", "My", "é"]
    gaps = ["", " ", "  "]
    return ["".join(rng.choice(parts) + rng.choice(gaps) for _ in range(rng.randint(0, 14)))
            for _ in range(n)]


def test_names_found_where_a_match_can_start_equal_finditer():
    texts = [*TRICKY, *_conversation_texts(), *_random_texts(400)]
    for t in texts:
        assert find_names(t) == _plain_names(t), t
    joined = "\x00".join(texts)  # the batch as learn joins it: no match crosses a text
    assert find_names(joined) == [n for t in texts for n in _plain_names(t)]


def _plain_learn(v: Vocabulary, texts: list[str]) -> None:
    """The vocabulary grown one text and one name at a time (the former learn)."""
    for text in texts:
        for name in _plain_names(text):
            if name in SINGLE_WORD_DROP:
                continue
            toks = name_tokens([name])[0]
            if not toks:
                continue
            key = "".join(toks)
            v.cap_count[key] += 1
            if key not in v.index:
                v.index[key] = len(v.keys)
                v.keys.append(key)
                v.surfaces.append(name)
                v.n_tokens.append(len(toks))
                v.first_last.append((toks[0], toks[-1]))
        v.lower_words.update(_PLAIN_LOWER.findall(text))


def test_a_batch_learned_and_tagged_at_once_equals_one_text_at_a_time():
    texts = [*TRICKY, *_conversation_texts(), *_random_texts(300, seed=1)]
    batch, plain = Vocabulary(), Vocabulary()
    for lo in range(0, len(texts), 37):
        batch.learn(texts[lo:lo + 37])
        _plain_learn(plain, texts[lo:lo + 37])
        assert batch.keys == plain.keys and batch.surfaces == plain.surfaces
        assert batch.n_tokens == plain.n_tokens and batch.first_last == plain.first_last
        assert list(batch.cap_count.items()) == list(plain.cap_count.items())
        assert list(batch.lower_words.items()) == list(plain.lower_words.items())
        assert batch.tag_many(texts) == [_plain_tag(batch, t) for t in texts]
    assert batch.tag_many([]) == []


def test_a_batch_is_tagged_as_each_text_alone_across_its_joins_and_separators():
    """The batch is tokenized joined: an entry never runs from one text into the next, and a
    text that holds the separator itself is tagged as it would be alone (its tokens on either
    side of it are neighbours there)."""
    v = Vocabulary()
    v.learn(["Ann Lee met Bob Stone at Porto Alegre.", "Ann Lee again", "Bob Stone"])
    texts = ["see you Ann", "Lee and Bob", "", "Stone and Ann Lee", "Porto", "Alegre Bob Stone",
             "Ann\x00Lee", "\x00", "Bob\x00"]
    want = [_plain_tag(v, t) for t in texts]
    assert want[0] == [] and want[1] == [] and want[6] != []
    for batch in (texts, texts[:6], texts[6:], texts[3:7]):
        assert v.tag_many(batch) == [_plain_tag(v, t) for t in batch]


def test_the_lower_case_pronoun_pattern_finds_what_the_pronoun_pattern_finds():
    from gpurag.memory.discourse import _PRONOUN_LOWER

    plain = re.compile(PRONOUN.pattern)  # (case-sensitive: batch_flags lower-cases first)
    rng = random.Random(5)
    parts = ["he", "him", "his", "she", "her", "hers", "they", "them", "their", "theirs",
             "the", "t", "h", "s", "x", " ", "_", "1", "é", "'", "-", "\x00", "ers", "irs"]
    texts = ["".join(rng.choice(parts) for _ in range(rng.randint(0, 12)))
             for _ in range(5000)]
    for text in [*texts, "\x00".join(t.lower() for t in TRICKY), "\x00".join(texts)]:
        assert ([m.span() for m in _PRONOUN_LOWER.finditer(text)]
                == [m.span() for m in plain.finditer(text)]), text


def test_batch_flags_clear_a_bit_only_where_its_test_fails():
    texts = [*TRICKY, *_conversation_texts(), *_random_texts(300, seed=2), "HIS dog", "tHeIr",
             "Ünïcode his", "I moved last week", "they", "the hen", "hıs (dotless i)"]
    flags = batch_flags(texts)
    assert flags == [batch_flags([t])[0] for t in texts]
    owner = "|".join(_OWNER_WORDS)
    for t, f in zip(texts, flags, strict=True):
        # every tail of the text (a body after a speaker) fails a test whose bit is clear
        for body in {t, t[t.find(":") + 1:].lstrip()}:
            if not f & PRONOUNS:
                assert PRONOUN.search(body) is None, t
            if not f & OWNERS:
                assert not any(w in body.lower() for w in owner.split("|")), t
            if not f & RELATIVES:
                assert not _may_match(body, _RELATIVE_WORDS), t
            if not f & ATTRIBUTE_WORDS:
                assert not _may_match(body, _ATTRIBUTE_WORDS), t
    assert any(not f & PRONOUNS for f in flags) and any(f & PRONOUNS for f in flags)


def test_the_rules_with_the_batch_prefilters_equal_the_rules_run_in_full():
    from gpurag.memory.synthetic import generate

    corpus, _ = generate(8, seed=5, n_sessions=5)
    turns = [(r["title"], r["text"].split("\n", 1)[1], float(i)) for i, r in enumerate(corpus)]
    texts = [t for _, t, _ in turns] + TRICKY[:8]
    sessions = [s for s, _, _ in turns] + ["x"] * 8
    whens = [w * 86400 + 1.7e9 for _, _, w in turns] + [1.7e9] * 8
    vocab = Vocabulary()
    vocab.learn(texts)
    canon = vocab.canonical_list()
    names = [[vocab.surfaces[c] for c in map(canon.__getitem__, r) if c >= 0]
             for r in vocab.tag_many(texts)]
    fast, full = Discourse(), Discourse()
    got = []
    for lo in range(0, len(texts), 9):
        sl = slice(lo, lo + 9)
        got += fast.annotate_many(texts[sl], sessions[sl], list(range(len(texts)))[sl],
                                  whens[sl], names[sl])
    every = PRONOUNS | OWNERS | RELATIVES | ATTRIBUTE_WORDS  # each rule runs its own test
    want = [full._annotate(t, s, i, w, n, every) for i, (t, s, w, n)
            in enumerate(zip(texts, sessions, whens, names, strict=True))]
    assert got == want
    assert fast.state() == full.state()
    assert any(a.refs for a in got) and any(a.claims for a in got) and any(a.dates for a in got)


def _encoded_line(t: Trace) -> bytes:
    """The log line as the JSON encoder writes it (the former record)."""
    rec = {"id": t.id, "text": t.text, "session": t.session, "turn": t.turn,
           "time": None if np.isnan(t.time) else t.time}
    if t.meta:
        rec["meta"] = t.meta
    if t.key:
        rec["key"] = t.key
    body = json.dumps(rec, ensure_ascii=False, sort_keys=True)
    return f'{body[:-1]}, "crc": {zlib.crc32(body.encode("utf-8"))}}}\n'.encode()


@pytest.mark.parametrize("time", [0.0, 1.5, -2.0, 1e300, 1.7e9 + 1 / 3, float("nan"),
                                  float("inf"), float("-inf"), 5e-324])
def test_log_lines_and_content_keys_spelled_out_equal_the_encoders(time):
    texts = ['plain', 'quote " back \\ slash', "tab\t nl\n cr\r \x00 \x1f \x7f", "ünï 東京 😀",
             "\u2028\u2029 sep", ""]
    for i, text in enumerate(texts):
        for meta, key, turn in (({}, "", 0), ({"doc": "p1", "z": [1, {"b": 2.5, "a": None}]},
                                               "k:42", 7), ({"é": "ü"}, "d:ab", 2**70)):
            t = Trace(i * 1000, text, f"s{i} “x”", turn, time, meta, key)
            assert record(t) == _encoded_line(t) == line(t).encode()
            for given in (turn, None):
                body = json.dumps([t.session, given, None if time != time else time, text],
                                  ensure_ascii=False)
                want = "d:" + hashlib.blake2b(body.encode(), digest_size=12).hexdigest()
                assert content_key(t.session, given, time, text) == want


def test_validation_keeps_defaults_errors_and_keys(tmp_path):
    from gpurag.errors import InputError

    mem = Memory.create(tmp_path / "m", embedder=_Emb())
    ids = mem.add_many(["a first", {"text": "b", "session": "s", "time": 5, "turn": True},
                        {"text": "c", "session": "s", "time": "2023-05-08"},
                        {"text": "d", "key": 7}, {"text": "d again", "key": 7}])
    assert ids == [0, 1, 2, 3, 3]
    assert mem.sessions == ["default", "s", "s", "s"] and mem.turns == [0, 1, 2, 3]
    assert mem._stored_keys[3] == "k:7" and mem._stored_keys[1].startswith("d:")
    for bad, msg in (({"text": " "}, "trace 4: text must be a non-empty string"),
                     ({"text": "x", "turn": "two"}, "trace 4: turn 'two' is not an integer"),
                     ({"text": "x", "meta": [1]}, "trace 4: meta must be an object"),
                     ({"text": "x", "key": True}, "trace 4: key must be a non-empty string"),
                     ({"text": "x", "time": "soon"}, "trace 4: time 'soon' is not a number")):
        with pytest.raises(InputError, match=msg.replace("(", r"\(")):
            mem.add_many([bad])
    assert len(mem) == 4
    mem.close()


def test_no_garbage_collection_runs_during_a_bulk_append_and_the_collector_is_restored(
        tmp_path):
    import gc

    mem = Memory.create(tmp_path / "m", embedder=_Emb())
    texts = [f"Ann{i % 50} Berg{i % 7} met Ann{i % 13} at Porto{i % 5} about {i}" for i in
             range(3000)]
    vecs = np.ones((3000, 4), np.float32) / 2
    runs = []

    def seen(phase, info):
        if phase == "start":
            runs.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        mem.add_many(texts[:2000], vectors=vecs[:2000])  # (~100k container allocations)
        during = list(runs)
        assert gc.isenabled()
        gc.disable()  # a caller that paused it finds it paused after
        mem.add_many(texts[2000:2500], vectors=vecs[2000:2500])
        assert not gc.isenabled()
        gc.enable()
        with pytest.raises(Exception):  # noqa: B017 (any failure restores the collector)
            mem.add_many(["ok", {"text": ""}])
        assert gc.isenabled()
    finally:
        gc.callbacks.remove(seen)
    assert len(during) <= 2  # the young collections the batch's allocations carry over to
    # (unpaused: one per 700 container allocations, ~100 here, and full ones as it grows)
    assert len(mem) == 2500
    gc.collect()
    mem.add_many(texts[2500:], vectors=vecs[2500:])
    assert gc.collect() == 0  # the write path makes no cycles: pausing the collector is safe
    mem.close()


def test_a_failed_batch_leaves_no_idempotency_key_behind(tmp_path):
    """A batch whose later trace is refused writes nothing, and none of its keys is kept: a
    retry of its first trace is added (it was not), and the next trace gets the next id."""
    from gpurag.errors import InputError

    mem = Memory.create(tmp_path / "m", embedder=_Emb())
    with pytest.raises(InputError):
        mem.add_many([{"text": "first", "key": "a"}, {"text": " "}])
    assert len(mem) == 0
    assert mem.add_many([{"text": "first", "key": "a"}]) == [0]
    assert mem.add_many([{"text": "second"}, {"text": "first", "key": "a"}]) == [1, 0]
    assert mem.texts == ["first", "second"]
