"""Hostile records skip with a message naming file and line, never fail a build (issue 28,
items 5, 6, 7, 8 and the low items on bytes titles and "0 duplicate chunks").
"""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpurag import Index
from gpurag.config import IndexConfig
from gpurag.ingest import IngestReport, iter_documents

LONG = " ".join(f"Sentence {i} tells of the harbour of Varnholt and its boats." for i in range(200))
DENSE = IndexConfig(graph=False, ingest_batch_chunks=2)  # one document part a batch


def _read(source) -> tuple[list, IngestReport]:
    report = IngestReport()
    return list(iter_documents(source, report)), report


def _lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# -- item 5: a batch whose chunks are all duplicates ---------------------------------------

def test_a_batch_of_only_duplicate_chunks_builds(tmp_path):
    """Two identical long documents under different ids: the second one's batch holds only
    duplicates (an empty checkpoint part), which used to fail with an Arrow schema error."""
    corpus = _lines(tmp_path / "c.jsonl", [json.dumps({"id": i, "title": "T", "text": LONG})
                                           for i in ("a", "b")])
    with Index.build(corpus, tmp_path / "ix", config=DENSE, show_progress=False) as ix:
        assert set(ix.chunks["doc_id"]) == {"a"}
        skipped = ix.info()["extra"]["ingest"]["skipped"]
        assert skipped["duplicate chunks"] == len(ix.chunks)


def test_resume_reads_an_empty_part_an_older_build_left(tmp_path):
    """A work folder with an empty part written the old way (null-typed text columns)."""
    from gpurag.pipeline.chunk_embed import CHUNK_COLUMNS, _read_parts
    from gpurag.pipeline.workdir import WorkDir

    work = WorkDir(tmp_path / "ix", "key")
    good = pa.table({"chunk_id": ["c1"], "doc_id": ["a"], "title": ["T"], "text": ["x"],
                     "char_start": pa.array([0], pa.int64()), "char_end": pa.array([1], pa.int64()),
                     "n_tokens": pa.array([1], pa.int32())})
    empty = pa.table({c: pa.array([], pa.null()) for c in CHUNK_COLUMNS})
    pq.write_table(good, work.path("chunks/part-00000.parquet"))
    pq.write_table(empty, work.path("chunks/part-00001.parquet"))
    frame = _read_parts(work, 2)
    assert list(frame["chunk_id"]) == ["c1"]


def test_no_duplicates_is_not_reported_as_zero_duplicates(tmp_path):
    corpus = _lines(tmp_path / "c.jsonl", [json.dumps({"id": "a", "text": LONG[:300]}),
                                           json.dumps({"id": "b"})])
    with Index.build(corpus, tmp_path / "ix", config=DENSE, show_progress=False) as ix:
        skipped = ix.info()["extra"]["ingest"]["skipped"]
    assert skipped == {"missing text": 1}


# -- item 6: lone surrogates ----------------------------------------------------------------

@pytest.mark.parametrize("field", ["text", "id", "title"])
def test_a_lone_surrogate_skips_the_record(tmp_path, field):
    record = {"id": "bad", "title": "T", "text": "Some text about boats."}
    record[field] = record[field] + "\ud800"
    corpus = _lines(tmp_path / "c.jsonl", [json.dumps({"id": "ok", "text": "Good text."}),
                                           json.dumps(record)])
    docs, report = _read(corpus)
    assert [d.doc_id for d in docs] == ["ok"]
    assert report.skipped == {"invalid Unicode": 1}
    assert f"{corpus}:2: skipped (invalid Unicode): the {field} holds a lone surrogate" \
        in report.problems[0]


def test_a_lone_surrogate_does_not_fail_the_build(tmp_path):
    corpus = _lines(tmp_path / "c.jsonl", [
        json.dumps({"id": "ok", "title": "Harbour", "text": LONG[:400]}),
        json.dumps({"id": "x\udfff", "text": "Text under a broken id."})])
    with Index.build(corpus, tmp_path / "ix", config=DENSE, show_progress=False) as ix:
        assert set(ix.chunks["doc_id"]) == {"ok"}
        assert ix.info()["extra"]["ingest"]["skipped"] == {"invalid Unicode": 1}


# -- item 7: deeply nested JSON -------------------------------------------------------------

def test_deeply_nested_json_is_a_broken_record(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    nested = '{"id": "n", "text": "t", "meta": ' + deep + "}"
    corpus = _lines(tmp_path / "c.jsonl", [json.dumps({"id": "ok", "text": "Good."}), nested,
                                           deep])
    docs, report = _read(corpus)
    assert [d.doc_id for d in docs] == ["ok"]
    assert report.skipped == {"broken JSON": 2}
    assert f"{corpus}:2: skipped (broken JSON): nested too deeply" in report.problems[0]


# -- item 8: gzip members that fail their check --------------------------------------------

def _member(records: list[dict], bad_crc: bool = False) -> bytes:
    data = gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode())
    if bad_crc:  # the trailer's CRC-32 (the data itself decompresses cleanly)
        crc = struct.unpack("<I", data[-8:-4])[0] ^ 0xFFFF
        data = data[:-8] + struct.pack("<I", crc) + data[-4:]
    return data


def _recs(prefix: str, n: int) -> list[dict]:
    return [{"id": f"{prefix}{i}", "text": f"Record {prefix}{i} about boats."} for i in range(n)]


def test_records_of_a_member_failing_its_crc_are_dropped_and_counted(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(_member(_recs("a", 3)) + _member(_recs("b", 4), bad_crc=True))
    docs, report = _read(path)
    assert [d.doc_id for d in docs] == ["a0", "a1", "a2"]
    assert report.skipped == {"damaged gzip member": 4}
    assert "4 records from decompressed byte" in report.problems[0]
    assert "before the damage" not in report.problems[0]


def test_a_single_member_failing_its_crc_gives_no_records(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(_member(_recs("a", 5), bad_crc=True))
    docs, report = _read(path)
    assert docs == []
    assert report.skipped == {"damaged gzip member": 5}


def test_a_truncated_gzip_still_keeps_what_it_read(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    whole = _member(_recs("a", 2)) + _member(_recs("b", 200))
    path.write_bytes(whole[: len(whole) - 40])
    docs, report = _read(path)
    assert [d.doc_id for d in docs][:2] == ["a0", "a1"] and len(docs) > 2
    assert report.warnings == {"truncated file": 1}


# -- low: a bytes title from Parquet --------------------------------------------------------

def test_a_bytes_title_from_parquet_is_text_not_its_repr(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": pa.array([b"d1"], pa.binary()),
                             "title": pa.array([b"Kestrel Dynamics"], pa.binary()),
                             "text": ["Kestrel Dynamics builds sonar."]}), path)
    docs, _ = _read(path)
    assert [(d.doc_id, d.title) for d in docs] == [("d1", "Kestrel Dynamics")]
