"""Reading documents: every format, every kind of bad record, clear errors for bad sources."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpurag.errors import InputError
from gpurag.ingest import IngestReport, iter_documents, list_input_files
from tests.conftest import write_jsonl


def _read(source) -> tuple[list, IngestReport]:
    report = IngestReport()
    docs = list(iter_documents(source, report))
    return docs, report


@pytest.fixture
def mixed_folder(tmp_path) -> Path:
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / "plain.txt").write_text("Plain text about rivers and boats.\n", encoding="utf-8")
    (root / "sub" / "notes.md").write_text(
        "\n# Harbour Notes\n\nThe harbour freezes in winter.\n", encoding="utf-8")
    (root / "nohead.md").write_text("No heading here, just text.\n", encoding="utf-8")
    (root / "bom.txt").write_bytes("\ufeffText with a byte order mark.".encode())
    write_jsonl(root / "a.jsonl", [
        {"id": "j1", "title": "J one", "text": "First jsonl record."},
        {"doc_id": "j2", "text": "Second record, doc_id key, no title."},
        {"text": "Third record without any id."},
    ])
    write_jsonl(root / "b.jsonl.gz", [
        {"id": "g1", "title": "G one", "text": "Gzipped record one."},
        {"id": "g2", "title": "G two", "text": "Gzipped record two."},
    ], gz=True)
    pq.write_table(pa.table({
        "id": ["q1", "q2"], "title": ["P one", "P two"],
        "text": ["Parquet row one.", "Parquet row two."],
    }), root / "c.parquet")
    (root / "d.csv").write_text("id,text\nx,a CSV row\n", encoding="utf-8")
    return root


def test_mixed_folder_reads_every_format(mixed_folder):
    docs, report = _read(mixed_folder)
    by_id = {d.doc_id: d for d in docs}
    assert len(by_id) == len(docs), "doc ids must be unique"
    assert set(by_id) == {
        "plain.txt", os.path.join("sub", "notes.md"), "nohead.md", "bom.txt",
        "j1", "j2", "a.jsonl#3", "g1", "g2", "q1", "q2", "x",
    }
    assert by_id["plain.txt"].title == "plain"
    assert by_id["plain.txt"].text == "Plain text about rivers and boats.\n"
    assert by_id[os.path.join("sub", "notes.md")].title == "Harbour Notes"
    assert by_id["nohead.md"].title == "nohead"
    assert by_id["bom.txt"].text == "Text with a byte order mark."
    assert by_id["j1"].title == "J one"
    assert by_id["j2"].title == ""
    assert by_id["g2"].text == "Gzipped record two."
    assert by_id["q1"].title == "P one" and by_id["q2"].text == "Parquet row two."
    assert by_id["g1"].source.endswith("b.jsonl.gz")
    assert by_id["x"].text == "a CSV row"
    assert report.files == 6 + 2  # 3 text + 1 md in sub + jsonl + gz + parquet + csv
    assert report.documents == len(docs)
    assert sum(report.skipped.values()) == 0
    assert report.problems == []


def test_list_input_files_is_sorted_and_filtered(mixed_folder):
    (mixed_folder / ".hidden.txt").write_text("hidden", encoding="utf-8")
    (mixed_folder / "photo.png").write_bytes(b"\x89PNG")
    files = list_input_files(mixed_folder)
    assert files == sorted(files)
    assert not any(f.name.startswith(".") for f in files)
    # an unsupported file is listed, so that reading it reports and counts it
    assert len(files) == 9 and mixed_folder / "photo.png" in files


@pytest.fixture
def bad_folder(tmp_path) -> Path:
    root = tmp_path / "bad"
    root.mkdir()
    lines = [
        b'{"id": "ok1", "text": "good one"}',            # 1
        b'{"id": "latin", "text": "caf\xe9"}',            # 2 not UTF-8
        b'{"id": "broken", "text": "no end"',              # 3 broken JSON
        b'[1, 2, 3]',                                      # 4 not an object
        b'{"id": "notext"}',                               # 5 missing text
        b'{"id": "empty", "text": "   \\n "}',             # 6 empty text
        b'',                                               # 7 blank line: ignored silently
        b'{"id": "num", "text": 42}',                      # 8 text not a string
        b'"just a string"',                                # 9 not an object
        b'{"id": "ok2", "text": "good two"}',             # 10
    ]
    (root / "bad.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (root / "latin1.txt").write_bytes("Ein M\u00e4dchen".encode("latin-1"))
    (root / "empty.txt").write_bytes(b"  \n\t")
    (root / "good.txt").write_text("A good plain file.", encoding="utf-8")
    (root / "corrupt.jsonl.gz").write_bytes(b"this is not gzip data at all")
    (root / "corrupt.parquet").write_bytes(b"PAR1 not really parquet")
    pq.write_table(pa.table({"id": ["r1", "r2", "r3"], "text": ["row one", None, "  "]}),
                   root / "rows.parquet")
    pq.write_table(pa.table({"id": ["x"], "body": ["no text column"]}), root / "notext.parquet")
    return root


def test_bad_records_are_skipped_counted_and_located(bad_folder):
    docs, report = _read(bad_folder)
    assert sorted(d.doc_id for d in docs) == ["good.txt", "ok1", "ok2", "r1"]
    assert dict(report.skipped) == {
        "not UTF-8": 2,              # bad.jsonl:2 and latin1.txt
        "broken JSON": 1,
        "not a JSON object": 2,
        "missing text": 2,           # line 5 + parquet row 2
        "empty text": 3,             # line 6, empty.txt, parquet row 3
        "text not a string": 1,      # line 8
        "unreadable file": 2,        # corrupt gz and corrupt parquet
        "no 'text' column": 1,
    }
    assert report.documents == 4
    problems = "\n".join(report.problems)
    for where, reason in [
        ("bad.jsonl:2:", "not UTF-8"), ("bad.jsonl:3:", "broken JSON"),
        ("bad.jsonl:4:", "not a JSON object"), ("bad.jsonl:5:", "missing text"),
        ("bad.jsonl:6:", "empty text"), ("bad.jsonl:8:", "text not a string"),
        ("bad.jsonl:9:", "not a JSON object"), ("latin1.txt:", "not UTF-8"),
        ("empty.txt:", "empty text"), ("corrupt.jsonl.gz:", "unreadable file"),
        ("corrupt.parquet:", "unreadable file"), ("rows.parquet:row 2:", "missing text"),
        ("rows.parquet:row 3:", "empty text"), ("notext.parquet:", "no 'text' column"),
    ]:
        assert any(where in p and reason in p for p in report.problems), (where, problems)
    assert not any("bad.jsonl:7" in p for p in report.problems), "blank lines are not problems"
    assert len(report.problems) == sum(report.skipped.values())
    summary = report.summary()
    assert "4 documents" in summary and f"{sum(report.skipped.values())} skipped" in summary
    d = report.as_dict()
    assert d["documents"] == 4 and d["skipped"] == dict(report.skipped)


def test_bad_lines_logged_as_warnings(bad_folder, caplog):
    with caplog.at_level("WARNING", logger="gpurag.ingest.readers"):
        _read(bad_folder / "bad.jsonl")
    assert any("bad.jsonl:3" in r.getMessage() for r in caplog.records)


def test_single_file_source_and_id_fallback(bad_folder):
    docs, report = _read(bad_folder / "bad.jsonl")
    assert [d.doc_id for d in docs] == ["ok1", "ok2"]
    assert report.files == 1


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root can read a chmod 000 file")
def test_unreadable_file_is_skipped(tmp_path):
    root = tmp_path / "perm"
    root.mkdir()
    write_jsonl(root / "a.jsonl", [{"id": "a", "text": "readable"}])
    locked = write_jsonl(root / "locked.jsonl", [{"id": "b", "text": "locked away"}])
    (root / "locked.txt").write_text("locked text", encoding="utf-8")
    locked.chmod(0)
    (root / "locked.txt").chmod(0)
    try:
        docs, report = _read(root)
    finally:
        locked.chmod(0o644)
        (root / "locked.txt").chmod(0o644)
    assert [d.doc_id for d in docs] == ["a"]
    assert report.skipped["unreadable file"] == 2
    assert any("locked.jsonl" in p for p in report.problems)
    assert any("locked.txt" in p for p in report.problems)


def test_unreadable_text_file_simulated(tmp_path, monkeypatch):
    """The unreadable-file path for plain text, independent of the user running the tests."""
    root = tmp_path / "perm"
    root.mkdir()
    (root / "a.txt").write_text("fine", encoding="utf-8")
    (root / "b.txt").write_text("denied", encoding="utf-8")
    real = Path.read_bytes

    def read_bytes(self):
        if self.name == "b.txt":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    docs, report = _read(root)
    assert [d.doc_id for d in docs] == ["a.txt"]
    assert report.skipped["unreadable file"] == 1
    assert any("b.txt" in p and "Permission denied" in p for p in report.problems)


def test_empty_folder_is_an_input_error(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"no readable files under .*gpurag reads \.txt, \.md"):
        list(iter_documents(empty))


def test_folder_without_supported_files_is_an_input_error(tmp_path):
    root = tmp_path / "csvs"
    root.mkdir()
    (root / "x.dat").write_text("a,b\n", encoding="utf-8")
    with pytest.raises(InputError, match=str(root.name)):
        list(iter_documents(root))


def test_missing_path_is_an_input_error(tmp_path):
    missing = tmp_path / "does-not-exist"
    with pytest.raises(InputError, match="input not found") as info:
        list(iter_documents(missing))
    assert "does-not-exist" in str(info.value)


def test_unsupported_single_file_is_an_input_error(tmp_path):
    f = tmp_path / "data.dat"
    f.write_text("a,b\n", encoding="utf-8")
    with pytest.raises(InputError, match="unsupported input file type"):
        list(iter_documents(f))


def test_build_with_no_usable_text_is_an_input_error(tmp_path):
    from gpurag import Index

    src = tmp_path / "src"
    src.mkdir()
    write_jsonl(src / "all_bad.jsonl", [{"id": "a"}, {"id": "b", "text": ""}])
    out = tmp_path / "out"
    with pytest.raises(InputError, match="no usable text"):
        Index.build(src, out, graph=False, show_progress=False)
    assert not out.exists()


def test_jsonl_with_byte_order_mark(tmp_path):
    f = tmp_path / "bom.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"id": "a", "text": "first"}\n{"id": "b", "text": "second"}\n')
    docs, _ = _read(f)
    assert [d.doc_id for d in docs] == ["a", "b"]
