"""The non-LLM extractors: spans, titles, sentence co-occurrence relations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpurag.errors import ConfigError
from gpurag.extract import (
    Extraction,
    Extractor,
    FastExtractor,
    SpacyExtractor,
    make_extractor,
)
from gpurag.extract.ner import cooccurrence_relations

# real sentences (Wikipedia, CC BY-SA), one chunk each
TEXTS = [
    "Jarred Shaw (born September 28, 1990) is an American professional basketball player for "
    "Trouville of the Liga Uruguaya de Básquetbol (LUB). On October 31, 2015, Shaw was "
    "selected by the Santa Cruz Warriors in the 2015 NBA Development League Draft.",
    "The Lord of the Rings was written by J. R. R. Tolkien. Born in Bloemfontein, Tolkien "
    "moved to England. He studied at Exeter College, Oxford. The song \"Hey Jude\" by The "
    "Beatles topped the charts in 1968. Apollo 11 landed in July 1969.",
    "Harrow International School Shanghai is a British international boarding school in "
    "Pudong, Shanghai. It opened in August 2016 in association with Harrow School in London.",
]
TITLES = ["Jarred Shaw", "The Lord of the Rings", "Harrow International School Shanghai"]


def _chunks() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "chunk_id": ["c0", "c1", "c2"],
            "doc_id": ["d0", "d1", "d2"],
            "title": TITLES,
            "text": TEXTS,
            "char_start": 0,
            "char_end": [len(t) for t in TEXTS],
        }
    )


def _sentence_of(text: str, start: int) -> int:
    """Sentence index by the '. ' boundaries of these test texts (no abbreviations cross)."""
    bounds = [i + 2 for i in range(len(text)) if text.startswith(". ", i)]
    bounds = [b for b in bounds if not text[b - 4 : b].endswith(("R. ", "J. "))]
    return int(np.searchsorted(bounds, start, side="right"))


def _spacy_available() -> bool:
    try:
        SpacyExtractor(noun_phrases=False).nlp  # noqa: B018
    except ConfigError:
        return False
    return True


EXTRACTORS = [
    pytest.param(lambda: FastExtractor(), id="fast"),
    pytest.param(
        lambda: SpacyExtractor(),
        id="spacy",
        marks=pytest.mark.skipif(not _spacy_available(), reason="spaCy model not installed"),
    ),
]


@pytest.fixture(scope="module", params=EXTRACTORS)
def result(request) -> tuple[Extractor, Extraction]:
    extractor = request.param()
    return extractor, extractor.extract(_chunks(), offset=100)


def test_protocol_and_schema(result):
    extractor, ex = result
    assert isinstance(extractor, Extractor)
    assert list(ex.mentions.columns) == ["chunk", "name", "label", "start", "end"]
    assert list(ex.relations.columns) == ["chunk", "head", "relation", "tail", "weight"]
    assert set(ex.mentions["chunk"]) == {100, 101, 102}


def test_spans_match_names(result):
    _, ex = result
    m = ex.mentions
    located = m[(m["start"] >= 0) & (m["label"] != "TITLE")]
    assert len(located) > 10
    for row in located.itertuples():
        assert TEXTS[row.chunk - 100][row.start : row.end] == row.name


def test_title_is_an_entity_of_its_chunk(result):
    _, ex = result
    titles = ex.mentions[ex.mentions["label"] == "TITLE"]
    assert titles.set_index("chunk")["name"].to_dict() == {
        100 + i: t for i, t in enumerate(TITLES)
    }
    for row in titles.itertuples():
        text = TEXTS[row.chunk - 100]
        assert text[row.start : row.end].lower() == row.name.lower()


def test_expected_entities(result):
    _, ex = result
    names = set(ex.mentions["name"])
    for expected in ["Jarred Shaw", "September 28, 1990", "J. R. R. Tolkien", "Bloemfontein",
                     "Exeter College", "Oxford", "Apollo 11", "England", "London"]:
        assert expected in names, expected
    assert not names & {"The", "He", "It", "Born", "On"}


def test_relations_within_one_sentence(result):
    _, ex = result
    m = ex.mentions[ex.mentions["start"] >= 0]
    sentences = {
        (row.chunk, row.name): set() for row in m.itertuples()
    }
    for row in m.itertuples():
        sentences[(row.chunk, row.name)].add(_sentence_of(TEXTS[row.chunk - 100], row.start))
    assert len(ex.relations) > 0
    for rel in ex.relations.itertuples():
        assert rel.relation == "co-occurs"
        assert rel.head != rel.tail
        assert sentences[(rel.chunk, rel.head)] & sentences[(rel.chunk, rel.tail)], rel
    pairs = {frozenset((r.head, r.tail)) for r in ex.relations.itertuples()}
    assert frozenset(("Bloemfontein", "Exeter College")) not in pairs  # different sentences
    assert frozenset(("Bloemfontein", "England")) in pairs


def test_weights_are_one_over_n_minus_one(result):
    _, ex = result
    rel = ex.relations
    out = pd.concat([rel[["chunk", "head", "weight"]].rename(columns={"head": "n"}),
                     rel[["chunk", "tail", "weight"]].rename(columns={"tail": "n"})])
    # each name's co-occurrence weight per sentence sums to 1, so per chunk to its sentences
    totals = out.groupby(["chunk", "n"])["weight"].sum()
    assert np.allclose(totals.to_numpy(), np.round(totals.to_numpy()), atol=1e-5)
    assert (rel["weight"] > 0).all() and (rel["weight"] <= 1).all()


def test_fast_extractor_specifics():
    ex = FastExtractor().extract(_chunks())
    m = ex.mentions.set_index("name")
    assert m.loc["Hey Jude", "label"] == "WORK"
    assert m.loc["September 28, 1990", "label"] == "DATE"
    assert m.loc["1968", "label"] == "DATE"
    assert "2015 NBA Development League Draft" in m.index
    assert "Beatles" in m.index  # "The" is not part of a name
    # the title's own occurrence is not duplicated by a regex mention inside it
    c1 = ex.mentions[ex.mentions["chunk"] == 1]
    assert "Lord of the Rings" not in set(c1["name"])


def test_a_lone_capital_letter_is_not_an_entity():
    """"B" of "LL.B" and "G" of "G&CU" are not names: as entities they linked every passage
    with a degree or an abbreviation (a law degree and canon law)."""
    chunks = pd.DataFrame({"chunk_id": ["a"], "title": ["Harris W. Fawell"], "text": [
        "Fawell received his LL.B from Chicago-Kent College of Law. The Galena and Chicago "
        "Union Railroad (G&CU) reached West Chicago in 1849."]})
    ex = FastExtractor().extract(chunks)
    names = set(ex.mentions["name"])
    assert not {n for n in names if len(n) == 1}
    assert {"Chicago-Kent College of Law", "West Chicago"} <= names
    assert ex.stats["dropped_single_letter"] >= 2


def test_title_missing_from_text_and_disambiguation():
    chunks = pd.DataFrame({"chunk_id": ["a", "b"], "title": ["Unun (band)", "Nowhere Else"],
                           "text": ["Unun is a Japanese band from Tokyo.", "Paris is big."]})
    m = FastExtractor().extract(chunks).mentions
    t = m[m["label"] == "TITLE"].set_index("name")
    assert tuple(t.loc["Unun (band)", ["start", "end"]]) == (0, 4)
    assert tuple(t.loc["Nowhere Else", ["start", "end"]]) == (-1, -1)


def test_empty_batch():
    empty = _chunks().iloc[:0]
    ex = FastExtractor().extract(empty, offset=7)
    assert len(ex.mentions) == 0 and len(ex.relations) == 0


def test_cooccurrence_cap_and_pairs():
    chunk = np.zeros(6, dtype=np.int64)
    sentence = np.array([0, 0, 0, 0, 1, -1])
    names = np.array(["a", "b", "c", "a", "d", "e"], dtype=object)
    rel = cooccurrence_relations(chunk, sentence, names, max_per_sentence=24)
    assert sorted(zip(rel["head"], rel["tail"], strict=True)) == [
        ("a", "b"), ("a", "c"), ("b", "c")
    ]
    assert np.allclose(rel["weight"], 0.5)
    capped = cooccurrence_relations(chunk, sentence, names, max_per_sentence=2)
    assert list(zip(capped["head"], capped["tail"], strict=True)) == [("a", "b")]


def test_make_extractor():
    assert isinstance(make_extractor("fast"), FastExtractor)
    assert isinstance(make_extractor("ner"), SpacyExtractor)
    assert make_extractor("spacy-ner").noun_phrases is False
    assert make_extractor("fast").name != make_extractor("fast", max_per_sentence=3).name
    with pytest.raises(ConfigError):
        make_extractor("nope")
