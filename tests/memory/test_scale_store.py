"""The scale index saved in the memory snapshot (gpurag.memory.scale_store): an open reads it
back instead of rebuilding it, with the same results; a damaged or missing part is logged and
the index rebuilt from the traces, with the same results again."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from gpurag.memory import Memory
from tests.memory.test_scale import _Precomputed, _questions, _traces


def _ranked(mem, qs, qv):
    res = mem.search_batch(qs, k=8, vectors=qv)
    return [[(h.id, round(h.score, 6)) for h in r.hits] for r in res]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A compacted indexed memory of 400 traces, 40 appended after the compaction, and the
    results it gave before closing."""
    rows, vec = _traces(440, seed=7)
    path = tmp_path_factory.mktemp("store") / "m"
    mem = Memory.create(path, embedder=_Precomputed(), scale_from=0)
    mem.add_many(rows[:400], vectors=vec[:400])
    mem.compact()
    mem.add_many(rows[400:], vectors=vec[400:])
    qs, qv = _questions(rows, vec, 20)
    want = _ranked(mem, qs, qv)
    mem.close()
    return path, qs, qv, want


def _open(path):
    return Memory.open(path, readonly=True, embedder=_Precomputed())


def test_open_reads_the_saved_index_and_ranks_identically(saved, caplog):
    path, qs, qv, want = saved
    meta = json.loads((path / "compact" / "snapshot.json").read_text())
    assert meta["scale"]["n"] == 400 and "scale_dense.npy" in meta["optional"]
    with caplog.at_level(logging.WARNING), _open(path) as mem:
        idx = mem._index
        assert idx is not None and idx.source == "snapshot"
        assert idx.n == idx.n_dense == 400 and idx.dense.ntotal == 400  # before any search
        dense = idx.dense
        assert _ranked(mem, qs, qv) == want
        assert mem._index is idx and idx.dense is dense  # appended to, not rebuilt
        assert idx.n == idx.dense.ntotal == 440
        assert mem.info()["index"]["source"] == "snapshot"
    assert not [r for r in caplog.records if "scale index" in r.getMessage()]


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_damaged_part_is_logged_and_rebuilt(saved, tmp_path, caplog, damage):
    import shutil

    path, qs, qv, want = saved
    copy = tmp_path / "m"
    shutil.copytree(path, copy)
    part = copy / "compact" / ("scale_terms_rows.npy" if damage != "delete"
                               else "scale_dense.npy")
    if damage == "flip":
        data = bytearray(part.read_bytes())
        data[-3] ^= 0x40
        part.write_bytes(bytes(data))
    elif damage == "truncate":
        part.write_bytes(part.read_bytes()[:-8])
    else:
        part.unlink()
    with caplog.at_level(logging.WARNING, logger="gpurag.memory.scale_store"), \
            _open(copy) as mem:
        assert mem._index is None
        lines = [r.getMessage() for r in caplog.records if "scale index" in r.getMessage()]
        assert len(lines) == 1 and part.name in lines[0] and "rebuilding" in lines[0], lines
        assert _ranked(mem, qs, qv) == want  # rebuilt from the traces at the first search
        assert mem._index.source == "built"


def test_snapshot_of_a_small_memory_has_no_index(tmp_path):
    rows, vec = _traces(50, seed=1)
    with Memory.create(tmp_path / "m", embedder=_Precomputed()) as mem:
        mem.add_many(rows, vectors=vec)
        mem.compact()
    meta = json.loads((tmp_path / "m" / "compact" / "snapshot.json").read_text())
    assert "scale" not in meta and not meta["optional"]
    assert not list((tmp_path / "m" / "compact").glob("scale_*"))


def test_an_index_saved_for_other_settings_is_rebuilt(saved, caplog):
    path, qs, qv, _want = saved
    with caplog.at_level(logging.WARNING, logger="gpurag.memory.scale_store"), \
            Memory.open(path, readonly=True, embedder=_Precomputed(), discourse=False) as mem:
        assert mem._index is None  # its lexical documents hold the discourse expansions
        assert any("does not match" in r.getMessage() for r in caplog.records)
        assert np.isfinite([h.score for r in mem.search_batch(qs[:3], k=3, vectors=qv[:3])
                            for h in r.hits]).all()
