"""Import of precomputed OpenIE triples: mapping to chunks, spans, malformed input."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd
import pytest

from gpurag.extract import Extraction, Extractor, TriplesExtractor, make_extractor
from gpurag.extract.base import COOCCURS
from gpurag.extract.triples import is_date_name

MUSIQUE = Path("/work/shared/data/musique_train100")


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def triples_file(tmp_path: Path) -> Path:
    rows = [
        json.dumps({"id": "d1", "entities": ["Jan Solovej", "University of Copenhagen", 7],
                    "triples": [["Jan Solovej", "works at", "University of Copenhagen"],
                                ["Jan Solovej", "edits"],                       # 2 elements
                                ["A", "b", "c", "d"],                           # 4 elements
                                ["Jan Solovej", "born in", None],               # non-string
                                ["  ", "is", "empty"],                          # empty head
                                "not a list",
                                ["journal of mathematical physics", "published by", "AIP"]]}),
        "{this is not json",
        json.dumps({"entities": ["no id"], "triples": []}),
        json.dumps(["a", "list"]),
        "",
        json.dumps({"id": "d2", "entities": ["Carl Rogers"], "triples": []}),
        json.dumps({"id": "d3", "entities": [], "triples": [["X Corp", "owns", "Y Ltd"]]}),
        json.dumps({"id": "d3", "entities": ["Z"], "triples": [["Y Ltd", "sells", "Z"]]}),
    ]
    return _write(tmp_path / "triples.jsonl", rows)


def _chunks() -> pd.DataFrame:
    return pd.DataFrame({
        "chunk_id": ["d1#0", "d2#0", "d3#0", "d3#1", "d4#0"],
        "doc_id": ["d1", "d2", "d3", "d3", "d4"],
        "title": ["J", "C", "X", "X", "N"],
        "text": [
            "The Journal of Mathematical Physics is edited by Jan Solovej of the "
            "University of Copenhagen.",
            "Carl Rogers developed person-centered therapy.",
            "X Corp owns Y Ltd.",
            "Y Ltd sells Z.",
            "No triples for this one.",
        ],
    })


def test_malformed_rows_are_counted_not_fatal(triples_file, caplog):
    extractor = TriplesExtractor(triples_file)
    assert isinstance(extractor, Extractor)
    with caplog.at_level(logging.WARNING, logger="gpurag.extract.triples"):
        ex = extractor.extract(_chunks())
    assert isinstance(ex, Extraction)
    fs = extractor.file_stats
    assert fs["bad_lines"] == 3  # invalid JSON, no id, not an object
    assert fs["malformed_triples"] == 5
    assert fs["malformed_entities"] == 1
    assert fs["duplicate_ids"] == 1
    assert fs["triples"] == 4
    assert ex.stats["file_bad_lines"] == 3
    assert ex.stats["malformed_triples"] == 5  # all from d1, the batch's only d1 chunk
    assert ex.stats["chunks_without_row"] == 1
    assert ex.stats["chunks_without_triples"] == 1
    text = caplog.text
    assert f"{triples_file}:2" in text and f"{triples_file}:3" in text
    assert f"{triples_file}:4" in text
    assert "malformed triples" in text


def test_relations_and_mentions(triples_file):
    ex = TriplesExtractor(triples_file, base="").extract(_chunks(), offset=10)
    rel = ex.relations
    d1 = rel[rel["chunk"] == 10]
    assert set(zip(d1["head"], d1["relation"], d1["tail"], strict=True)) == {
        ("Jan Solovej", "works at", "University of Copenhagen"),
        ("journal of mathematical physics", "published by", "AIP"),
    }
    assert (rel["weight"] == 1).all()
    # every chunk of d3 gets both rows of the duplicated id
    for chunk in (12, 13):
        assert len(rel[rel["chunk"] == chunk]) == 2
    titles = ex.mentions[ex.mentions["label"] == "TITLE"]
    chunks = _chunks()
    titled = chunks["title"].fillna("").astype(str).str.strip() != ""
    # every titled chunk mentions its own title, as with the rule-based extractors
    assert sorted(titles["chunk"] - 10) == list(chunks.index[titled])
    m = ex.mentions[ex.mentions["label"] != "TITLE"]
    text = _chunks()["text"][0]
    d1m = m[m["chunk"] == 10].set_index("name")
    assert set(d1m.index) == {"Jan Solovej", "University of Copenhagen",
                              "journal of mathematical physics", "AIP"}
    s, e = d1m.loc["journal of mathematical physics", ["start", "end"]]
    assert text[s:e] == "Journal of Mathematical Physics"  # case-insensitive span
    s, e = d1m.loc["Jan Solovej", ["start", "end"]]
    assert text[s:e] == "Jan Solovej"
    assert tuple(d1m.loc["AIP", ["start", "end"]]) == (-1, -1)
    assert (m["label"] == "").all()
    assert "Carl Rogers" in set(m[m["chunk"] == 11]["name"])


def test_file_stats_only_in_first_batch(triples_file):
    extractor = TriplesExtractor(triples_file, base="")
    chunks = _chunks()
    first = extractor.extract(chunks.iloc[:2].reset_index(drop=True), offset=0)
    second = extractor.extract(chunks.iloc[2:].reset_index(drop=True), offset=2)
    assert first.stats["file_bad_lines"] == 3
    assert "file_bad_lines" not in second.stats
    both = Extraction.concat([first, second])
    assert both.stats["file_bad_lines"] == 3
    untitled = both.mentions[both.mentions["label"] != "TITLE"]
    assert set(untitled["chunk"]) == {0, 1, 2, 3}


def test_chunk_id_fallback_and_registry(triples_file):
    chunks = _chunks().drop(columns="doc_id").assign(chunk_id=["d1", "d2", "d3", "zz", "d4"])
    extractor = make_extractor("triples", path=triples_file)
    ex = extractor.extract(chunks)
    typed = ex.relations[ex.relations["relation"] != COOCCURS]
    assert set(typed["chunk"]) == {0, 2}
    assert extractor.name.startswith("triples-v2(triples.jsonl")
    assert extractor.name.endswith("base=fast)")


def test_triples_add_to_the_rule_based_names_and_relations(tmp_path):
    """The LLM row leaves out a name the text has and spells the page's subject without its
    disambiguation: the rule-based names (the title, "West Chicago") and their co-occurrence
    relations stay, the typed triples come on top, and the LLM's dates are labelled DATE."""
    path = _write(tmp_path / "t.jsonl", [json.dumps({
        "id": "d1", "entities": ["Harris W. Fawell", "1929"],
        "triples": [["Harris W. Fawell", "born in", "1929"],
                    ["Harris W. Fawell", "member of", "House of Representatives"]]})])
    chunks = pd.DataFrame({
        "chunk_id": ["d1#0"], "doc_id": ["d1"], "title": ["Harris W. Fawell (politician)"],
        "text": ["Harris W. Fawell was born in West Chicago in 1929. He served in the House "
                 "of Representatives."]})
    ex = TriplesExtractor(path).extract(chunks)
    names = set(ex.mentions["name"])
    assert {"West Chicago", "Harris W. Fawell (politician)", "House of Representatives"} <= names
    rel = ex.relations
    typed = set(zip(rel["head"], rel["relation"], rel["tail"], strict=True))
    assert ("Harris W. Fawell", "member of", "House of Representatives") in typed
    cooc = rel[rel["relation"] == COOCCURS]
    assert "West Chicago" in set(cooc["head"]) | set(cooc["tail"])
    labels = {n: set(g) for n, g in ex.mentions.groupby("name")["label"]}
    assert labels["1929"] == {"DATE"}
    assert "DATE" not in labels["Harris W. Fawell"]
    # without the base only the triples and the title remain
    alone = TriplesExtractor(path, base="").extract(chunks)
    assert "West Chicago" not in set(alone.mentions["name"])
    assert not (alone.relations["relation"] == COOCCURS).any()


def test_date_names():
    dates = ["1963", "1940s", "21 January 2000", "1839 -- 1842", "March 1999", "97,524",
             "c. 1200 BC", "February", "January 24–25, 2000"]
    names = ["Theresa May", "2018 Winter Olympics", "Apollo 11", "World War II", "of the",
             "70,446 acres", ""]
    assert is_date_name(dates).all()
    assert not is_date_name(names).any()


@pytest.mark.skipif(not (MUSIQUE / "triples.jsonl").exists(), reason="shared data absent")
def test_musique_triples():
    path = MUSIQUE / "triples.jsonl"
    good = bad = 0
    ids = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        ids.append(row["id"])
        for t in row["triples"]:
            ok = isinstance(t, list) and len(t) == 3
            ok = ok and all(isinstance(x, str) and x.strip() for x in t)
            good += ok
            bad += not ok
    corpus = pd.read_json(MUSIQUE / "corpus.jsonl", lines=True, dtype={"id": str})
    chunks = corpus.rename(columns={"id": "doc_id"}).assign(chunk_id=lambda f: f["doc_id"])
    extractor = TriplesExtractor(path)
    parts = [extractor.extract(chunks.iloc[i : i + 500].reset_index(drop=True), offset=i)
             for i in range(0, len(chunks), 500)]
    ex = Extraction.concat(parts)
    assert bad > 0
    assert ex.stats["malformed_triples"] == bad
    assert (ex.relations["relation"] != COOCCURS).sum() == good
    assert ex.stats["file_bad_lines"] == 0
    assert ex.stats["chunks_without_row"] == len(set(chunks["doc_id"]) - set(ids))
    located = ex.mentions[ex.mentions["start"] >= 0]
    assert len(located) > 0.7 * len(ex.mentions)
    texts = chunks["text"].to_numpy()
    # (a title mention's span is the title without its qualifier: "Westerpark (park)")
    sample = located[located["label"] != "TITLE"].sample(200, random_state=0)
    for row in sample.itertuples():
        assert texts[row.chunk][row.start : row.end].lower() == row.name.lower()
