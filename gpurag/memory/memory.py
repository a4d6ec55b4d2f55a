"""``Memory``: zero-token agent memory over the project's embedder, FAISS and graph code.

Writes append to a durable log (:mod:`gpurag.memory.log`) and update in-memory structures:
the FAISS flat index (``add``), the vocabulary and tags (:mod:`gpurag.memory.vocab`) and the
entity co-mention counts. Reads fold the traces appended since the last read into the tag CSR
and the entity graph (a :func:`gpurag.graph.build_csr` CSR), so every committed trace is seen.
``compact`` persists the derived state (vocabulary, tags; :mod:`gpurag.memory.snapshot`) so
that opening replays only the traces appended since.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import time as _time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from gpurag.arrays import isin_sorted, sorted_lookup
from gpurag.errors import ConfigError, IndexBusyError, InputError
from gpurag.graph.csr import CSRGraph, build_csr
from gpurag.memory import derived, scale_store
from gpurag.memory.config import MemoryConfig
from gpurag.memory.consistency import Dropped, consistency_filter
from gpurag.memory.discourse import BEFORE, Discourse, key, question_attributes, supersede
from gpurag.memory.log import QUARANTINE, Trace, TraceLog, content_key, parse_time
from gpurag.memory.postings import unique
from gpurag.memory.scale import ScaleIndex, Traces, lookup, top
from gpurag.memory.snapshot import read_snapshot, write_snapshot
from gpurag.memory.vectors import VectorStore
from gpurag.memory.views import (
    anchor_hits,
    anchor_mass,
    best_entity_mass,
    coverage_deficit,
    relational_scores,
    temporal_scores,
)
from gpurag.memory.vocab import Vocabulary
from gpurag.runtime import Runtime
from gpurag.store.writer import fsync_dir

FORMAT = "gpurag-memory"
FORMAT_VERSION = 1
CONFIG_FILE = "memory.json"
SNAPSHOT = "compact"
LOCK_TIMEOUT = 30.0  # seconds a writable open waits for another writer by default
TAG_BLOCK = 10_000  # traces tagged per call when all are tagged again (compact)
_TEXT, _SESSION, _TURN, _TIME, _KEY = map(attrgetter, ("text", "session", "turn", "time",
                                                      "key"))


def acquire_lock(path: Path, timeout: float):
    """The exclusive writer lock of a memory, waiting up to ``timeout`` seconds for the
    current holder (whose pid the lock file names) to release it."""
    if not timeout >= 0:
        raise ConfigError(f"memory lock timeout must be a number >= 0, got {timeout}")
    fh = open(path, "a+")  # noqa: SIM115 (held while open)
    deadline = _time.monotonic() + timeout
    pause = 0.01
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if _time.monotonic() >= deadline:
                fh.seek(0)
                holder = fh.read().strip() or "unknown"
                fh.close()
                raise IndexBusyError(
                    f"memory {path.parent} is still open for writing by another process (pid "
                    f"{holder}) after waiting {timeout:g} s; retry later or raise "
                    "--lock-timeout") from None
            _time.sleep(min(pause, max(deadline - _time.monotonic(), 0.0)))
            pause = min(pause * 2, 0.2)
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


_STARTUP_FROZEN = False


def freeze_startup() -> None:
    """``gc.freeze()``, once per process: the objects alive now (in a process that has just
    made its imports, mostly modules, functions, classes, constants) go to the permanent
    generation. The imports leave enough new objects that a full collection falls in a
    fresh process's first appends and walks all of them: ~25 ms of a fresh 10k-trace fill
    (~5-8% of it, idle); frozen, a collection walks only what came after. Reference counting
    frees frozen objects as before, but reference cycles among them, garbage already
    included, are never collected: so this is for a process the caller owns (the ``gpurag
    memory add`` command calls it after its imports), not something the library does to a
    host process on its own."""
    global _STARTUP_FROZEN
    if not _STARTUP_FROZEN:
        _STARTUP_FROZEN = True
        gc.freeze()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused (when it runs) for the duration: the write
    path makes no reference cycles, so a collection during it frees nothing, but each full
    one walks every object the memory holds (a tag list per trace, ...) and a bulk append's
    temporaries (its traces, annotations) promoted into the old generation set them off every
    few batches: at 100k traces about a quarter of an append's CPU time went to them (at 10k,
    a few percent), so appends slowed as the memory grew. Paused, the allocations counted
    carry over to one young collection after the batch. The collector is process-wide
    (``gc.disable``): while this runs no thread of the host process collects cycles; cycles
    other threads make meanwhile are collected after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class Hit:
    """One retrieved trace with its fused score and the score of each view."""

    id: int
    text: str
    session: str
    turn: int
    time: float
    score: float
    views: dict[str, float]
    doc: str = ""  # the passage the trace came from (its session unless the trace says)
    dates: list[str] = field(default_factory=list)  # relative dates resolved (ISO)


@dataclass
class MemoryResult:
    """The answer to one memory search."""

    question: str
    hits: list[Hit]
    anchors: list[str]
    relational_weight: float
    confidence: float  # best dense cosine of the kept hits: low -> the caller may abstain
    dropped: list[Dropped] = field(default_factory=list)

    @property
    def sessions(self) -> list[str]:
        """Sessions of the hits in rank order, each once."""
        return list(dict.fromkeys(h.session for h in self.hits))

    @property
    def docs(self) -> list[str]:
        """Passages of the hits in rank order, each once."""
        return list(dict.fromkeys(h.doc or h.session for h in self.hits))


class Memory:
    """An append-only trace memory with dense, lexical, relational and temporal retrieval.

    ``runtime``: the parts it runs on (embedder, full-output PPR); default a runtime on
    ``device`` (the CPU unless asked)."""

    def __init__(self, path: Path, config: MemoryConfig, dim: int, writable: bool,
                 embedder: Any = None, device: str = "cpu",
                 lock_timeout: float = LOCK_TIMEOUT, runtime: Runtime | None = None) -> None:
        self.path = path
        self.config = config
        self.dim = dim
        self.runtime = runtime if runtime is not None else Runtime(device=device)
        self.device = self.runtime.device
        self._embedder = embedder
        self._lock = None
        if writable:
            self._lock = acquire_lock(path / ".lock", lock_timeout)
        self.log = TraceLog(path, dim, writable)
        self.texts: list[str] = []
        self.sessions: list[str] = []
        self._session_ids: dict[str, int] = {}
        self._session_of: list[int] = []
        self.turns: list[int] = []
        self.times: list[float] = []
        self._stored_keys: list[str] = []
        self._docs: list[str | None] = []  # passage of a trace when not its session
        self._discourse = Discourse()
        self._expansion: list[str] = []  # discourse words added to each lexical document
        self._claims: dict[int, list[tuple[str, str]]] = {}
        self._claim_index: dict[tuple[str, str], list[int]] = {}  # (subject, attr) -> traces
        self._dates: dict[int, list[str]] = {}
        self._read: list[int] = []  # digest of the names the discourse rules read per trace
        self._refs: dict[int, list[str]] = {}  # referents the rules gave a trace
        self._vec = VectorStore(dim)
        self._n = 0
        self.vocab = Vocabulary()
        self._tags: list[list[int]] = []
        self._raw_n: list[int] = []  # how many of a trace's tags are its text's own (the rest:
        # referents), so an open after compaction need not tag the text again
        self._faiss = None
        self._faiss_n = 0
        self._csr_n = -1  # traces folded into the cached tag CSR / graph
        self._canon_used: np.ndarray | None = None
        self._lex = None  # (retriever, n covered)
        self._lex_tail = None
        self._damaged = np.zeros(0, np.int64)  # id slots of damaged log records
        self._keys: dict[str, int] | None = None  # idempotency key -> trace id (built lazily)
        self._index: ScaleIndex | None = None  # the indexed read path (config.scale_from)

    # -- lifecycle ----------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike, embedder: Any = None, device: str = "cpu",
               lock_timeout: float = LOCK_TIMEOUT, runtime: Runtime | None = None,
               **settings: Any) -> Memory:
        """Create an empty memory folder (an existing memory is an error); ``settings`` (see
        :class:`MemoryConfig`) are stored and apply at every open, other settings follow the
        defaults of the gpurag version that opens it."""
        root = Path(path)
        if (root / CONFIG_FILE).exists():
            raise InputError(f"{root} already holds a memory; open it with Memory.open")
        config = MemoryConfig.from_dict({}, **settings)
        runtime = runtime if runtime is not None else Runtime(device=device)
        emb = embedder if embedder is not None else _load_embedder(runtime, config.embedder)
        root.mkdir(parents=True, exist_ok=True)
        meta = {"format": FORMAT, "version": FORMAT_VERSION, "dim": int(emb.dim),
                "embedder": getattr(emb, "name", config.embedder),
                "config": {k: v for k, v in config.to_dict().items() if k in settings}}
        tmp = root / f".{CONFIG_FILE}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, root / CONFIG_FILE)
        for name in ("log.jsonl", "vectors.f32"):
            (root / name).touch()
        fsync_dir(root)
        return cls.open(root, embedder=emb, lock_timeout=lock_timeout, runtime=runtime)

    @classmethod
    def open(cls, path: str | os.PathLike, readonly: bool = False, embedder: Any = None,
             device: str = "cpu", create: bool = False, lock_timeout: float = LOCK_TIMEOUT,
             runtime: Runtime | None = None, **overrides: Any) -> Memory:
        """Open a memory folder (``create=True``: create it when absent). A writable open
        waits up to ``lock_timeout`` seconds for another writer to close it."""
        root = Path(path)
        cfg_path = root / CONFIG_FILE
        if not cfg_path.exists():
            if create:
                return cls.create(root, embedder=embedder, device=device,
                                  lock_timeout=lock_timeout, runtime=runtime, **overrides)
            raise InputError(f"{root} is not a gpurag memory (no {CONFIG_FILE}); "
                             "create one with `gpurag memory add` or Memory.create")
        try:
            meta = json.loads(cfg_path.read_text(encoding="utf-8"))
            if meta.get("format") != FORMAT:
                raise ValueError(f"format {meta.get('format')!r}")
            if int(meta["version"]) > FORMAT_VERSION:
                raise ValueError(f"version {meta['version']} is newer than this gpurag")
            config = MemoryConfig.from_dict(meta.get("config", {}), **overrides)
            dim = int(meta["dim"])
            if dim < 1:
                raise ValueError(f"dim {meta['dim']!r} must be a whole number >= 1")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{cfg_path}: unreadable memory settings ({exc})") from exc
        mem = cls(root, config, dim, not readonly, embedder, device, lock_timeout, runtime)
        try:
            with gc_paused():
                traces, vectors = mem.log.read()
                mem._load(traces, vectors)
        except BaseException:
            mem.close()
            raise
        mem._damaged = np.asarray(sorted({d.id for d in mem.log.damaged if d.id >= 0}),
                                  dtype=np.int64)
        return mem

    def close(self) -> None:
        self.log.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._n

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            self._embedder = _load_embedder(self.runtime, self.config.embedder)
        return self._embedder

    # -- writing ------------------------------------------------------------------------------
    def add(self, trace: str, session: str | None = None, turn: int | None = None,
            time: Any = None, meta: dict[str, Any] | None = None,
            vector: np.ndarray | None = None) -> int:
        """Append one trace; returns its id once it is durably on disk."""
        rec = {"text": trace, "session": session, "turn": turn, "time": time}
        if meta:
            rec["meta"] = meta
        vecs = None if vector is None else np.asarray(vector, dtype=np.float32)[None, :]
        return self.add_many([rec], vectors=vecs)[0]

    def add_many(self, traces: Iterable[str | dict[str, Any]],
                 vectors: np.ndarray | None = None) -> list[int]:
        """Append traces (strings or dicts with ``text``, ``session``, ``turn``, ``time``,
        ``meta``) in one durable write; ``vectors`` are precomputed unit-norm embeddings."""
        keys = self._key_index()
        batch: dict[str, int] = {}  # this call's keys: into ``keys`` only once written
        items: list[Trace] = []
        ids: list[int] = []
        fresh: list[int] = []  # positions in ``traces`` of the traces actually added
        with gc_paused():
            for i, t in enumerate(traces):
                last = items[-1] if items else None
                item = self._validate(t, self._n + len(items), last)
                known = keys.get(item.key, batch.get(item.key)) if item.key else None
                if known is not None:  # added before (a rerun after a kill, say): keep it
                    ids.append(known)
                    continue
                if item.key:
                    batch[item.key] = item.id
                items.append(item)
                ids.append(item.id)
                fresh.append(i)
        if not items:
            return ids
        if vectors is None:
            vectors = self.embedder.encode([t.text for t in items])
        else:
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[0] != len(ids):
                raise InputError(f"vectors have shape {vectors.shape}, expected "
                                 f"({len(ids)}, {self.dim})")
            vectors = vectors[fresh]
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape != (len(items), self.dim):
            raise InputError(f"vectors have shape {vectors.shape}, expected "
                             f"({len(items)}, {self.dim})")
        with gc_paused():
            self.log.append(items, vectors)
            keys.update(batch)
            self._ingest(items, vectors, learn=True)
        return ids

    def _key_index(self) -> dict[str, int]:
        """Idempotency key -> trace id of every stored trace (built on the first add)."""
        if self._keys is None:
            dead = set(self._damaged.tolist())
            self._keys = {}
            for i in range(self._n):
                if i in dead:
                    continue
                key = self._stored_keys[i] or content_key(
                    self.sessions[i], self.turns[i], self.times[i], self.texts[i])
                self._keys.setdefault(key, i)
        return self._keys

    def _validate(self, raw: str | dict[str, Any], tid: int, last: Trace | None) -> Trace:
        rec = raw if type(raw) is dict else {"text": raw} if isinstance(raw, str) else dict(raw)
        get = rec.get
        text = get("text")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"trace {tid}: text must be a non-empty string")
        given = get("session")
        if last is not None:
            last_session, last_turn = last.session, last.turn
        elif self._n:
            last_session, last_turn = self.sessions[-1], self.turns[-1]
        else:
            last_session, last_turn = None, 0
        session = (given if type(given) is str else str(given)) if given not in (None, "") \
            else (last_session if last_session is not None else "default")
        turn = get("turn")
        given_turn = turn is not None
        if turn is None:
            turn = last_turn + 1 if last_session == session else 0
        elif type(turn) is not int:
            try:
                turn = int(turn)
            except (TypeError, ValueError):
                raise InputError(f"trace {tid}: turn {turn!r} is not an integer") from None
        t = get("time")
        when = t if type(t) is float else (_time.time() if t is None
                                           else parse_time(t, f"trace {tid}"))
        meta = get("meta") or {}
        if type(meta) is not dict and not isinstance(meta, dict):
            raise InputError(f"trace {tid}: meta must be an object")
        key = get("key")
        if key is not None:
            if not isinstance(key, str | int) or isinstance(key, bool) or str(key) == "":
                raise InputError(f"trace {tid}: key must be a non-empty string or integer")
            key = f"k:{key}"
        elif given not in (None, "") and t is not None:
            # a session and time given: a content digest (turn too when given) identifies it
            key = content_key(session, turn if given_turn else None, when, text)
        return Trace(tid, text, session, turn, when, meta, key or "")

    def _load(self, traces: list[Trace], vectors: np.ndarray) -> None:
        snap = read_snapshot(self.path / SNAPSHOT)
        done = 0
        raw_tags = None
        annotated = False
        if snap is not None:
            meta, folder = snap
            done = int(meta["counts"].get("traces", 0))
            if done <= len(traces):
                self.vocab = Vocabulary.from_frames(
                    pd.read_parquet(folder / "entities.parquet"),
                    pd.read_parquet(folder / "lower_words.parquet"))
                ptr = np.load(folder / "tag_ptr.npy", allow_pickle=False)
                ids = np.load(folder / "tag_ids.npy", allow_pickle=False)
                self._tags = [ids[ptr[i]:ptr[i + 1]].tolist() for i in range(done)]
                if (folder / "tag_raw.npy").exists():
                    raw_n = np.load(folder / "tag_raw.npy", allow_pickle=False).tolist()
                    got = (derived.restore(folder, done, raw_n) if self.config.discourse
                           else None)
                    annotated = got is not None
                    if got is not None:
                        self._set_results(got)
                        self._raw_n = list(raw_n)
                    else:
                        raw_tags = [t[:r] for t, r in zip(self._tags, raw_n, strict=True)]
            else:
                done = 0
        self._ingest(traces[:done], vectors[:done], learn=False, tag=False, raw_tags=raw_tags,
                     annotated=annotated)
        if done and self._n >= self.config.scale_from and (annotated
                                                            or not self.config.discourse):
            # the index of the snapshot's traces (their tags and lexical documents are the
            # snapshot's own); None (logged) when absent or damaged: the first search builds it
            self._index = scale_store.load(snap[1], snap[0], self.dim, self.config.discourse,
                                           done)
        self._ingest(traces[done:], vectors[done:], learn=True)

    def _ingest(self, items: Sequence[Trace], vectors: np.ndarray, learn: bool,
                tag: bool = True, raw_tags: list[list[int]] | None = None,
                annotated: bool = False) -> None:
        """Add traces to the in-memory state (``annotated``: their tags and discourse
        results are already restored from the snapshot)."""
        if not len(items):
            return
        texts = [t.text for t in items]
        if learn:
            self.vocab.learn(texts)
        if not annotated:
            tags = self._annotate(items, raw_tags)
            if tag:
                self._tags.extend(tags)
        for t in items:
            sid = self._session_ids.setdefault(t.session, len(self._session_ids))
            self._session_of.append(sid)
            doc = t.meta.get("doc") if t.meta else None
            self._docs.append(str(doc) if doc is not None and doc != t.session else None)
        self.texts.extend(texts)
        self.sessions.extend(map(_SESSION, items))
        self.turns.extend(map(_TURN, items))
        self.times.extend(map(_TIME, items))
        self._stored_keys.extend(map(_KEY, items))
        self._vec.extend(vectors)
        self._n += len(items)

    def _annotate(self, items: Sequence[Trace],
                  raw_tags: list[list[int]] | None = None) -> list[list[int]]:
        """Run the write-time discourse rules (:mod:`gpurag.memory.discourse`) over new
        traces, in order; returns each trace's entity tags, its referents included
        (``raw_tags``: the tags of the texts themselves, when known). The batch is tagged in
        one call and its referents in another."""
        raws = self.vocab.tag_many([t.text for t in items]) if raw_tags is None else raw_tags
        self._raw_n.extend(map(len, raws))
        if not self.config.discourse:
            self._expansion.extend([""] * len(items))
            self._read.extend([0] * len(items))
            return list(raws)
        canon = self.vocab.canonical_list()
        surfaces = self.vocab.surfaces
        names = [[surfaces[c] for c in map(canon.__getitem__, raw) if c >= 0] for raw in raws]
        live = [j for j, t in enumerate(items) if t.text]  # (an empty text: a placeholder)
        alive = items if len(live) == len(items) else [items[j] for j in live]
        anns = dict(zip(live, self._discourse.annotate_many(
            list(map(_TEXT, alive)), list(map(_SESSION, alive)), list(map(_TURN, alive)),
            list(map(_TIME, alive)), names if alive is items else [names[j] for j in live]),
            strict=True))
        names_key = derived.names_key
        refs: list[tuple[int, list[str]]] = []
        for j, t in enumerate(items):
            ann = anns.get(j)
            if ann is None:
                self._expansion.append("")
                self._read.append(0)
                continue
            self._read.append(names_key(names[j]))
            if ann.refs:
                self._refs[t.id] = ann.refs
                refs.append((j, ann.refs))
            self._expansion.append(ann.expansion)
            if ann.claims:
                self._claims[t.id] = ann.claims
                for c in ann.claims:
                    self._claim_index.setdefault(c, []).append(t.id)
            if ann.dates:
                self._dates[t.id] = ann.dates
        out = list(raws)
        if refs:
            extra = self.vocab.tag_many([" ".join(r) for _, r in refs])
            for (j, _), more in zip(refs, extra, strict=True):
                out[j] = list(dict.fromkeys([*raws[j], *more]))
        return out

    def doc(self, i: int) -> str:
        """The passage of trace ``i`` (its session unless it came from a one-turn passage)."""
        return self._docs[i] or self.sessions[i]

    def lexical_text(self, i: int) -> str:
        """The lexical document of trace ``i``: its text and its discourse expansion."""
        exp = self._expansion[i]
        return f"{self.texts[i]} {exp}" if exp else self.texts[i]

    def compact(self) -> dict[str, int]:
        """Re-tag every trace against the whole vocabulary and persist the derived state."""
        self._reannotate()
        self._csr_n, self._canon_used = -1, None
        self._lex = self._lex_tail = None
        if self._index is not None:  # tags and expansions changed; the vectors did not
            dense, done = self._index.dense, self._index.n_dense
            self._index = ScaleIndex(self.dim)
            self._index.dense, self._index.n_dense = dense, done
        counts = np.fromiter((len(t) for t in self._tags), dtype=np.int64, count=self._n)
        ptr = np.r_[0, np.cumsum(counts)].astype(np.int64)
        ids = (np.fromiter((i for t in self._tags for i in t), dtype=np.int64, count=int(ptr[-1]))
               if self._n else np.zeros(0, np.int64))
        stats = {"traces": self._n, "entities": len(self.vocab), "tags": int(ptr[-1])}
        optional, extra = {}, {}
        if self._scaled():  # the scale index too, so that an open does not rebuild it
            if self._index is None:
                self._index = ScaleIndex(self.dim)
            self._index.sync(self._traces())
            optional, extra["scale"] = scale_store.parts(self._index, self.config.discourse)
        write_snapshot(self.path / SNAPSHOT,
                       {"entities.parquet": self.vocab.to_frame(),
                        "lower_words.parquet": self.vocab.lower_frame(),
                        **derived.tables(self._results(), self._n)},
                       {"tag_ptr.npy": ptr, "tag_ids.npy": ids,
                        "tag_raw.npy": np.asarray(self._raw_n, dtype=np.int64)}, stats,
                       optional=optional, extra=extra)
        return stats

    def _traces(self) -> Traces:
        """What the scale index reads of the traces held."""
        return Traces(self._n, self.vocab.canonical(), self._session_of, self.turns,
                      self.times, self._tags, self.lexical_text, self._vec)

    def _results(self) -> derived.Results:
        """The discourse results held (the snapshot's ``derived`` tables)."""
        return derived.Results(self._expansion, self._claims, self._dates, self._refs,
                               self._read, self._discourse, self._claim_index)

    def _set_results(self, r: derived.Results) -> None:
        self._expansion, self._claims, self._dates, self._refs = (r.expansion, r.claims,
                                                                  r.dates, r.refs)
        self._read, self._discourse, self._claim_index = r.read, r.discourse, r.claim_index

    def _reannotate(self) -> None:
        """Tags and discourse annotations of every trace against the current vocabulary (the
        texts, and the referents, tagged a block at a time: :meth:`Vocabulary.tag_many`)."""
        raws = self._tag_blocks(self.texts)
        if self.config.discourse and derived.unchanged(  # the rules would read the same
                self._read, self.texts, self.vocab.canonical(), self.vocab.surfaces, raws):
            tags = list(raws)
            held = list(self._refs)
            more = self._tag_blocks([" ".join(self._refs[i]) for i in held])
            for i, extra in zip(held, more, strict=True):
                tags[i] = list(dict.fromkeys([*raws[i], *extra]))
            self._tags = tags
            self._raw_n = [len(r) for r in raws]
            return
        self._discourse = Discourse()
        self._expansion, self._claims, self._dates = [], {}, {}
        self._claim_index, self._raw_n, self._read, self._refs = {}, [], [], {}
        traces = [Trace(i, self.texts[i], self.sessions[i], self.turns[i], self.times[i], {})
                  for i in range(self._n)]
        self._tags = self._annotate(traces, raws)

    def _tag_blocks(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`Vocabulary.tag_many` of ``texts``, ``TAG_BLOCK`` at a time (bounded
        temporaries)."""
        tag_many = self.vocab.tag_many
        return [tags for lo in range(0, len(texts), TAG_BLOCK)
                for tags in tag_many(texts[lo:lo + TAG_BLOCK])]

    def info(self) -> dict[str, Any]:
        """Counts and settings."""
        self._refresh()
        snap = read_snapshot(self.path / SNAPSHOT)
        compacted = snap[0]["counts"]["traces"] if snap else 0
        scaled = self._scaled()
        return {"path": str(self.path), "traces": self._n, "sessions": len(self._session_ids),
                "entities": int((self.vocab.canonical() >= 0).sum()) if len(self.vocab) else 0,
                "vocabulary": len(self.vocab),
                "graph_edges": None if scaled else int(self._graph.n_edges),
                "index": self._index.stats() if scaled else None,
                "compacted_traces": int(compacted), "dim": self.dim,
                "damaged_traces": len(self.log.damaged),
                "damaged": [{"id": d.id, "line": d.line, "reason": d.reason}
                            for d in self.log.damaged],
                "quarantine": str(self.path / QUARANTINE),
                "config": self.config.to_dict()}

    # -- derived read structures --------------------------------------------------------------
    def _refresh(self) -> None:
        """Fold traces appended since the last read into the tag CSR and the entity graph:
        only the new rows are tagged and their co-mentions added, unless the canonical map of
        known entries changed (a new alias), which rebuilds both."""
        if self._scaled():
            if self._index is None:
                self._index = ScaleIndex(self.dim)
            self._index.sync(self._traces())
            idx = self._index
            self._session_arr, self._turn_arr = idx.session.view(), idx.turn.view()
            self._time_arr = idx.time.view()
            return
        if self._csr_n == self._n:
            return
        canon = self.vocab.canonical()
        n_ent = max(len(canon), 1)
        old = self._canon_used
        lo = self._csr_n if (self._csr_n > 0 and old is not None
                             and np.array_equal(canon[: len(old)], old)) else 0
        counts = np.fromiter((len(t) for t in self._tags[lo:self._n]), dtype=np.int64,
                             count=self._n - lo)
        raw = np.fromiter((i for t in self._tags[lo:self._n] for i in t), dtype=np.int64,
                          count=int(counts.sum()))
        rows = np.repeat(np.arange(self._n - lo), counts)
        ent = canon[raw] if len(raw) else raw
        keep = ent >= 0
        new = sp.csr_array((np.ones(int(keep.sum()), np.float32), (rows[keep], ent[keep])),
                           shape=(self._n - lo, n_ent))
        new.sum_duplicates()
        new.data[:] = 1.0
        # co-mention: each trace with m entities adds 1/(m-1) to every pair it holds
        m = np.diff(new.indptr)
        scale = sp.diags_array(1.0 / np.maximum(m - 1, 1).astype(np.float32))
        co_new = sp.csr_array(new.T @ (scale @ new))
        if lo:
            prev, co = self._tag_csr, self._co
            prev.resize((lo, n_ent))
            co.resize((n_ent, n_ent))
            tags = sp.csr_array(sp.vstack([prev, new], format="csr"))
            co = sp.csr_array(co + co_new)
        else:
            tags, co = new, co_new
        self._tag_csr, self._co, self._canon_used = tags, co, canon.copy()
        self._tag_csc = sp.csc_array(tags)
        df = np.diff(self._tag_csc.indptr)
        self._idf = np.log1p(self._n / np.maximum(df, 1)).astype(np.float64)
        cc = sp.coo_array(co)
        off = cc.row != cc.col
        self._graph: CSRGraph = build_csr(cc.row[off], cc.col[off], cc.data[off], n_ent,
                                          symmetric=False)
        self._session_arr = np.asarray(self._session_of, dtype=np.int64)
        self._turn_arr = np.asarray(self.turns, dtype=np.int64)
        self._time_arr = np.asarray(self.times, dtype=np.float64)
        self._csr_n = self._n

    def _scaled(self) -> bool:
        """Whether search reads the indexed path (:mod:`gpurag.memory.scale`)."""
        return self._n >= self.config.scale_from

    def _dense(self, qv: np.ndarray, depth: int) -> list[np.ndarray]:
        """Top-``depth`` trace ids per query: a FAISS flat index over the traces up to its last
        rebuild, plus an exact scan of the newer ones (FAISS's ``add`` copies the whole index
        on some versions, so single appends do not go through it)."""
        from gpurag.vectors.faiss_index import build_index
        from gpurag.vectors.faiss_index import search as faiss_search

        if self._faiss is None or self._n - self._faiss_n > max(2000, self._faiss_n // 10):
            self._faiss = build_index(self._vec[: self._n], ivf_threshold=1 << 62)
            self._faiss_n = self._n
        scores, ids = faiss_search(self._faiss, qv, min(depth, self._faiss_n))
        if self._faiss_n == self._n:
            return [row[row >= 0] for row in ids]
        tail = qv @ self._vec[self._faiss_n:self._n].T
        out = []
        for srow, irow, trow in zip(scores, ids, tail, strict=True):
            allid = np.r_[irow[irow >= 0], np.arange(self._faiss_n, self._n)]
            alls = np.r_[srow[irow >= 0], trow]
            out.append(allid[np.argsort(-alls, kind="stable")[:depth]])
        return out

    def _lexical(self, questions: list[str], k: int) -> list[dict[int, float]]:
        """BM25 top-``k`` per question over every trace: a main index plus a small one over the
        traces appended since it was built (rebuilt when that tail grows past a threshold)."""
        from gpurag.eval.bm25 import BM25Retriever

        def build(lo: int, hi: int):
            texts = [self.lexical_text(i) for i in range(lo, hi)]
            if not _indexes_a_word(texts):  # bm25s refuses (and warns on) a part without one
                return None, lo, hi  # ("?", "ok then": nothing to score in these traces)
            return BM25Retriever(pd.DataFrame({"title": [""] * (hi - lo), "text": texts})), lo, hi

        if self._lex is None or self._n - self._lex[2] > self.config.bm25_rebuild:
            self._lex, self._lex_tail = build(0, self._n), None
        if self._lex[2] < self._n and (self._lex_tail is None or self._lex_tail[2] != self._n):
            self._lex_tail = build(self._lex[2], self._n)
        parts = [p for p in (self._lex, self._lex_tail if self._lex[2] < self._n else None) if p]
        out: list[dict[int, float]] = [{} for _ in questions]
        for retriever, lo, _ in parts:
            if retriever is None:
                continue
            scores, rows = retriever.search(questions, k)
            for d, srow, rrow in zip(out, scores, rows, strict=True):
                for s, r in zip(srow, rrow, strict=True):
                    if r >= 0 and s > 0:
                        d[int(r) + lo] = float(s)
        return out

    def _ppr_fn(self):
        return self.runtime.ppr_scores

    # -- reading ------------------------------------------------------------------------------
    def anchors(self, question: str) -> np.ndarray:
        """Canonical entity ids the question mentions (tagged like a trace)."""
        canon = self.vocab.canonical()
        ids = np.asarray(self.vocab.tag(question), dtype=np.int64)
        ids = canon[ids] if len(ids) else ids
        return unique(ids[ids >= 0]) if len(ids) else ids

    def search(self, question: str, k: int = 5, vector: np.ndarray | None = None) -> MemoryResult:
        """The ``k`` best traces for ``question`` (a batch of one)."""
        vecs = None if vector is None else np.asarray(vector, dtype=np.float32)[None, :]
        return self.search_batch([question], k, vectors=vecs)[0]

    def search_batch(self, questions: Sequence[str], k: int = 5,
                     vectors: np.ndarray | None = None) -> list[MemoryResult]:
        """Search a batch: one embedding call, one FAISS search, one PPR batch for all."""
        questions = list(questions)
        if k < 1:
            raise InputError(f"k must be at least 1, got {k}")
        if not questions:
            return []
        if self._n == 0:
            return [MemoryResult(q, [], [], 0.0, 0.0) for q in questions]
        self._refresh()
        views = self.views(questions, vectors)
        return [self._fuse(q, v, k) for q, v in zip(questions, views, strict=True)]

    def views(self, questions: list[str], vectors: np.ndarray | None = None) -> list[dict]:
        """Candidate traces and each view's (unfused) score for each question."""
        self._refresh()
        cfg = self.config
        qv = self.embedder.encode(questions) if vectors is None else np.asarray(vectors,
                                                                                np.float32)
        depth = min(cfg.candidates, self._n)
        idx = self._index if self._scaled() else None
        dense_ids = idx.dense_ids(qv, depth) if idx else self._dense(qv, depth)
        lex = idx.lexical(questions, depth) if idx else self._lexical(questions, depth)
        anchors = [self.anchors(q) for q in questions]
        if idx is None:
            flat = np.concatenate([np.zeros(0, np.int64), *anchors])
            mass = anchor_mass(self._graph, flat, self._ppr_fn(), cfg.damping)
            best_all = best_entity_mass(self._tag_csr, mass)
        out = []
        start = 0
        for qi, anc in enumerate(anchors):
            a = len(anc)
            cand = set(dense_ids[qi].tolist()) | set(lex[qi])
            if idx is not None:  # the same views from the inverted lists (scale.py)
                idf = idx.idf(anc)
                w = idf / idf.sum() if a else np.zeros(0)
                masses = idx.masses(anc, cfg.damping)
                t_rows, t_vals, deficit = (idx.temporal(anc, w, cfg.tau, cfg.recency) if a
                                           else (np.zeros(0, np.int64), np.zeros(0), 0.0))
                t_order = np.argsort(t_rows)
                t_rows, t_vals = t_rows[t_order], t_vals[t_order]
                if a:
                    cand |= set(idx.relational_top(masses, w, depth).tolist())
                    cand |= set(top(t_rows, t_vals, depth).tolist())

                def rel_of(ids, masses=masses, w=w):
                    return idx.relational_of(ids, masses, w)

                def temp_of(ids, t_rows=t_rows, t_vals=t_vals):
                    return lookup(t_rows, t_vals, ids, 0.0)
            else:
                best = best_all[start:start + a]
                start += a
                w = self._idf[anc] / self._idf[anc].sum() if a else np.zeros(0)
                rel = relational_scores(best, w) if a else np.zeros(self._n, np.float32)
                hits = anchor_hits(self._tag_csc, anc)
                deficit = coverage_deficit(hits, w) if a else 0.0
                temp = temporal_scores(hits, w, self._session_arr, self._turn_arr,
                                       self._time_arr, len(self._session_ids), cfg.tau,
                                       cfg.recency) if a else np.zeros(self._n, np.float32)
                if a:
                    cand |= set(_top(rel, depth).tolist()) | set(_top(temp, depth).tolist())

                def rel_of(ids, rel=rel):
                    return rel[ids]

                def temp_of(ids, temp=temp):
                    return temp[ids]
            attrs = question_attributes(questions[qi])
            subjects = {key(self.vocab.surfaces[int(e)]) for e in anc}
            claimed = self._claimed(subjects, attrs)
            cand |= set(claimed.tolist())
            cand_arr = np.fromiter(cand, dtype=np.int64, count=len(cand))
            if cfg.neighbour:  # the turns next to each candidate, as its context
                cand_arr = unique(np.r_[cand_arr, cand_arr - 1, cand_arr + 1])
                cand_arr = cand_arr[(cand_arr >= 0) & (cand_arr < self._n)]
            if len(self._damaged):  # damaged records are placeholders: never returned
                cand_arr = cand_arr[~isin_sorted(cand_arr, self._damaged)]
            out.append({
                "ids": cand_arr,
                "dense": self._vec[cand_arr] @ qv[qi],
                "bm25": _values_of(lex[qi], cand_arr),
                "relational": rel_of(cand_arr), "temporal": temp_of(cand_arr),
                "deficit": deficit, "n_anchors": a,
                "anchors": [self.vocab.surfaces[int(e)] for e in anc],
                "neighbours": self._neighbours(cand_arr),
                "claim": isin_sorted(cand_arr, claimed).astype(np.float32),
                "attributes": attrs, "subjects": subjects,
                "before": BEFORE.search(questions[qi]) is not None,
            })
        return out

    def _claimed(self, subjects: set[str], attrs: list[str]) -> np.ndarray:
        """Traces claiming an attribute the question asks about, of an entity it names (the
        claim index: no scan)."""
        if not attrs or not subjects or not self._claim_index:
            return np.zeros(0, np.int64)
        found = [self._claim_index.get((s, a), ()) for s in subjects for a in attrs]
        return unique(np.fromiter((i for f in found for i in f), dtype=np.int64))

    def _neighbours(self, cand: np.ndarray) -> np.ndarray:
        """``(len(cand), 2)``: position in ``cand`` of the turn before / after each candidate
        in its session (-1: none among the candidates)."""
        out = np.full((len(cand), 2), -1, dtype=np.int64)
        if len(cand) < 2:
            return out
        order = np.argsort(cand)
        srt = cand[order]
        sess = self._session_arr[srt]
        adj = (np.diff(srt) == 1) & (sess[1:] == sess[:-1])  # i and i+1: one session, in a row
        out[order[1:][adj], 0] = order[:-1][adj]
        out[order[:-1][adj], 1] = order[1:][adj]
        return out

    def rank(self, v: dict, cfg: MemoryConfig | None = None) -> tuple[np.ndarray, np.ndarray,
                                                                      float]:
        """Candidate ids of one question's views in fused rank order, their scores and the
        relational weight used."""
        cfg = cfg or self.config
        scores, w_rel = fuse_scores(v, cfg)
        ids = v["ids"]
        if v["attributes"] and self._claims:
            scores = supersede(ids, scores, self._claims, self._time_arr, v["attributes"],
                               v["subjects"], v["before"])
        order = np.argsort(-scores, kind="stable")
        ids, scores = ids[order], scores[order]
        if cfg.session_weight:
            ids, scores = session_rerank(ids, scores, self._session_arr, cfg.session_weight)
        return ids, scores, w_rel

    def _fuse(self, question: str, v: dict, k: int) -> MemoryResult:
        cfg = self.config
        ids, scores, w_rel = self.rank(v, cfg)
        top = ids[: max(3 * k, k + 10)]
        kept, dropped = consistency_filter(
            top.tolist(), [self.texts[i] for i in top], [self.sessions[i] for i in top],
            [self.times[i] for i in top], scores[: len(top)].tolist(), cfg.policy)
        want = np.asarray(kept[:k], np.int64)  # (kept lies in ``top``: a prefix of ``ids``)
        pos = dict(zip(top[isin_sorted(top, want)].tolist(),
                       np.flatnonzero(isin_sorted(top, want)).tolist(), strict=True))
        at = isin_sorted(v["ids"], want)
        vpos = dict(zip(v["ids"][at].tolist(), np.flatnonzero(at).tolist(), strict=True))
        hits = []
        for i in kept[:k]:
            p, q = pos[i], vpos[i]
            hits.append(Hit(i, self.texts[i], self.sessions[i], self.turns[i], self.times[i],
                            float(scores[p]), {name: float(v[name][q]) for name in
                                               ("dense", "bm25", "relational", "temporal")},
                            self.doc(i), self._dates.get(i, [])))
        confidence = max((h.views["dense"] for h in hits), default=0.0)
        return MemoryResult(question, hits, v["anchors"], w_rel, confidence, dropped)


def _indexes_a_word(texts: list[str]) -> bool:
    """Whether BM25 (bm25s' tokenizer, English stop words: what BM25Retriever indexes) keeps a
    word of ``texts``: lexical's token rule, stopping at the first such word."""
    from gpurag.query.lexical import _TOKEN, _bm25s

    stop = frozenset(_bm25s().stopwords.STOPWORDS_EN)
    return any(w not in stop for t in texts for w in _TOKEN.findall(t.lower()))


def _values_of(scores: dict[int, float], ids: np.ndarray) -> np.ndarray:
    """``scores[i]`` for each of ``ids`` (0.0 where absent), as float64."""
    if not scores:
        return np.zeros(len(ids))
    keys = np.fromiter(scores, np.int64, count=len(scores))
    vals = np.fromiter(scores.values(), np.float64, count=len(scores))
    order = np.argsort(keys)
    keys, vals = keys[order], vals[order]
    at, hit = sorted_lookup(keys, ids)
    return np.where(hit, vals[at], 0.0)


def _top(x: np.ndarray, k: int) -> np.ndarray:
    """Ids of the ``k`` largest positive entries (unordered)."""
    idx = np.argpartition(-x, k - 1)[:k] if k < len(x) else np.arange(len(x))
    return idx[x[idx] > 0]


def _minmax(x: np.ndarray) -> np.ndarray:
    if len(x) == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def relational_weight(deficit: float, n_anchors: int, cfg: MemoryConfig) -> float:
    """The share of the graph score given to the relational view (the rest: temporal): 0
    without anchors; else the anchor coverage deficit itself (``derived_weight``, see
    docs/MEMORY.md), or a logistic in it: one trace holding every anchor leans temporal, none
    holding them all leans relational."""
    if n_anchors == 0:
        return 0.0
    if cfg.derived_weight:  # docs/MEMORY.md: the deficit is the share a path must supply
        return float(np.clip(deficit, 0.0, 1.0))
    return float(1.0 / (1.0 + np.exp(-cfg.coverage_slope * (deficit - cfg.coverage_mid))))


def fuse_scores(v: dict, cfg: MemoryConfig) -> tuple[np.ndarray, float]:
    """Fused score of each candidate of one question, and the relational weight used."""
    w_rel = relational_weight(v["deficit"], v["n_anchors"], cfg)
    graph = w_rel * _minmax(v["relational"]) + (1 - w_rel) * _minmax(v["temporal"])
    w_graph = cfg.w_graph if v["n_anchors"] else 0.0
    score = cfg.w_dense * _minmax(v["dense"]) + cfg.w_bm25 * _minmax(v["bm25"]) + w_graph * graph
    if cfg.w_claim and "claim" in v:
        score = score + cfg.w_claim * v["claim"]
    if cfg.neighbour and len(score):  # a turn's neighbours lend it their score as context
        nb = v["neighbours"]
        padded = np.r_[score, 0.0]
        score = score + cfg.neighbour * np.maximum(padded[nb[:, 0]], padded[nb[:, 1]])
    return score.astype(np.float64), w_rel


def session_rerank(ids: np.ndarray, scores: np.ndarray, session: np.ndarray,
                   weight: float, top: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Add ``weight`` x the summed scores of the ``top`` best candidates of a trace's session:
    a session where several turns match lifts each of them. ``ids``/``scores`` sorted by
    descending score."""
    s = session[ids]
    order = np.argsort(s, kind="stable")  # by session, score order kept within a session
    ss = s[order]
    first = np.r_[True, ss[1:] != ss[:-1]]
    start = np.flatnonzero(first)
    rank_in = np.arange(len(ss)) - np.repeat(start, np.diff(np.r_[start, len(ss)]))
    kept = np.where(rank_in < top, np.maximum(scores[order], 0), 0.0)
    support = np.add.reduceat(kept, start) if len(start) else kept
    per = np.empty(len(ids))
    per[order] = np.repeat(support, np.diff(np.r_[start, len(ss)]))
    blended = scores + weight * per
    new = np.argsort(-blended, kind="stable")
    return ids[new], blended[new]


def _load_embedder(runtime: Runtime, spec: str):
    try:
        return runtime.embedder_for(spec, cache=False)
    except ConfigError:
        raise
    except Exception as exc:  # a missing model file, say
        raise ConfigError(f"memory embedder {spec!r} could not be loaded: {exc}") from exc

