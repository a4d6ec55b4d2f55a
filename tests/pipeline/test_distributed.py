"""The build on a local Dask cluster: the same bytes as one process, whatever the workers do.

The sample corpus is cut into small shards (4 document parts a chunk+embed shard, 16 chunks an
extraction shard) so that two workers share them. Faults are real: a worker process killed by
SIGKILL in the middle of a shard, a driver that stops (an exception) after some shards.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")

from gpurag import Index  # noqa: E402
from gpurag.config import IndexConfig  # noqa: E402
from gpurag.extract import make_extractor  # noqa: E402
from gpurag.pipeline import distributed as dist  # noqa: E402
from gpurag.pipeline import graph_stage  # noqa: E402
from tests.conftest import SAMPLE  # noqa: E402

CFG = IndexConfig(ingest_batch_chunks=8)
EXTRACT_ROWS = 16


class LoggedExtractor:
    """The fast extractor, noting each batch it runs (its first row) in ``log``; with
    ``kill_at``, the worker process running that batch SIGKILLs itself, once (``marker``)."""

    def __init__(self, log: Path, kill_at: int | None = None) -> None:
        self.inner = make_extractor("fast")
        self.name = self.inner.name
        self.log = str(log)
        self.kill_at = kill_at
        self.marker = str(log) + ".killed"

    def extract(self, chunks, offset: int = 0):
        with open(self.log, "a") as fh:
            fh.write(f"{offset}\n")
        if offset == self.kill_at and not os.path.exists(self.marker):
            Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.extract(chunks, offset=offset)


def runs(log: Path) -> list[int]:
    return [int(x) for x in log.read_text().split()] if log.exists() else []


def digests(index: Index) -> dict[str, str]:
    return {rel: m["sha256"] for rel, m in index.manifest.files.items()}


@pytest.fixture(scope="module")
def small_batches():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graph_stage, "EXTRACT_BATCH", EXTRACT_ROWS)
        yield


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0",
                                  env={"GPURAG_THREADS": "1", "GPURAG_PROGRESS": "0"}) as lc, \
            distributed.Client(lc) as c:
        yield c


@pytest.fixture(scope="module")
def single(small_batches, tmp_path_factory) -> Index:
    out = tmp_path_factory.mktemp("single") / "sample.index"
    return Index.build(SAMPLE / "corpus.jsonl", out, config=CFG, show_progress=False)


def with_extractor(monkeypatch, extractor) -> None:
    monkeypatch.setattr(graph_stage, "make_stage_extractor", lambda *a, **k: extractor)


def test_two_workers_build_the_same_bytes_as_one_process(single, client, tmp_path):
    assert not hasattr(make_extractor("fast"), "batch_size")  # EXTRACT_ROWS is what runs
    with distributed.get_task_stream(client) as stream:
        built = Index.build(SAMPLE / "corpus.jsonl", tmp_path / "cluster.index", config=CFG,
                            show_progress=False, cluster=client)
    assert digests(built) == digests(single)
    assert built.manifest.counts == single.manifest.counts
    tasks = [t for t in stream.data if "shard" in str(t.get("key", ""))]
    assert len(tasks) >= 10  # 15 chunk+embed shards, 4 extraction shards
    assert len({t["worker"] for t in tasks}) == 2  # both workers took shards
    assert not (tmp_path / ".cluster.index.work").exists()


def test_duplicate_chunks_across_shards_are_dropped_as_in_one_process(client, tmp_path):
    """A chunk seen in an earlier batch is dropped and the rest of its batch embedded again
    (Markdown: embedded without its markup), so every embedding batch holds what it holds in
    one process."""
    recs = [json.loads(x) for x in (SAMPLE / "corpus.jsonl").read_text().splitlines() if x]
    # two documents again in later shards (2 a shard): one beside a new document, one alone
    corpus = [*recs[:6], recs[1], *recs[6:9], recs[2]]
    path = tmp_path / "dups"
    path.mkdir()
    for i, r in enumerate(corpus):
        (path / f"{i:02d}-{r['id']}.md").write_text(f"# {r['title']}\n\n**{r['text']}**\n")
    cfg = IndexConfig(ingest_batch_chunks=4, graph=False)
    one = Index.build(path, tmp_path / "one", config=cfg, show_progress=False)
    two = Index.build(path, tmp_path / "two", config=cfg, show_progress=False, cluster=client)
    assert digests(two) == digests(one)
    assert two.manifest.extra["ingest"]["skipped"]["duplicate chunks"] == 2
    assert len(two.chunks) == len(one.chunks) == 9


def test_a_worker_killed_mid_shard_loses_only_that_shard(single, client, tmp_path,
                                                         monkeypatch):
    log = tmp_path / "extract.log"
    with_extractor(monkeypatch, LoggedExtractor(log, kill_at=EXTRACT_ROWS))
    workers = set(client.scheduler_info()["workers"])
    built = Index.build(SAMPLE / "corpus.jsonl", tmp_path / "killed.index", config=CFG,
                        show_progress=False, cluster=client)
    assert Path(str(log) + ".killed").exists()  # a worker really died mid-shard
    assert set(client.scheduler_info()["workers"]) != workers  # and was replaced
    shards = list(range(0, len(single.chunks), EXTRACT_ROWS))
    assert sorted(runs(log)) == sorted([*shards, EXTRACT_ROWS])  # that shard ran twice
    assert digests(built) == digests(single)


class DriverCrashError(RuntimeError):
    pass


def crash_after(monkeypatch, obj, name: str, calls: int, stored: list) -> None:
    """Make ``obj.name`` raise on its ``calls + 1``-th call (the driver stops)."""
    real = getattr(obj, name)

    def wrapped(*args, **kwargs):
        if len(stored) >= calls:
            raise DriverCrashError("the driver stopped")
        stored.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, wrapped)


def test_a_second_run_after_a_driver_crash_reuses_every_finished_shard(single, client,
                                                                       tmp_path, monkeypatch):
    out = tmp_path / "crashed.index"
    n_shards = -(-len(single.chunks) // 4)  # one part per sample document, 4 a shard
    submitted: list[tuple[str, object]] = []
    real_submit = dist._submit

    def counting_submit(c, fn, *args):
        if fn is dist.chunk_embed_shard:
            submitted.append((fn.__name__, (args[0][0].doc_id, args[0][0].offset)))
        elif fn is dist.extract_shard:
            submitted.append((fn.__name__, args[-1]))
        return real_submit(c, fn, *args)

    monkeypatch.setattr(dist, "_submit", counting_submit)
    # 1. the driver stops once 3 chunk+embed shards have come back (in any order)
    done: list = []
    with monkeypatch.context() as m:
        crash_after(m, dist._ChunkEmbedRun, "done", 3, done)
        with pytest.raises(DriverCrashError):
            Index.build(SAMPLE / "corpus.jsonl", out, config=CFG, show_progress=False,
                        cluster=client)
    shard_keys = [k for f, k in submitted if f == "chunk_embed_shard"]  # shard i is the i-th
    finished = {args[1] for args in done}
    stage = json.loads((tmp_path / ".crashed.index.work" / "state.json").read_text())[
        "chunk_embed"]
    assert stage["parts"] + len(stage.get("shards", {})) == 3
    # 2. a second run sends only the other chunk+embed shards, then stops once 2
    #    extraction shards have come back
    submitted.clear()
    log = tmp_path / "extract.log"
    with_extractor(monkeypatch, LoggedExtractor(log))
    stored: list = []
    with monkeypatch.context() as m:
        crash_after(m, dist, "store_extract_shard", 2, stored)
        with pytest.raises(DriverCrashError):
            Index.build(SAMPLE / "corpus.jsonl", out, config=CFG, show_progress=False,
                        cluster=client)
    resent = [k for f, k in submitted if f == "chunk_embed_shard"]
    assert len(resent) == n_shards - 3
    assert not set(resent) & {shard_keys[i] for i in finished}
    # 3. a third run embeds nothing and extracts only the shards not stored yet
    extracted = {args[2] * EXTRACT_ROWS for args in stored}
    n_extract = -(-len(single.chunks) // EXTRACT_ROWS)
    submitted.clear()
    log = tmp_path / "extract-3.log"  # run 2's cancelled shard may still be writing the other
    with_extractor(monkeypatch, LoggedExtractor(log))
    built = Index.build(SAMPLE / "corpus.jsonl", out, config=CFG, show_progress=False,
                        cluster=client)
    assert [f for f, _ in submitted] == ["extract_shard"] * (n_extract - 2)
    assert sorted(runs(log)) == sorted(set(range(0, len(single.chunks), EXTRACT_ROWS))
                                       - extracted)
    assert digests(built) == digests(single)


def test_the_command_line_builds_on_a_cluster_address(client, tmp_path, capsys):
    from gpurag.cli import main

    out = tmp_path / "cli.index"
    assert main(["-q", "index", str(SAMPLE / "corpus.jsonl"), "-o", str(out), "--no-graph",
                 "--cluster", client.scheduler.address]) == 0
    assert len(Index.open(out).chunks) == 57


@pytest.mark.parametrize("spec", ["local:0", "local:x", " "])
def test_a_bad_cluster_spec_is_one_clear_error(spec):
    from gpurag.errors import ConfigError

    with pytest.raises(ConfigError, match="--cluster"):
        dist.parse_cluster(spec)


class FailingExtractor(LoggedExtractor):
    """Raises on the batch at ``kill_at`` (a bug in an extractor, not a dead worker)."""

    def extract(self, chunks, offset: int = 0):
        if offset == self.kill_at:
            raise ValueError("a bad batch")
        return self.inner.extract(chunks, offset=offset)


def test_a_shard_that_keeps_failing_stops_the_build_with_one_clear_error(small_batches, client,
                                                                        tmp_path, monkeypatch):
    with_extractor(monkeypatch, FailingExtractor(tmp_path / "log", kill_at=EXTRACT_ROWS))
    with pytest.raises(dist.ShardError, match=r"shard 1 failed .*a bad batch.*rerun resumes"):
        Index.build(SAMPLE / "corpus.jsonl", tmp_path / "failing.index", config=CFG,
                    show_progress=False, cluster=client)
    assert (tmp_path / ".failing.index.work" / "state.json").exists()  # checkpoints kept


def test_local_n_starts_n_workers_sharing_the_cores_and_stops_them():
    with dist.Cluster("local:1") as on:
        assert on.n_workers() == 1
        env = on.client.run(lambda: os.environ.get("GPURAG_THREADS"))
        assert list(env.values()) == [str(dist._cores())]
        profiled = on.client.run(
            lambda: __import__("dask").config.get("distributed.worker.profile.enabled"))
        assert list(profiled.values()) == [False]  # no 10 ms stack sampling (dist.QUIET)
        local = on._local
    assert local is None or local.status.name == "closed"
    assert on._local is None


class UnpicklableExtractor(LoggedExtractor):
    """Holds a lock, as a loaded model may: cannot be sent to a worker."""

    def __init__(self, log: Path) -> None:
        import threading

        super().__init__(log)
        self.lock = threading.Lock()


def test_an_extractor_that_cannot_travel_extracts_in_the_driver_the_same_batches(
        small_batches, client, tmp_path, caplog):
    from gpurag.pipeline.workdir import WorkDir

    recs = [json.loads(x) for x in (SAMPLE / "corpus.jsonl").read_text().splitlines() if x]
    chunks = pd.DataFrame({"chunk_id": [r["id"] for r in recs], "doc_id": [r["id"] for r in recs],
                           "title": [r["title"] for r in recs], "text": [r["text"] for r in recs]})
    one = graph_stage.run_extraction(chunks, make_extractor("fast"),
                                     WorkDir(tmp_path / "one", "k"), False)
    on = dist.Cluster(client)
    here = on.run_extraction(chunks, UnpicklableExtractor(tmp_path / "log"),
                             WorkDir(tmp_path / "here", "k"), False)
    there = on.run_extraction(chunks, LoggedExtractor(tmp_path / "log2"),
                              WorkDir(tmp_path / "there", "k"), False)
    assert "cannot be sent to the cluster's workers" in caplog.text
    assert len(runs(tmp_path / "log")) == len(runs(tmp_path / "log2")) == 4
    for ex in (here, there):
        pd.testing.assert_frame_equal(ex.mentions, one.mentions)
        pd.testing.assert_frame_equal(ex.relations, one.relations)
        assert ex.stats == one.stats
