"""The build's per-chunk stages as tasks on a Dask distributed cluster (``--cluster``).

The driver (the process that writes the index) reads the documents, cuts them into the same
batches as a single-process build (:func:`gpurag.pipeline.chunk_embed._batches`) and the same
extraction batches (``EXTRACT_BATCH`` rows), and sends each batch to the cluster as one task:
a *shard*. Each result comes back to the driver, which checkpoints it in the build's work
folder as soon as it arrives (whatever the order), so the workers need no shared storage and
a second run after a crash of the driver reuses every finished shard. A worker that dies loses
only the shards it was running: the scheduler runs them again on another worker.

Same bytes as one process: a shard's output depends on its batch alone, except for duplicate
chunks across batches, which the driver drops in batch order (re-embedding the rest of a batch
that had one, so each embedding batch holds exactly the chunks it holds in one process). The
graph stage (alias resolution, CSR, Leiden, vectors, writing) runs in the driver.

Dask rather than Ray: it is the RAPIDS engine (``dask-cuda`` gives one worker per GPU,
``cugraph.dask`` runs multi-GPU Leiden/WCC on the same cluster), it is pure Python and small
to install, and a plain ``Client`` gives the futures this needs (docs/SCALING.md).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from gpurag.config import IndexConfig
from gpurag.embed.base import Embedder
from gpurag.errors import ConfigError, GpuragError
from gpurag.extract.base import Extraction, Extractor
from gpurag.ingest import IngestReport, iter_documents
from gpurag.ingest.parts import DocPart, iter_parts
from gpurag.pipeline.checkpoints import chunk_part, count_chunk_part
from gpurag.pipeline.progress import progress_bar
from gpurag.pipeline.workdir import WorkDir

log = logging.getLogger(__name__)

INSTALL_HINT = 'the distributed build needs dask: pip install "gpurag[distributed]"'
# Dask's defaults sample every worker's stack each 10 ms and tick each event loop each 20 ms:
# 4.6% of a core per idle worker and 6.7% in the driver here (measured over 20 s, 2 workers),
# 1.0% and 1.9% without. Local clusters run without them.
QUIET = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
         "distributed.admin.system-monitor.interval": "5s"}
IN_FLIGHT_PER_WORKER = 2  # shards queued per worker: enough to keep it busy, memory bounded
BACKLOG_PER_WORKER = 8  # chunk+embed batches held per worker (running, or out of order)


def parse_cluster(spec: str) -> tuple[str, int | None]:
    """``("local", N)`` for ``local:N`` (``local``: one worker per core), else
    ``(address, None)`` for a scheduler address (``tcp://host:8786``, ``host:8786``)."""
    spec = spec.strip()
    if spec == "local" or spec.startswith("local:"):
        n = spec.partition(":")[2] or str(max(1, _cores()))
        if not n.isdigit() or int(n) < 1:
            raise ConfigError(f"--cluster {spec}: expected local:N with N a positive number")
        return "local", int(n)
    if not spec:
        raise ConfigError("--cluster: empty address")
    return spec, None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return distributed


class ShardError(GpuragError):
    """A shard's task failed on the cluster (raised, or its workers kept dying)."""


class Cluster:
    """A connection to a Dask cluster (or a local one this object starts and stops).

    ``spec``: ``local:N``, a scheduler address, or a ``distributed.Client`` (used as is, not
    closed). Local workers get ``threads`` CPU threads each for ONNX Runtime and FAISS
    (default: the cores divided among the workers) and one task at a time.
    """

    def __init__(self, spec: Any, threads: int | None = None) -> None:
        distributed = _import_distributed()
        self._local = None
        self._owns_client = False
        self._closing: threading.Thread | None = None
        if isinstance(spec, distributed.Client):
            self.client = spec
        else:
            address, n = parse_cluster(str(spec))
            if n is not None:
                threads = threads or max(1, _cores() // n)
                env = {"GPURAG_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
                       "GPURAG_PROGRESS": "0",
                       # a failed shard reaches the driver as its exception; a worker's
                       # heartbeat complaints while the cluster shuts down do not matter
                       "DASK_LOGGING__DISTRIBUTED": "error",
                       **{"DASK_" + k.upper().replace(".", "__").replace("-", "_"): str(v)
                          for k, v in QUIET.items()}}
                import dask

                with dask.config.set(QUIET):
                    self._local = distributed.LocalCluster(
                        n_workers=n, threads_per_worker=1, processes=True,
                        dashboard_address=":0", env=env, silence_logs=logging.WARNING)
                address = self._local.scheduler_address
            try:
                self.client = distributed.Client(address, timeout=60)
            except (OSError, TimeoutError) as exc:
                self.close()
                raise ConfigError(f"--cluster {spec}: cannot reach the scheduler ({exc})"
                                  ) from None
            self._owns_client = True
        self.spec = spec
        self.embed_implementations: set[str] = set()

    def n_workers(self) -> int:
        return max(1, len(self.client.scheduler_info().get("workers", {})))

    def close(self) -> None:
        """Disconnect and stop the local cluster (waits for a :meth:`release` under way)."""
        closing, self._closing = getattr(self, "_closing", None), None
        if closing is not None:
            closing.join()
        self._close_now()

    def release(self) -> None:
        """Let go of the cluster in the background once the per-chunk stages are done: the
        graph stage does not share the machine with idle workers, nor wait for them to stop
        (:meth:`close` waits at the end of the build)."""
        if self._local is None and not self._owns_client:
            return
        self._closing = threading.Thread(target=self._close_now, name="gpurag-cluster-close",
                                         daemon=True)
        self._closing.start()

    def _close_now(self) -> None:
        if self._owns_client and getattr(self, "client", None) is not None:
            self._owns_client = False
            self.client.close()
        local, self._local = self._local, None
        if local is not None:
            local.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the two per-chunk stages -----------------------------------------------------
    def run_chunk_embed(self, source: str | Path, embedder: Embedder, cfg: IndexConfig,
                        work: WorkDir, show_progress: bool | None
                        ) -> tuple[pd.DataFrame, np.ndarray, IngestReport]:
        """:func:`gpurag.pipeline.chunk_embed.run_chunk_embed` with the batches on the
        cluster; the same checkpoints, so either kind of build resumes the other's."""
        from gpurag.pipeline.chunk_embed import read_chunk_embed

        stage = work.state.setdefault("chunk_embed", {"parts": 0, "units": 0, "docs": 0,
                                                       "duplicates": 0, "report": None,
                                                       "done": False})
        report = IngestReport()
        was_done = stage["done"]
        if not was_done:
            from gpurag.ingest.formats import read_options

            docs = iter_documents(source, report, cfg.follow_outside_links,
                                  options=read_options(cfg))
            _ChunkEmbedRun(self, embedder, cfg, work, stage, show_progress).run(docs)
            stage["done"] = True
            stage["report"] = report.as_dict()
            work.save()
        return read_chunk_embed(work, stage, embedder, report, was_done)

    def run_extraction(self, chunks: pd.DataFrame, extractor: Extractor, work: WorkDir,
                       show_progress: bool | None) -> Extraction:
        """:func:`gpurag.pipeline.graph_stage.run_extraction` with the batches on the
        cluster (the extractor is sent once to each worker)."""
        from gpurag.pipeline.graph_stage import (
            EXTRACT_BATCH,
            add_extraction_part,
            read_extraction,
            run_extraction,
            write_extraction_part,
        )

        try:
            payload = pickle.dumps(extractor)
        except Exception as exc:  # a model that does not pickle: the same batches, here
            log.warning("the %s extractor cannot be sent to the cluster's workers (%s): "
                        "extracting in this process", extractor.name, exc)
            self.release()
            return run_extraction(chunks, extractor, work, show_progress)

        stage = work.state.setdefault("extract", {"done_rows": 0, "parts": 0, "stats": {},
                                                  "batch_stats": []})
        shards: dict[str, Any] = stage.setdefault("shards", {})
        batch_size = int(getattr(extractor, "batch_size", EXTRACT_BATCH))
        starts = list(range(0, len(chunks), batch_size))
        if stage["done_rows"] != min(stage["parts"] * batch_size, len(chunks)):
            raise ConfigError(f"the work folder {work.root} holds extraction parts of another "
                              "batch size; remove it to rebuild")
        todo = [i for i in range(stage["parts"], len(starts)) if str(i) not in shards]
        if len(todo) < len(starts) - stage["parts"]:
            log.info("resuming: %d extraction shards already done",
                     len(starts) - stage["parts"] - len(todo))
        bar = progress_bar(total=len(chunks), desc=f"extract ({extractor.name}, cluster)",
                           unit="chunk", show=show_progress)
        bar.update(stage["done_rows"] + sum(s["rows"] for s in shards.values()))
        key = hashlib.sha256(payload).hexdigest()[:16]

        def submit(i: int):
            a = starts[i]
            part = chunks.iloc[a: a + batch_size].reset_index(drop=True)
            return _submit(self.client, extract_shard, key, payload, part, a)

        def done(i: int, part: Extraction) -> None:
            rows = min(batch_size, len(chunks) - starts[i])
            store_extract_shard(work, stage, i, rows, part, write_extraction_part)
            bar.update(rows)
            while str(stage["parts"]) in shards:  # the finished prefix, in order
                s = shards.pop(str(stage["parts"]))
                add_extraction_part(stage, starts[stage["parts"]], s["rows"], s["stats"])
            work.save()

        self._map(todo, submit, done)
        bar.close()
        stage.pop("shards", None)
        work.save()
        self.release()  # the last per-chunk stage: the rest of the build runs here
        return read_extraction(work, stage)

    def _map(self, todo: list[int] | Iterator[int], submit, done, ready=lambda: True) -> None:
        """Run ``submit(i)`` for each shard, at most a few per worker in flight (and none
        while ``ready()`` is false), and ``done(i, result)`` in the driver as each finishes
        (any order)."""
        distributed = _import_distributed()
        limit = IN_FLIGHT_PER_WORKER * self.n_workers()
        queue = iter(todo)
        running = distributed.as_completed()
        index: dict[str, int] = {}

        def top_up() -> None:
            while running.count() < limit and (ready() or not running.count()):
                i = next(queue, None)
                if i is None:
                    return
                future = submit(i)
                index[future.key] = i
                running.add(future)

        top_up()
        try:
            for future in running:
                i = index.pop(future.key)
                try:
                    result = future.result()
                except Exception as exc:
                    raise ShardError(f"shard {i} failed on the cluster ({type(exc).__name__}: "
                                     f"{exc}); the shards done are checkpointed, a rerun "
                                     "resumes after them") from exc
                future.release()
                done(i, result)
                top_up()
        finally:
            for future in list(running.futures):
                future.cancel()


@dataclass
class _ChunkEmbedRun:
    """The driver's side of the distributed chunk + embed stage.

    A batch stays in memory from when it is read until its shard is a checkpoint part (at
    most ``BACKLOG_PER_WORKER`` shards a worker), so one that repeats chunks of an earlier
    batch can be chunked and embedded again without them, exactly as one process does.
    """

    cluster: Cluster
    embedder: Embedder
    cfg: IndexConfig
    work: WorkDir
    stage: dict[str, Any]
    show_progress: bool | None
    seen: set[str] = field(default_factory=set)
    batches: dict[int, list[DocPart]] = field(default_factory=dict)

    def run(self, docs: Iterator) -> None:
        from gpurag.pipeline.chunk_embed import _batches

        stage, work = self.stage, self.work
        shards: dict[str, Any] = stage.setdefault("shards", {})
        for i in range(stage["parts"]):
            self.seen.update(pq.read_table(work.path(chunk_part(i)),
                                           columns=["chunk_id"]).column(0).to_pylist())
        if stage["parts"] or shards:
            log.info("resuming: %d chunk+embed shards already done",
                     stage["parts"] + len(shards))
        self.bar = progress_bar(total=None, desc="chunk+embed (cluster)", unit="doc",
                                show=self.show_progress)
        self.bar.update(stage["docs"] + sum(s["docs"] for s in shards.values()))
        batches = _batches(iter_parts(docs, self.cfg.max_part_chars),
                           max(1, self.cfg.ingest_batch_chunks // 2), self.cfg.max_part_chars)
        backlog = BACKLOG_PER_WORKER * self.cluster.n_workers()

        def todo() -> Iterator[int]:
            for i, batch in enumerate(batches):
                if i < stage["parts"]:
                    continue
                self.batches[i] = batch
                if str(i) in shards:  # came back before the driver stopped
                    self.advance()
                else:
                    yield i

        def submit(i: int):
            return _submit(self.cluster.client, chunk_embed_shard, self.batches[i], self.cfg,
                           set())

        self.cluster._map(todo(), submit, self.done, ready=lambda: len(self.batches) < backlog)
        self.advance()
        if shards:  # cannot happen: every shard was made a part in order
            raise RuntimeError(f"chunk+embed shards left unfinished: {sorted(shards)}")
        self.bar.close()
        stage.pop("shards", None)

    def done(self, i: int, result: tuple[pd.DataFrame, np.ndarray, int, str]) -> None:
        """Checkpoint shard ``i``'s result, then make the shards that continue the finished
        prefix checkpoint parts, in order."""
        from gpurag.pipeline.chunk_embed import write_part

        chunks, vectors, dups, implementation = result
        self.cluster.embed_implementations.add(implementation)
        batch = self.batches[i]
        docs = sum(p.last for p in batch)
        write_part(self.work, i, chunks, vectors, prefix="shards/")
        self.stage["shards"][str(i)] = {"units": len(batch), "docs": docs, "duplicates": dups}
        self.work.save()
        self.bar.update(docs)
        self.advance()

    def advance(self) -> None:
        """Turn the shards that continue the finished prefix into checkpoint parts. A shard
        holding chunks an earlier batch has is chunked and embedded again without them."""
        from gpurag.pipeline.chunk_embed import write_part

        stage, work = self.stage, self.work
        shards = stage["shards"]
        while str(stage["parts"]) in shards and stage["parts"] in self.batches:
            i = stage["parts"]
            meta = shards[str(i)]
            raw = work.path(f"shards/chunks-{i:05d}.parquet")
            raw_emb = work.path(f"shards/emb-{i:05d}.npy")
            chunks = pq.read_table(raw).to_pandas()
            repeated = set(chunks["chunk_id"]) & self.seen
            dups = meta["duplicates"]
            if repeated:
                chunks, vectors, dups, _ = _submit(self.cluster.client, chunk_embed_shard,
                                                   self.batches[i], self.cfg, repeated).result()
            else:
                vectors = np.load(raw_emb)
            self.seen.update(chunks["chunk_id"].tolist())
            write_part(work, i, chunks, vectors)
            del shards[str(i)]
            del self.batches[i]
            count_chunk_part(stage, meta["units"], meta["docs"], dups)
            work.save()
            raw.unlink(missing_ok=True)
            raw_emb.unlink(missing_ok=True)


def store_extract_shard(work: WorkDir, stage: dict[str, Any], i: int, rows: int,
                        part: Extraction, write_part) -> None:
    """Checkpoint extraction shard ``i`` (its files are part ``i``'s) and note it done."""
    write_part(work, i, part)
    stage["shards"][str(i)] = {"rows": rows,
                               "stats": {k: int(v) for k, v in part.stats.items()}}


def _submit(client, fn, *args):
    # pure=False: two shards with equal inputs are still two tasks; a task that raises is
    # retried (a worker that dies is handled by the scheduler, which reruns its tasks)
    return client.submit(fn, *args, pure=False, retries=1)


# -- the workers' side --------------------------------------------------------------------
_EMBEDDERS: dict[str, Embedder] = {}
_EXTRACTORS: dict[str, Extractor] = {}


def worker_embedder(spec: str | None) -> Embedder:
    """The embedder ``spec`` on this worker's device, loaded once per worker process."""
    key = spec or ""
    if key not in _EMBEDDERS:
        from gpurag.backends.embed import load_embedder
        from gpurag.device import resolve_device

        _EMBEDDERS[key] = load_embedder(spec, resolve_device(None))  # the worker's device
    return _EMBEDDERS[key]


def chunk_embed_shard(batch: list[DocPart], cfg: IndexConfig, seen: set[str]
                      ) -> tuple[pd.DataFrame, np.ndarray, int, str]:
    """Chunks of one batch (those in ``seen`` and repeats inside the batch dropped), their
    vectors as stored, the number dropped, and the embedder's implementation."""
    from gpurag.backends.part import implementation_name
    from gpurag.pipeline.chunk_embed import embed_batch

    embedder = worker_embedder(cfg.embedder)
    chunks, vectors, dups = embed_batch(batch, embedder, cfg, set(seen))
    return chunks, vectors, dups, implementation_name(embedder)


def extract_shard(key: str, payload: bytes, part: pd.DataFrame, offset: int) -> Extraction:
    """One extraction batch with the pickled extractor (unpickled once per worker)."""
    if key not in _EXTRACTORS:
        _EXTRACTORS[key] = pickle.loads(payload)
    return _EXTRACTORS[key].extract(part, offset=offset)
