"""Tables and arrays in parts (issue 34): an append writes only its new part and a manifest;
readers see the concatenation; parts stay few; nothing is written through a kept link."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpurag.store import IndexWriter, layout, open_index_dir
from gpurag.store.parts import merge_tail, part_number, part_rel, parts_of
from gpurag.vectors import build_index, save_index

CONFIG = {"graph": False}
ARRAY = layout.FACT_ENTITY_INDICES  # any array name: the dense layout does not require it


def _frame(lo: int, hi: int) -> pd.DataFrame:
    return pd.DataFrame({"chunk_id": [f"c{i}" for i in range(lo, hi)],
                         "n": np.arange(lo, hi, dtype=np.int32),
                         "w": np.arange(lo, hi, dtype=np.float32) * 0.5})


def _base(path: Path, rows: int = 50) -> None:
    w = IndexWriter(path)
    w.write_table(layout.CHUNKS, _frame(0, rows))
    w.write_array(ARRAY, np.arange(rows, dtype=np.int32))
    vecs = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    save_index(build_index(vecs, 1000, 0), w.path(layout.PASSAGES_FAISS))
    w.commit(CONFIG, {}, {})


def _append(path: Path, lo: int, hi: int) -> set[str]:
    """Append rows ``lo:hi`` (as int64 and float64: the append casts to the stored types);
    the files of the new version that are new inodes."""
    before = _inodes(path)
    d = open_index_dir(path)
    w = IndexWriter(path)
    w.keep(d, layout.PASSAGES_FAISS)
    w.append_table(d, layout.CHUNKS, _frame(lo, hi).astype({"n": np.int64, "w": np.float64}))
    w.append_array(d, ARRAY, np.arange(lo, hi, dtype=np.int64))
    w.commit(CONFIG, {}, {})
    d.close()
    after = _inodes(path)
    return {rel for rel, ino in after.items() if before.get(rel) != ino}


def _inodes(path: Path) -> dict[str, int]:
    return {p.relative_to(path).as_posix(): p.stat().st_ino for p in path.rglob("*")
            if p.is_file()}


def test_part_names_round_trip():
    assert part_rel(layout.CHUNKS, 3) == "tables/chunks.part00003.parquet"
    assert part_number(part_rel(layout.CHUNKS, 3)) == (layout.CHUNKS, 3)
    assert part_number(layout.CHUNKS) is None
    files = [part_rel(layout.CHUNKS, 10), layout.CHUNKS, part_rel(layout.CHUNKS, 2),
             part_rel(layout.MENTIONS, 1)]
    assert parts_of(files, layout.CHUNKS) == [part_rel(layout.CHUNKS, 2),
                                              part_rel(layout.CHUNKS, 10)]


def test_merge_tail_is_a_binary_counter():
    files = {"a": {"rows": 4}, "b": {"rows": 2}, "c": {"rows": 1}, "base": {}}
    assert merge_tail(["a", "b", "c"], files, 1) == ["a", "b", "c"]  # 1 -> 2 -> 4 -> 8
    assert merge_tail(["a", "b"], files, 1) == []
    assert merge_tail(["base", "c"], files, 5) == ["c"]  # the base is never merged


def test_an_append_writes_only_its_part_and_the_manifest(tmp_path):
    index = tmp_path / "idx"
    _base(index)
    written = _append(index, 50, 53)
    assert written == {layout.MANIFEST, part_rel(layout.CHUNKS, 1), part_rel(ARRAY, 1)}
    d = open_index_dir(index)
    pd.testing.assert_frame_equal(d.table(layout.CHUNKS), _frame(0, 53))
    arr = d.array(ARRAY)
    assert arr.dtype == np.int32 and arr.tolist() == list(range(53))
    assert d.manifest.files[part_rel(layout.CHUNKS, 1)]["rows"] == 3
    from gpurag.store.checks import table_rows

    assert table_rows(d, layout.CHUNKS) == 53
    d.close()


def test_many_appends_keep_few_parts_and_read_as_one(tmp_path):
    index = tmp_path / "idx"
    _base(index)
    n = 50
    for _ in range(20):
        written = _append(index, n, n + 2)
        n += 2
        # the base file is never rewritten; an append writes at most one part per file
        assert layout.CHUNKS not in written and ARRAY not in written
        assert len([r for r in written if part_number(r)]) == 2
    d = open_index_dir(index)
    parts = parts_of(d.manifest.files, layout.CHUNKS)
    assert len(parts) <= 5, parts  # 40 appended rows in parts of 2: log2(20) + 1
    pd.testing.assert_frame_equal(d.table(layout.CHUNKS), _frame(0, n))
    assert d.array(ARRAY).tolist() == list(range(n))
    sub = d.table(layout.CHUNKS, columns=["n"])
    assert sub["n"].tolist() == list(range(n))
    d.close()


def test_a_reader_keeps_its_version_across_appends(tmp_path):
    index = tmp_path / "idx"
    _base(index)
    old = open_index_dir(index)
    _append(index, 50, 51)
    _append(index, 51, 52)  # merges the first part: its file leaves the index directory
    pd.testing.assert_frame_equal(old.table(layout.CHUNKS), _frame(0, 50))
    old.close()
    assert len(open_index_dir(index).table(layout.CHUNKS)) == 52


def test_rewriting_a_kept_file_never_touches_the_stored_version(tmp_path):
    index = tmp_path / "idx"
    _base(index)
    d = open_index_dir(index)
    before = (index / layout.CHUNKS).read_bytes()
    w = IndexWriter(index)
    w.keep(d, layout.CHUNKS)
    w.keep(d, layout.PASSAGES_FAISS)
    w.write_table(layout.CHUNKS, _frame(0, 3))  # replaces the link, not the linked file
    assert (index / layout.CHUNKS).read_bytes() == before
    w.commit(CONFIG, {}, {})
    d.close()
    assert len(open_index_dir(index).table(layout.CHUNKS)) == 3
    assert os.stat(index / layout.PASSAGES_FAISS).st_nlink == 1  # the old version is gone


@pytest.mark.parametrize("damage", ["part", "base"])
def test_a_damaged_part_is_an_error_naming_it(tmp_path, damage):
    from gpurag.errors import IndexFormatError

    index = tmp_path / "idx"
    _base(index)
    _append(index, 50, 53)
    rel = part_rel(layout.CHUNKS, 1) if damage == "part" else layout.CHUNKS
    data = bytearray((index / rel).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (index / rel).write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match=rel.split("/")[-1]):
        open_index_dir(index)


def test_a_table_that_does_not_convert_to_pandas_is_an_index_format_error(tmp_path,
                                                                          monkeypatch):
    """Parts that read and concatenate but whose pandas metadata does not parse: the table
    read names the table (IndexFormatError), not a bare JSON error."""
    import pyarrow as pa

    from gpurag.errors import IndexFormatError
    from gpurag.store.reader import IndexDir

    index = tmp_path / "idx"
    _base(index)
    _append(index, 50, 52)
    d = open_index_dir(index)
    read = IndexDir.arrow_table

    def bad_metadata(self, rel, columns=None) -> pa.Table:
        return read(self, rel, columns).replace_schema_metadata({b"pandas": b'{"bad"'})

    monkeypatch.setattr(IndexDir, "arrow_table", bad_metadata)
    with pytest.raises(IndexFormatError, match="corrupt table"):
        d.table(layout.CHUNKS)
