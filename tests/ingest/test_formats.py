"""Document formats: one real file per format (tests/data/formats) read, indexed and counted;
an unsupported file or a missing extra is reported and counted, never skipped silently."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from gpurag.ingest import IngestReport, iter_documents
from gpurag.ingest.formats import ReadOptions
from gpurag.ingest.formats.markup import preview_text, strip_markup
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "formats"
EXTRA_MODULES = ("pypdfium2", "trafilatura", "docx")


def _need_extra() -> None:
    for module in EXTRA_MODULES:
        pytest.importorskip(module, reason="needs gpurag[formats]")


def _read(source, **options) -> tuple[dict, IngestReport]:
    report = IngestReport()
    read = ReadOptions(**options)
    docs = {d.doc_id: d for d in iter_documents(source, report, options=read)}
    return docs, report


def test_every_format_is_read_with_its_main_text_and_title():
    _need_extra()
    docs, report = _read(DATA, text_column="body")
    assert set(docs) == {"bellrock.pdf", "lighthouse.html", "eddystone.docx", "stevenson.rst",
                         "keepers.md", "fl1", "fl2", "pq1", "pq2"}
    pdf, page, word = docs["bellrock.pdf"], docs["lighthouse.html"], docs["eddystone.docx"]
    assert pdf.title == "The Bell Rock Lighthouse"
    assert "Inchcape reef" in pdf.text and "dovetailed into one another" in pdf.text
    assert "\r" not in pdf.text and "\ufb00" not in pdf.text  # no CR, no "ff" ligature
    assert page.title == "The Skerryvore Lighthouse"
    assert "hyperbolic curve" in page.text and "automated in 1994" in page.text
    for chrome in ("Gift shop", "Sign in", "Search the archive", "newsletter", "Cookie",
                   "Popular pages"):
        assert chrome not in page.text, f"page chrome {chrome!r} kept"
    assert word.title == "Eddystone Lighthouse"
    assert "hydraulic lime, a concrete" in word.text  # runs of one paragraph joined
    assert "Smeaton | 1759" in word.text  # table rows as cells
    assert word.text.index("Smeaton's Tower") < word.text.index("Smeaton | 1759")
    rst, md = docs["stevenson.rst"], docs["keepers.md"]
    assert rst.title == "The Stevenson Family" and rst.markup == "rst"
    assert rst.text == (DATA / "stevenson.rst").read_text(encoding="utf-8")  # kept as written
    assert md.title == "Lighthouse Keepers" and md.markup == "markdown"
    assert docs["fl1"].title == "Fastnet" and "Cornish granite" in docs["fl1"].text
    assert docs["pq2"].title == "Wolf Rock" and "1869" in docs["pq2"].text
    assert report.files == 8 and report.documents == 9
    assert dict(report.skipped) == {"unsupported format": 1}
    assert any("survey.xyz" in p and ".xyz" in p for p in report.problems)


def test_table_without_the_chosen_column_is_reported_with_its_columns(tmp_path):
    shutil.copy(DATA / "lights.csv", tmp_path / "lights.csv")
    shutil.copy(DATA / "rocks.parquet", tmp_path / "rocks.parquet")
    docs, report = _read(tmp_path)  # text_column "text": neither table has it
    assert docs == {}
    assert report.skipped["no 'text' column"] == 2
    assert any("lights.csv" in p and "id, title, body, county" in p and "--text-column" in p
               for p in report.problems)


def test_missing_extra_is_reported_and_counted(tmp_path, monkeypatch):
    for name in ("bellrock.pdf", "lighthouse.html", "keepers.md"):
        shutil.copy(DATA / name, tmp_path / name)
    for module in EXTRA_MODULES:  # as if gpurag[formats] were not installed
        monkeypatch.setitem(sys.modules, module, None)
    docs, report = _read(tmp_path)
    assert set(docs) == {"keepers.md"}
    assert report.skipped["needs gpurag[formats]"] == 2
    assert any("bellrock.pdf" in p and "pip install 'gpurag[formats]'" in p
               for p in report.problems)
    assert "2 skipped (2 needs gpurag[formats])" in report.summary()


def test_damaged_files_of_each_format_are_reported(tmp_path):
    _need_extra()
    for name in ("bad.pdf", "bad.docx"):
        (tmp_path / name).write_bytes(b"PK\x03\x04 this is not a real file")
    (tmp_path / "blank.html").write_text("<html><body><p> </p></body></html>",
                                         encoding="utf-8")
    docs, report = _read(tmp_path)
    assert docs == {}
    assert report.skipped["unreadable file"] == 2 and report.skipped["empty text"] == 1
    assert any("bad.pdf" in p and "not a readable PDF" in p for p in report.problems)


def test_markup_is_stripped_for_embedding_and_previews_only():
    md = (DATA / "keepers.md").read_text(encoding="utf-8")
    plain = strip_markup(md, "markdown")
    for mark in ("#", "**", "](", "`", "> "):
        assert mark not in plain, mark
    assert "Keepers worked in watches through the night" in plain
    assert "See the Bell Rock log for" in plain
    rst = strip_markup((DATA / "stevenson.rst").read_text(encoding="utf-8"), "rst")
    for mark in ("====", "**", "``", ":ref:", ".. ", "<https"):
        assert mark not in rst, mark
    assert "for the Northern Lighthouse Board." in rst and "the dioptric lens" in rst
    # the preview of a passage neither shows the markup nor repeats the title
    assert preview_text("Haymo of Faversham",
                        "# Haymo of Faversham\n\nHaymo was an **English** friar.") == \
        "Haymo was an English friar."
    assert preview_text("T", "plain text, *not* touched", "") == "plain text, *not* touched"


def test_folder_of_every_format_indexes_with_counts_in_the_summary(tmp_path):
    """The command line: documents and the skipped-file report in the summary; markup
    stripped from what was embedded, the chunk text and its span still the file's own."""
    _need_extra()
    import numpy as np

    from gpurag import Index
    from gpurag.pipeline.chunk_embed import embed_text
    from tests.foundation.test_cli import gpurag

    out = tmp_path / "idx"
    proc = gpurag("index", DATA, "-o", out, "--no-graph", "--text-column", "body")
    assert proc.returncode == 0, proc.stderr
    assert "documents: 9" in proc.stdout
    assert "skipped: 1 unsupported format" in proc.stdout
    assert "survey.xyz" in proc.stdout
    index = Index.open(out)
    chunks = index.chunks
    assert set(chunks["doc_id"]) >= {"bellrock.pdf", "lighthouse.html", "eddystone.docx",
                                     "stevenson.rst", "keepers.md", "fl1", "pq1"}
    row = chunks[chunks["doc_id"] == "keepers.md"].iloc[0]
    source = (DATA / "keepers.md").read_text(encoding="utf-8")
    assert source[row["char_start"]:row["char_end"]] == row["text"]  # spans into the file
    stored = index.passage_vectors()[chunks.index[chunks["doc_id"] == "keepers.md"][0]]
    stripped, raw = index.embedder.encode([embed_text(row["title"], row["text"], "markdown"),
                                           embed_text(row["title"], row["text"])])
    assert float(np.dot(stored, stripped)) > 0.99
    assert float(np.dot(stored, stripped)) > float(np.dot(stored, raw)) + 0.005
    hits = index.query("Which engineer designed Skerryvore?", k=3, mode="dense")
    assert {p.doc_id for p in hits.passages} & {"lighthouse.html", "stevenson.rst"}


def test_single_file_of_a_format_is_accepted(tmp_path):
    _need_extra()
    docs, report = _read(DATA / "eddystone.docx")
    assert list(docs) == ["eddystone.docx"] and report.files == 1


def test_readme_names_the_formats_extra():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "gpurag[formats]" in readme
    assert "formats" in (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert Path(REPO / "pyproject.toml").read_text(encoding="utf-8").count("formats = [") == 1
