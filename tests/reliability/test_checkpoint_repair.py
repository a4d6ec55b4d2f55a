"""A resumed build survives damaged checkpoint parts; a dead extraction worker and a full disk
while checkpointing are one clear error (review B, bugs 2 to 4)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import gpurag.pipeline.extract_ahead as extract_ahead
import gpurag.pipeline.extract_pool as extract_pool
import gpurag.pipeline.graph_stage as graph_stage
from gpurag import Index
from gpurag.cli import main
from gpurag.errors import GpuragError
from gpurag.extract import make_extractor
from gpurag.pipeline import checkpoints
from gpurag.pipeline.extract_pool import ExtractionWorkerError, extract_batches
from gpurag.pipeline.workdir import WorkDir
from tests.conftest import write_jsonl
from tests.pipeline.test_build import BoomError, _count_encodes

DENSE = dict(graph=False, show_progress=False, ingest_batch_chunks=6)  # 3 docs a part


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _files(index: Path) -> dict[str, str]:
    return {p.relative_to(index).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(index.rglob("*")) if p.is_file() and p.name != "manifest.json"}


@pytest.mark.parametrize("damaged", ["chunks/part-00001.parquet", "emb/part-00001.npy"])
def test_a_cut_short_chunk_part_is_made_again_and_the_rest_kept(
        tmp_path, sample_records, monkeypatch, caplog, damaged):
    src = write_jsonl(tmp_path / "src" / "docs.jsonl", sample_records[:14])
    with monkeypatch.context() as m:
        full = _count_encodes(m)
        ref = Index.build(src, tmp_path / "ref" / "index", **DENSE)
    out = tmp_path / "out" / "index"
    with monkeypatch.context() as m:
        _count_encodes(m, fail_after=3)
        with pytest.raises(BoomError):
            Index.build(src, out, **DENSE)
    work = out.parent / ".index.work"
    _truncate(work / damaged)  # counted by state.json, then cut short (a disk, a copy)

    with monkeypatch.context() as m, caplog.at_level(logging.WARNING):
        again = _count_encodes(m)
        index = Index.build(src, out, **DENSE)
    assert again == full[1:], "only the damaged part and those after it are embedded again"
    assert "damaged" in caplog.text and str(work / "chunks/part-00001.parquet") in caplog.text
    assert index.chunks["chunk_id"].tolist() == ref.chunks["chunk_id"].tolist()
    assert index.manifest.counts == ref.manifest.counts
    assert index.manifest.extra["ingest"] == ref.manifest.extra["ingest"]
    np.testing.assert_array_equal(index.passage_vectors(), ref.passage_vectors())


def test_a_work_folder_without_marks_starts_its_stage_over(tmp_path, sample_records,
                                                           monkeypatch):
    """A folder an older build left counts its parts without per-part totals: a damaged
    part there means the whole stage again, not a wrong count of documents."""
    src = write_jsonl(tmp_path / "src" / "docs.jsonl", sample_records[:14])
    ref = Index.build(src, tmp_path / "ref" / "index", **DENSE)
    out = tmp_path / "out" / "index"
    with monkeypatch.context() as m:
        _count_encodes(m, fail_after=3)
        with pytest.raises(BoomError):
            Index.build(src, out, **DENSE)
    work_root = out.parent / ".index.work"
    state_path = work_root / "state.json"
    state = json.loads(state_path.read_text())
    state["chunk_embed"].pop("marks")
    state_path.write_text(json.dumps(state))
    _truncate(work_root / "chunks/part-00002.parquet")
    index = Index.build(src, out, **DENSE)
    assert index.chunks["chunk_id"].tolist() == ref.chunks["chunk_id"].tolist()
    assert index.manifest.extra["ingest"] == ref.manifest.extra["ingest"]


def test_a_cut_short_extraction_part_is_extracted_again(tmp_path, sample_records,
                                                        monkeypatch, caplog):
    src = write_jsonl(tmp_path / "src" / "docs.jsonl", sample_records[:16])
    opts = dict(show_progress=False, ingest_batch_chunks=4)
    monkeypatch.setattr(graph_stage, "EXTRACT_BATCH", 4)
    monkeypatch.setenv("GPURAG_EXTRACT_WORKERS", "1")
    ref = tmp_path / "ref" / "index"
    Index.build(src, ref, **opts).close()
    out = tmp_path / "out" / "index"

    def boom(*args, **kwargs):
        raise BoomError("after extraction")

    with monkeypatch.context() as m:
        m.setattr(graph_stage, "resolve_entities", boom)
        with pytest.raises(BoomError):
            Index.build(src, out, **opts)
    work = out.parent / ".index.work"
    _truncate(work / "extract/relations-00002.parquet")
    extracted: list[int] = []
    real = make_extractor("fast").__class__.extract

    def counting(self, batch, offset=0):
        extracted.append(offset)
        return real(self, batch, offset=offset)

    monkeypatch.setattr(make_extractor("fast").__class__, "extract", counting)
    with caplog.at_level(logging.WARNING):
        Index.build(src, out, **opts).close()
    assert min(extracted) == 8, "the two whole parts before the damaged one are kept"
    assert f"extraction checkpoint part 2 in {work / 'extract'}" in caplog.text
    assert _files(out) == _files(ref)


def test_repair_leaves_a_whole_folder_alone(tmp_path):
    work = WorkDir(tmp_path / "ix", "key")
    frame = pd.DataFrame({"chunk_id": ["a"], "doc_id": ["d"], "title": ["t"], "text": ["x"],
                          "char_start": [0], "char_end": [1], "n_tokens": [1]})
    from gpurag.pipeline.chunk_embed import write_part

    write_part(work, 0, frame, np.zeros((1, 4), np.float32))
    work.state["chunk_embed"] = {"parts": 1, "units": 1, "docs": 1, "duplicates": 0,
                                 "done": True, "report": None, "marks": [[1, 1, 0]]}
    work.save()
    assert checkpoints.repair(work) == []
    assert work.state["chunk_embed"]["done"] is True
    assert not list(work.root.rglob("*.tmp"))


# -- a dead extraction worker -------------------------------------------------------------

class DyingExtractor:
    """The fast extractor, except that the worker given the batch at ``die_at`` is killed."""

    name = "dying"
    cpu_bound = True
    batch_size = 4

    def __init__(self, die_at: int) -> None:
        self.die_at = die_at
        self.fast = make_extractor("fast")

    def extract(self, batch, offset=0):
        if offset == self.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.fast.extract(batch, offset=offset)


@pytest.fixture(scope="module")
def chunks(sample_records) -> pd.DataFrame:
    recs = sample_records[:24]
    return pd.DataFrame({"chunk_id": [r["id"] for r in recs], "doc_id": [r["id"] for r in recs],
                         "title": [r.get("title", "") for r in recs],
                         "text": [r["text"] for r in recs]})


def test_a_killed_worker_is_a_clear_error(chunks):
    got = []
    with pytest.raises(ExtractionWorkerError, match="resumes") as err:
        for item in extract_batches(chunks, DyingExtractor(die_at=8), 0, 4, workers=2):
            got.append(item[0])
    assert isinstance(err.value, GpuragError)
    assert "GPURAG_EXTRACT_WORKERS=1" in str(err.value)
    assert 8 not in got


def test_a_killed_worker_alongside_stage_1_keeps_the_batches_before(tmp_path, chunks):
    work = WorkDir(tmp_path / "ix", "key")
    ahead = extract_ahead.ExtractAhead(DyingExtractor(die_at=12), work, workers=2,
                                       batch_size=4, min_rows=0)
    with pytest.raises(ExtractionWorkerError):
        ahead.add(chunks)
        ahead.finish()
    ahead.close()
    done = graph_stage.extract_state(work)
    assert done["done_rows"] <= 12 and done["done_rows"] % 4 == 0
    assert checkpoints.first_bad_extract_part(work, done["parts"]) is None


def test_cli_build_with_a_killed_worker_says_so_in_one_line(tmp_path, sample_records,
                                                           monkeypatch, capsys):
    src = write_jsonl(tmp_path / "src" / "docs.jsonl", sample_records[:24])
    monkeypatch.setattr(graph_stage, "EXTRACT_BATCH", 4)
    monkeypatch.setattr(extract_pool, "MIN_BATCHES_FOR_POOL", 1)
    monkeypatch.setattr(extract_ahead, "MIN_BATCHES_FOR_POOL", 1)
    monkeypatch.setenv("GPURAG_EXTRACT_WORKERS", "2")
    monkeypatch.setattr(graph_stage, "make_stage_extractor",
                        lambda *a, **k: DyingExtractor(die_at=8))
    rc = main(["-q", "index", str(src), "-o", str(tmp_path / "index"),
               "--config", str(_config(tmp_path, 4))])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith("gpurag: error: an extraction worker process ended abruptly")
    assert "Traceback" not in "\n".join(err)


# -- a full disk while checkpointing ------------------------------------------------------

def test_a_full_disk_names_the_checkpoint_and_leaves_no_half_file(tmp_path, sample_records,
                                                                  monkeypatch, capsys):
    src = write_jsonl(tmp_path / "src" / "docs.jsonl", sample_records[:14])
    real = pq.write_table
    calls = []

    def full(table, where, *args, **kwargs):
        calls.append(where)
        if len(calls) == 2:
            if hasattr(where, "write"):
                where.write(b"PAR1 half a file")
            else:
                Path(where).write_bytes(b"PAR1 half a file")
            raise OSError("No space left on device")  # Arrow's: no errno, no file name
        return real(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", full)
    rc = main(["-q", "index", str(src), "-o", str(tmp_path / "index"), "--no-graph",
               "--config", str(_config(tmp_path, 6))])
    err = capsys.readouterr().err
    assert rc == 2
    assert "no space left on the device writing" in err
    assert ".index.work/chunks/part-00001.parquet" in err
    work = tmp_path / ".index.work"
    assert not list(work.rglob("*.tmp"))
    assert not (work / "chunks/part-00001.parquet").exists()
    assert (work / "chunks/part-00000.parquet").is_file()  # the part before: whole, kept


def _config(tmp_path: Path, batch_chunks: int) -> Path:
    path = tmp_path / "gpurag.toml"
    path.write_text(f"[index]\ningest_batch_chunks = {batch_chunks}\n")
    return path
