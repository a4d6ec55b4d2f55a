"""The durable, append-only trace log: ``log.jsonl`` plus ``vectors.f32`` (raw float32 rows).

An append writes the vectors first, then the JSON lines, and fsyncs both before returning: an
acknowledged append survives a kill. On open, a torn last line (a write that was never
acknowledged: no final newline) is cut off, and vector rows beyond the last complete line are
dropped; the cut bytes are saved in ``quarantine.jsonl`` all the same.

A complete line (newline-terminated) is never cut: each record carries a CRC-32 of its own
content (``crc``), and a complete line that is not JSON, lacks a field or fails its CRC is
*damaged*. A damaged record keeps its id slot (its vector row stays aligned) as an empty trace
that no search returns; it is reported (a warning naming the file and line), counted
(:attr:`TraceLog.damaged`, ``memory info``) and, on a writable open, copied verbatim into
``quarantine.jsonl`` so that it can be inspected or repaired by hand. ``log.jsonl`` itself is
left as it is.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import logging
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpurag.errors import IndexFormatError, InputError

LOG = "log.jsonl"
VECTORS = "vectors.f32"
QUARANTINE = "quarantine.jsonl"

logger = logging.getLogger(__name__)
# json.dumps(..., ensure_ascii=False[, sort_keys=True]) without building an encoder per call
_PLAIN = json.JSONEncoder(ensure_ascii=False)
_SORTED = json.JSONEncoder(ensure_ascii=False, sort_keys=True)
_STR = json.encoder.encode_basestring  # what both write a string with (C when available)
_INF = float("inf")


def _int(x: int) -> str:
    """An integer as the encoders write it."""
    return int.__repr__(x) if type(x) is int else _PLAIN.encode(x)


def _float(x: float) -> str:
    """A float as the encoders write it."""
    if type(x) is not float:
        return _PLAIN.encode(x)
    if x != x:
        return "NaN"
    if x == _INF:
        return "Infinity"
    return "-Infinity" if x == -_INF else float.__repr__(x)


@dataclass
class Trace:
    """One interaction trace, kept verbatim."""

    id: int
    text: str
    session: str
    turn: int
    time: float  # seconds since the epoch (or the caller's own monotone clock)
    meta: dict[str, Any]
    key: str = ""  # idempotency key: re-adding a trace with the same key adds nothing


def content_key(session: str, turn: int | None, time: float, text: str) -> str:
    """The idempotency key of a trace without a caller-given one: a digest of its session,
    turn (when given), time and text."""
    # _PLAIN.encode([session, turn, time or None, text]), written out
    # (tests/memory/test_write_batch.py)
    body = (f"[{_STR(session)}, {'null' if turn is None else _int(turn)}, "
            f"{'null' if time != time else _float(time)}, {_STR(text)}]")
    return "d:" + hashlib.blake2b(body.encode("utf-8"), digest_size=12).hexdigest()


def parse_time(value: Any, where: str) -> float:
    """A trace time as a float: numbers as given, ISO 8601 strings or datetimes as epoch
    seconds, ``YYYYMMDD_HH:MM`` (chat-log stamps) too."""
    if value is None:
        return float("nan")
    if isinstance(value, dt.datetime):
        ts = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return ts.timestamp()
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    for fmt in ("%Y%m%d_%H:%M", "%Y%m%d_%H%M", "%Y%m%d"):
        try:
            return dt.datetime.strptime(text, fmt).replace(tzinfo=dt.UTC).timestamp()
        except ValueError:
            pass
    if "_" not in text:
        try:  # epoch seconds given as text (``--time 1700000000``)
            number = float(text)
            if number == number and abs(number) != float("inf"):
                return number
        except ValueError:
            pass
    try:
        return parse_time(dt.datetime.fromisoformat(text), where)
    except ValueError:
        raise InputError(f"{where}: time {value!r} is not a number or an ISO 8601 date") from None


def _crc(rec: dict[str, Any]) -> int:
    """CRC-32 of a record's fields other than ``crc`` (canonical JSON)."""
    body = {k: v for k, v in rec.items() if k != "crc"}
    return zlib.crc32(_SORTED.encode(body).encode("utf-8"))


def record(trace: Trace) -> bytes:
    """The log line of a trace (with the CRC of its content)."""
    return line(trace).encode()


def line(trace: Trace) -> str:
    """:func:`record` as text: the canonical body (what ``_crc`` hashes: the fields in key
    order as ``_SORTED`` writes them, spelled out, see tests/memory/test_write_batch.py) with
    the CRC spliced in."""
    t = trace.time
    body = "".join((
        '{"id": ', _int(trace.id),
        *((', "key": ', _STR(trace.key)) if trace.key else ()),
        *((', "meta": ', _SORTED.encode(trace.meta)) if trace.meta else ()),
        ', "session": ', _STR(trace.session), ', "text": ', _STR(trace.text),
        ', "time": ', "null" if t != t else _float(t), ', "turn": ', _int(trace.turn),
        "}"))
    crc = zlib.crc32(body.encode("utf-8"))
    return f'{body[:-1]}, "crc": {crc}}}\n'


def _spliced_crc_ok(line: bytes, crc: Any) -> bool:
    """Whether ``line`` is a canonical body with its CRC spliced in last (as :func:`record`
    writes it) whose bytes hash to ``crc``: the check without serializing the record again."""
    at = line.rfind(b', "crc": ')
    return at > 0 and line.endswith(b"}") and zlib.crc32(line[:at] + b"}") == crc


def parse_record(line: bytes, slot: int | None) -> Trace:
    """The trace of one complete log line; ``ValueError`` saying why when it is damaged
    (its id is checked against ``slot`` unless that is None)."""
    try:
        rec = json.loads(line)
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
        trace = Trace(int(rec["id"]), str(rec["text"]), str(rec["session"]), int(rec["turn"]),
                      float("nan") if rec.get("time") is None else float(rec["time"]),
                      rec.get("meta") or {}, str(rec.get("key") or ""))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable record ({exc})") from None
    if "crc" in rec and not _spliced_crc_ok(line, rec["crc"]) and rec["crc"] != _crc(rec):
        raise ValueError("its CRC does not match its content")  # (records before format 1.1
        # carry no CRC)
    if not isinstance(trace.meta, dict):
        raise ValueError("meta is not an object")
    if slot is not None and trace.id != slot:
        raise ValueError(f"trace id {trace.id}, expected {slot}")
    return trace


@dataclass
class Damaged:
    """A complete log record that failed its check: kept in place, quarantined, counted."""

    id: int  # the id slot it occupies
    line: int
    offset: int
    reason: str


class TraceLog:
    """Appends traces and their vectors durably; reads them back on open."""

    def __init__(self, root: Path, dim: int, writable: bool = True) -> None:
        self.root = root
        self.dim = dim
        self.writable = writable
        self.log_path = root / LOG
        self.vec_path = root / VECTORS
        self._log = None
        self._vec = None
        self.damaged: list[Damaged] = []

    def read(self) -> tuple[list[Trace], np.ndarray]:
        """All committed traces and their ``(n, dim)`` vectors (repairing a torn tail; a
        damaged complete record becomes an empty placeholder trace, see the module doc)."""
        traces: list[Trace] = []
        self.damaged: list[Damaged] = []
        good = 0
        data = b""
        if self.log_path.exists():
            with open(self.log_path, "rb") as fh:
                data = fh.read()
            pos = 0
            lineno = 0
            while pos < len(data):
                end = data.find(b"\n", pos)
                lineno += 1
                if end < 0:  # torn last line: never acknowledged
                    break
                slot = len(traces)
                try:
                    trace = parse_record(data[pos:end], None)
                    if trace.id != slot:
                        self._realign(traces, trace.id, lineno)
                    traces.append(trace)
                except ValueError as exc:
                    self.damaged.append(Damaged(slot, lineno, pos, str(exc)))
                    traces.append(Trace(slot, "", "", 0, float("nan"), {"damaged": str(exc)}))
                    logger.warning("%s:%d: damaged trace record %d kept aside (%s); it is "
                                   "not searchable, see %s", self.log_path, lineno, slot, exc,
                                   self.root / QUARANTINE)
                pos = end + 1
                good = pos
            if self.writable:
                self._quarantine(data, good)
            if good < len(data) and self.writable:
                with open(self.log_path, "r+b") as fh:
                    fh.truncate(good)
                    os.fsync(fh.fileno())
        n = len(traces)
        row = self.dim * 4
        size = self.vec_path.stat().st_size if self.vec_path.exists() else 0
        if size < n * row:
            raise IndexFormatError(
                f"{self.vec_path}: holds {size // row} vectors for {n} traces in {self.log_path}")
        vectors = np.fromfile(self.vec_path, dtype=np.float32, count=n * self.dim)
        if size > n * row and self.writable:
            with open(self.vec_path, "r+b") as fh:
                fh.truncate(n * row)
                os.fsync(fh.fileno())
        return traces, vectors.reshape(n, self.dim)

    def _realign(self, traces: list[Trace], tid: int, lineno: int) -> None:
        """A sound record whose id is not the next slot: damage that split one record over
        two lines, or joined two into one, shifted the slots; the placeholders of the damaged
        lines just before it are dropped or added so the ids (and vector rows) line up."""
        tail = 0
        while tail < len(traces) and "damaged" in traces[-1 - tail].meta \
                and traces[-1 - tail].text == "":
            tail += 1
        base = len(traces) - tail
        if not tail or tid < base:
            raise IndexFormatError(f"{self.log_path}:{lineno}: trace id {tid}, expected "
                                   f"{len(traces)}")
        reason = traces[-1].meta["damaged"]
        del traces[tid:]
        while len(traces) < tid:
            traces.append(Trace(len(traces), "", "", 0, float("nan"), {"damaged": reason}))
        for d in self.damaged:
            if d.id >= tid:
                d.id = tid - 1 if tid > base else -1  # -1: a stray line, no slot of its own

    def _quarantine(self, data: bytes, good: int) -> None:
        """Copy damaged records (once each) and a torn tail about to be cut into
        ``quarantine.jsonl``, verbatim (base64), durably."""
        items = [(d.offset, d.line, d.id, d.reason,
                  data[d.offset:data.index(b"\n", d.offset)]) for d in self.damaged]
        if good < len(data):
            items.append((good, len(data[:good].split(b"\n")), -1,
                          "torn tail (no final newline): cut from the log", data[good:]))
        if not items:
            return
        path = self.root / QUARANTINE
        seen: set[tuple[int, str]] = set()
        if path.exists():
            for raw in path.read_bytes().splitlines():
                try:
                    q = json.loads(raw)
                    seen.add((int(q["offset"]), str(q["raw"])))
                except (ValueError, KeyError, TypeError):
                    continue
        lines = []
        for offset, line, slot, reason, raw in items:
            enc = base64.b64encode(raw).decode("ascii")
            if (offset, enc) in seen:
                continue
            lines.append(json.dumps({"log": LOG, "line": line, "offset": offset, "id": slot,
                                     "reason": reason, "raw": enc}) + "\n")
        if lines:
            with open(path, "ab") as fh:
                fh.write("".join(lines).encode("utf-8"))
                fh.flush()
                os.fsync(fh.fileno())

    def append(self, traces: Sequence[Trace], vectors: np.ndarray) -> None:
        """Write vectors, then records; return only after both are on disk."""
        if not self.writable:
            raise InputError(f"memory {self.root} is open read-only")
        if self._log is None:
            self._vec = open(self.vec_path, "ab")  # noqa: SIM115 (kept open for appends)
            self._log = open(self.log_path, "ab")  # noqa: SIM115
        vec = np.ascontiguousarray(vectors, dtype=np.float32)
        sizes = (self._vec.tell(), self._log.tell())
        try:
            self._vec.write(vec.tobytes())
            self._vec.flush()
            os.fdatasync(self._vec.fileno())
            self._log.write("".join([line(t) for t in traces]).encode("utf-8"))
            self._log.flush()
            os.fdatasync(self._log.fileno())
        except BaseException:  # a failed write (disk full...) must not shift later rows
            for fh, size in zip((self._vec, self._log), sizes, strict=True):
                try:
                    fh.truncate(size)
                    fh.seek(size)
                except OSError:
                    pass
            raise

    def close(self) -> None:
        for fh in (self._log, self._vec):
            if fh is not None:
                fh.close()
        self._log = self._vec = None
