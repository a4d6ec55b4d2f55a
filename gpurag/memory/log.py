"""The durable, append-only trace log: ``log.jsonl`` plus ``vectors.f32`` (raw float32 rows).

An append writes the vectors first, then the JSON lines, and fsyncs both before returning: an
acknowledged append survives a kill. On open, a torn last line (a write that was never
acknowledged) is cut off, and vector rows beyond the last complete line are dropped.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpurag.errors import IndexFormatError, InputError

LOG = "log.jsonl"
VECTORS = "vectors.f32"


@dataclass
class Trace:
    """One interaction trace, kept verbatim."""

    id: int
    text: str
    session: str
    turn: int
    time: float  # seconds since the epoch (or the caller's own monotone clock)
    meta: dict[str, Any]


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
    try:
        return parse_time(dt.datetime.fromisoformat(text), where)
    except ValueError:
        raise InputError(f"{where}: time {value!r} is not a number or an ISO 8601 date") from None


def record(trace: Trace) -> bytes:
    """The log line of a trace."""
    rec = {"id": trace.id, "text": trace.text, "session": trace.session, "turn": trace.turn,
           "time": None if np.isnan(trace.time) else trace.time}
    if trace.meta:
        rec["meta"] = trace.meta
    return (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")


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

    def read(self) -> tuple[list[Trace], np.ndarray]:
        """All committed traces and their ``(n, dim)`` vectors (repairing a torn tail)."""
        traces: list[Trace] = []
        good = 0
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
                try:
                    rec = json.loads(data[pos:end])
                    traces.append(Trace(int(rec["id"]), str(rec["text"]), str(rec["session"]),
                                        int(rec["turn"]), float("nan") if rec.get("time") is None
                                        else float(rec["time"]), rec.get("meta") or {}))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                    if data.find(b"\n", end + 1) < 0 and end + 1 >= len(data):
                        break  # a damaged last line is a torn write as well
                    raise IndexFormatError(
                        f"{self.log_path}:{lineno}: unreadable trace record ({exc})") from exc
                if traces[-1].id != len(traces) - 1:
                    raise IndexFormatError(
                        f"{self.log_path}:{lineno}: trace id {traces[-1].id}, expected "
                        f"{len(traces) - 1}")
                pos = end + 1
                good = pos
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
            self._log.write(b"".join(record(t) for t in traces))
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
