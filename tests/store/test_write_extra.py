"""``write_extra``: an informational manifest entry written in place, atomically, under the
index's write lock, with every file and the seal unchanged."""

from __future__ import annotations

import json

import pytest

from gpurag.errors import IndexBusyError
from gpurag.store import layout, open_index_dir
from gpurag.store.lock import WriteLock
from gpurag.store.writer import write_extra


def test_extra_is_written_in_place_and_the_seal_holds(index_copy):
    files = {p.name: p.read_bytes() for p in index_copy.iterdir()
             if p.is_file() and p.name != layout.MANIFEST}
    before = open_index_dir(index_copy).manifest.extra
    written = write_extra(index_copy, "note", {"a": 1})
    write_extra(index_copy, "other", 2)
    stored = json.loads((index_copy / layout.MANIFEST).read_text(encoding="utf-8"))["extra"]
    assert stored == {**before, "note": {"a": 1}, "other": 2}
    assert written.extra == {**before, "note": {"a": 1}}
    assert open_index_dir(index_copy, verify=True).manifest.extra == stored  # still sealed
    assert {p.name: p.read_bytes() for p in index_copy.iterdir()
            if p.is_file() and p.name != layout.MANIFEST} == files
    assert not list(index_copy.parent.glob(".*manifest-tmp"))


def test_a_held_write_lock_refuses_it_and_changes_nothing(index_copy):
    manifest = (index_copy / layout.MANIFEST).read_bytes()
    lock = WriteLock(index_copy)
    try:
        with pytest.raises(IndexBusyError):
            write_extra(index_copy, "note", 1)
    finally:
        lock.release()
    assert (index_copy / layout.MANIFEST).read_bytes() == manifest
