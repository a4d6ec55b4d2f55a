"""Content-addressed on-disk cache of LLM responses: sha256(model + messages + params) -> JSON.

One SQLite file in WAL mode. Every ``put`` is its own committed transaction, so a run killed at
any moment keeps every response it had received and a rerun pays only for the rest. Several
processes may share one cache directory: the one-time setup (switching the journal to WAL,
creating the table) needs an exclusive lock that SQLite's busy timeout does not wait for, so it
runs under an OS file lock beside the database, and only when the database is not yet set up.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Self

CACHE_FORMAT = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created REAL NOT NULL
) WITHOUT ROWID
"""


def cache_key(model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
    """Hex sha256 of the canonical JSON of everything that determines a response."""
    payload = {"v": CACHE_FORMAT, "model": model, "messages": messages, "params": params}
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _retry_while_locked(action: Callable[[], object], timeout_s: float = 60.0) -> None:
    """Run ``action``, retrying while SQLite says the database is locked (a journal-mode switch
    does not wait on the busy timeout when another connection holds a lock)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            action()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


class ResponseCache:
    """Key -> JSON value store on SQLite (WAL); thread-safe; atomic per entry."""

    def __init__(self, directory: str | Path, filename: str = "responses.sqlite") -> None:
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / filename
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=60.0, check_same_thread=False,
                                     isolation_level=None)
        self._set_up()

    def __reduce__(self):  # pickled (to a cluster worker): the same cache, opened there
        return (type(self), (str(self.directory), self.path.name))

    def _set_up(self) -> None:
        """WAL journal and schema, done once per file under an inter-process lock."""
        self._conn.execute("PRAGMA synchronous=NORMAL")
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a+b") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                mode = self._conn.execute("PRAGMA journal_mode").fetchone()[0]
                if str(mode).lower() != "wal":
                    _retry_while_locked(lambda: self._conn.execute("PRAGMA journal_mode=WAL"))
                self._conn.execute(_SCHEMA)
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def get(self, key: str) -> Any | None:
        """The cached value, or ``None``."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        """The cached values of those keys that are present."""
        keys = list(dict.fromkeys(keys))
        found: dict[str, Any] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                part = keys[start:start + 500]
                marks = ",".join("?" * len(part))
                rows = self._conn.execute(
                    f"SELECT key, value FROM responses WHERE key IN ({marks})", part
                ).fetchall()
                found.update((k, json.loads(v)) for k, v in rows)
        return found

    def put(self, key: str, value: Any) -> None:
        """Store one value (committed before returning)."""
        blob = json.dumps(value, ensure_ascii=False)
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses (key, value, created) VALUES (?, ?, ?)",
                (key, blob, time.time()),
            )

    def delete(self, key: str) -> None:
        """Remove one entry (absent keys are ignored)."""
        with self._lock:
            self._conn.execute("DELETE FROM responses WHERE key = ?", (key,))

    def __contains__(self, key: str) -> bool:
        with self._lock:
            row = self._conn.execute("SELECT 1 FROM responses WHERE key = ?", (key,)).fetchone()
        return row is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def clear(self) -> None:
        """Remove every entry."""
        with self._lock:
            self._conn.execute("DELETE FROM responses")

    def stats(self) -> dict[str, Any]:
        """Entries, bytes on disk (database and its write-ahead log) and the oldest and newest
        entry's creation time (Unix seconds; ``None`` when empty)."""
        with self._lock:
            n, oldest, newest = self._conn.execute(
                "SELECT COUNT(*), MIN(created), MAX(created) FROM responses").fetchone()
        size = sum(p.stat().st_size for p in self.directory.glob(self.path.name + "*")
                   if p.is_file() and not p.name.endswith(".lock"))
        return {"entries": int(n), "bytes": int(size), "oldest": oldest, "newest": newest}

    def prune(self, created_before: float) -> int:
        """Remove the entries written before ``created_before`` (Unix seconds) and give their
        space back to the file system; how many were removed. A rerun that needs one of them
        asks the server again."""
        with self._lock:
            removed = self._conn.execute("DELETE FROM responses WHERE created < ?",
                                         (created_before,)).rowcount
            if removed:  # VACUUM writes through the WAL: checkpoint after it
                self._conn.execute("VACUUM")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return int(removed)

    def close(self) -> None:
        """Close the connection (the data stays on disk)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
