"""What ingest reports: duplicate ids, non-string text, truncated or corrupt compressed files,
dangling links; and corpus or question text printed to a terminal with its control characters
escaped (JSON output exact)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from gpurag.cli import main
from gpurag.errors import InputError
from gpurag.ingest import IngestReport, iter_documents
from gpurag.terminal import safe

REPO = Path(__file__).resolve().parents[2]
ESC = "\x1b"


def _jsonl(path: Path, records: list, gz: bool = False) -> Path:
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _read(source) -> tuple[list, IngestReport]:
    report = IngestReport()
    return list(iter_documents(source, report)), report


def _records(n: int, prefix: str = "d") -> list[dict]:
    return [{"id": f"{prefix}{i}", "title": f"T{i}",
             "text": f"Record {i} is about the harbour town number {i}. " * 3} for i in range(n)]


# -- duplicate ids -------------------------------------------------------------------------

def test_duplicate_ids_keep_the_first_and_are_reported(tmp_path):
    root = tmp_path / "c"
    _jsonl(root / "a.jsonl", [{"id": "x", "text": "first x"}, {"id": "y", "text": "only y"},
                              {"id": "x", "text": "second x"}])
    _jsonl(root / "b.jsonl", [{"id": "x", "text": "third x"}, {"id": "z", "text": "only z"}])
    docs, report = _read(root)
    assert [(d.doc_id, d.text) for d in docs] == [("x", "first x"), ("y", "only y"),
                                                  ("z", "only z")]
    assert report.skipped["duplicate id"] == 2
    assert report.documents == 3
    problems = "\n".join(report.problems)
    assert f"{root / 'a.jsonl'}:3: skipped (duplicate id)" in problems
    assert f"{root / 'b.jsonl'}:1: skipped (duplicate id)" in problems
    assert "'x'" in problems


def test_duplicate_ids_are_not_indexed_twice(tmp_path, capsys):
    src = _jsonl(tmp_path / "docs.jsonl", [
        {"id": "a", "text": "The lighthouse keeper of Varnholm kept a log of every ship."},
        {"id": "a", "text": "An entirely different text about glass furnaces in Orrel."},
        {"id": "b", "text": "The third document talks about tides and moons."}])
    out = tmp_path / "index"
    assert main(["index", str(src), "-o", str(out), "--no-graph"]) == 0
    printed = capsys.readouterr().out
    assert "1 duplicate id" in printed and f"{src}:2" in printed
    from gpurag import Index

    index = Index.open(out)
    assert sorted(set(index.chunks["doc_id"])) == ["a", "b"]
    assert not index.chunks["text"].str.contains("glass furnaces").any()
    assert index.manifest.extra["ingest"]["skipped"]["duplicate id"] == 1
    assert index.manifest.counts["documents"] == 2


# -- text of the wrong type ----------------------------------------------------------------

@pytest.mark.parametrize("value,kind", [(42, "int"), (3.5, "float"), (["a"], "list"),
                                        ({"t": 1}, "dict"), (True, "bool")])
def test_text_of_another_type_is_not_a_string(tmp_path, value, kind):
    src = _jsonl(tmp_path / "d.jsonl", [{"id": "n", "text": value}, {"id": "ok", "text": "fine"}])
    docs, report = _read(src)
    assert [d.doc_id for d in docs] == ["ok"]
    assert dict(report.skipped) == {"text not a string": 1}
    assert f"{src}:1: skipped (text not a string): got {kind}" in report.problems[0]
    assert "missing" not in report.problems[0]


def test_missing_and_null_text_are_missing(tmp_path):
    src = _jsonl(tmp_path / "d.jsonl", [{"id": "a"}, {"id": "b", "text": None},
                                        {"id": "c", "text": " "}])
    _, report = _read(src)
    assert dict(report.skipped) == {"missing text": 2, "empty text": 1}


# -- truncated and corrupt compressed files ------------------------------------------------

def test_truncated_gzip_reports_records_read_and_keeps_them(tmp_path):
    full = _jsonl(tmp_path / "full.jsonl.gz", _records(400), gz=True).read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(full[: len(full) // 2])
    docs, report = _read(cut)
    assert 0 < len(docs) < 400
    assert [d.doc_id for d in docs] == [f"d{i}" for i in range(len(docs))]
    assert report.warnings["truncated file"] == 1
    assert "unreadable file" not in report.skipped
    message = report.problems[-1]
    assert message.startswith(f"{cut}: truncated file: {len(docs)} records read")
    assert report.as_dict()["warnings"] == {"truncated file": 1}


def test_truncated_gzip_through_the_cli(tmp_path, capsys):
    root = tmp_path / "corpus"
    full = gzip.compress("".join(json.dumps(r) + "\n" for r in _records(300)).encode())
    root.mkdir()
    (root / "cut.jsonl.gz").write_bytes(full[: len(full) * 2 // 3])
    assert main(["index", str(root), "-o", str(tmp_path / "index"), "--no-graph"]) == 0
    out = capsys.readouterr().out
    assert "warnings: 1 truncated file" in out
    assert "truncated file:" in out and "records read before the truncation" in out
    assert "unreadable" not in out


def _corrupt_mid_stream(data: bytes) -> bytes:
    """A gzip of ``data`` with one byte changed so that decompressing fails part way with a
    zlib error (not at the final CRC check)."""
    gz = gzip.compress(data, compresslevel=9)
    for pos in range(len(gz) // 2, len(gz) - 8):
        bad = bytearray(gz)
        bad[pos] ^= 0xFF
        try:
            gzip.decompress(bytes(bad))
        except zlib.error:
            return bytes(bad)
        except Exception:
            continue
    raise AssertionError("no single-byte change gave a zlib error")


def test_corrupt_gzip_after_good_records_drops_the_member_not_a_crash(tmp_path):
    """Records decompressed from a member that then fails are not trusted (issue 28, item 8:
    they used to be kept "before the damage"): dropped and counted, no crash."""
    data = "".join(json.dumps(r) + "\n" for r in _records(300)).encode()
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(_corrupt_mid_stream(data))
    docs, report = _read(bad)  # used to raise zlib.error out of the reader
    assert docs == []
    assert report.skipped["damaged gzip member"] > 0 and not report.warnings
    assert f"{bad}: skipped (damaged gzip member):" in report.problems[-1]
    assert "before the damage" not in report.problems[-1]


def test_not_gzip_at_all_is_still_unreadable(tmp_path):
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"plain bytes")
    _jsonl(tmp_path / "ok.jsonl", [{"id": "ok", "text": "fine"}])
    docs, report = _read(tmp_path)
    assert [d.doc_id for d in docs] == ["ok"]
    assert report.skipped["unreadable file"] == 1 and not report.warnings


# -- dangling links ------------------------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_dangling_links_are_counted_and_named(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    (root / "good.txt").write_text("A good file about bridges.", encoding="utf-8")
    os.symlink(tmp_path / "gone.txt", root / "lost.txt")
    os.symlink(tmp_path / "gone-folder", root / "lost-folder")
    (root / "ok-link.txt").symlink_to(root / "good.txt")
    docs, report = _read(root)
    assert sorted(d.doc_id for d in docs) == ["good.txt", "ok-link.txt"]
    assert report.warnings["dangling link"] == 2
    problems = "\n".join(report.problems)
    assert f"{root / 'lost.txt'}: dangling link" in problems and "gone.txt" in problems
    assert f"{root / 'lost-folder'}: dangling link" in problems
    assert "2 dangling link" in report.summary()


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_only_dangling_links_is_a_clear_error(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    os.symlink(tmp_path / "gone.txt", root / "lost.txt")
    with pytest.raises(InputError, match="1 dangling links"):
        _read(root)
    os.symlink(tmp_path / "nothing", tmp_path / "src-link")
    with pytest.raises(InputError, match="dangling link"):
        _read(tmp_path / "src-link")


# -- control characters on the terminal ----------------------------------------------------

def test_safe_escapes_controls_and_direction_overrides():
    assert safe("a\x1b[31mb\rc\x07d\x9be\u202ef\tg") == "a\\x1b[31mb\\x0dc\\x07d\\x9be\\u202ef\tg"
    assert safe("one\ntwo") == "one\\x0atwo"
    assert safe("one\ntwo", keep_newlines=True) == "one\ntwo"
    assert safe("plain – ünïcode ✓") == "plain – ünïcode ✓"


EVIL_TITLE = "Harbour\x1b]0;pwned\x07 \x1b[2J"
EVIL_TEXT = "The harbour of Varnholm\r\x1b[1A freezes every winter and ships wait for spring."


@pytest.fixture(scope="module")
def evil_index(tmp_path_factory):
    from gpurag import Index

    root = tmp_path_factory.mktemp("evil")
    src = _jsonl(root / "docs.jsonl", [
        {"id": "evil\x1b[31m", "title": EVIL_TITLE, "text": EVIL_TEXT},
        {"id": "calm", "title": "Calm", "text": "Glass furnaces of Orrel burn all year."}])
    return Index.build(src, root / "index", graph=False, show_progress=False).path


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0]


def test_query_output_escapes_controls_from_corpus_and_question(evil_index, capsys):
    question = "When does the harbour\x1b[2K freeze?\r"
    assert main(["query", str(evil_index), question, "--mode", "dense", "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert _raw_controls(out) == []
    assert "harbour\\x1b[2K freeze?\\x0d" in out
    assert "evil\\x1b[31m" in out and "Harbour\\x1b]0;pwned\\x07" in out


def test_json_output_stays_exact(evil_index, capsys):
    question = "When does the harbour\x1b[2K freeze?"
    assert main(["query", str(evil_index), question, "--json", "--mode", "dense"]) == 0
    result = json.loads(capsys.readouterr().out)[0]
    assert result["question"] == question
    top = {p["doc_id"]: p for p in result["passages"]}["evil\x1b[31m"]
    assert top["title"] == EVIL_TITLE and top["text"] == EVIL_TEXT


def test_index_report_and_errors_escape_controls(tmp_path, capsys):
    root = tmp_path / "c"
    name = "bad\x1b[31mname.jsonl"
    (root).mkdir()
    (root / name).write_bytes(b'{"id": "a", "text": "fine text here"}\n{broken\n')
    assert main(["index", str(root), "-o", str(tmp_path / "index"), "--no-graph"]) == 0
    out = capsys.readouterr().out
    assert "bad\\x1b[31mname.jsonl:2: skipped (broken JSON)" in out
    assert _raw_controls(out) == []
    code = main(["query", str(tmp_path / "index"), "q", "--questions-file",
                 str(tmp_path / "no\x1b[2Jfile")])
    err = capsys.readouterr().err
    assert code == 2 and _raw_controls(err) == [] and "no\\x1b[2Jfile" in err


def test_logged_warnings_escape_controls(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    (root / "evil\x1b[2J.jsonl").write_bytes(b'{"id": "a", "text": "fine text"}\n[1]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPURAG_")}
    env["GPURAG_PROGRESS"] = "0"
    proc = subprocess.run([sys.executable, "-m", "gpurag", "index", str(root), "-o",
                           str(tmp_path / "index"), "--no-graph"], capture_output=True,
                          env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert b"evil\\x1b[2J.jsonl:2: skipped (not a JSON object)" in proc.stderr
    assert b"\x1b" not in proc.stderr and b"\x1b" not in proc.stdout
