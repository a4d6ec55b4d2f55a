"""An on-disk, content-addressed cache of embeddings: (model, text) -> vector.

Rebuilding an index with other graph settings, or re-indexing a corpus that changed a little,
then embeds only what is new. SQLite (WAL) keeps it safe across crashes and processes: each
batch of new vectors is one transaction, so a killed process leaves every batch whole or
absent. ``synchronous=NORMAL`` (WAL: a commit is not fsynced, a checkpoint is) keeps that
atomicity; what an OS crash or power loss can cost is the last batches, which are then
embedded again. A stored blob of the wrong size is never returned: it counts as a miss.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import numpy as np

from gpurag.embed.base import Embedder

LOOKUP_CHUNK = 900  # below SQLite's default limit of bound parameters
DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB of vectors (about 650,000 of 384 dimensions)
ROW_OVERHEAD = 48  # bytes per cached vector besides the vector itself (key, b-tree)
DB_NAME = "embeddings.sqlite"
# Page cache of the connection, KiB (SQLite's default is 2 MiB): a build stores ~1.6 KB a
# vector in batches of thousands, and the key index's pages then stay cached.
CACHE_KIB = 32 << 10


def cache_stats(directory: str | os.PathLike) -> dict | None:
    """Path, vector count and bytes on disk of the cache in ``directory`` (None if none)."""
    path = Path(directory) / DB_NAME
    if not path.is_file():
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            (count,) = db.execute("SELECT count(*) FROM emb").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        count = None
    size = sum(p.stat().st_size for p in path.parent.glob(DB_NAME + "*") if p.is_file())
    return {"path": str(path.parent), "vectors": count, "bytes": size}


class CachedEmbedder:
    """Wraps an :class:`Embedder`; vectors of texts seen before come from the cache."""

    def __init__(self, inner: Embedder, directory: str | os.PathLike,
                 max_bytes: int | None = DEFAULT_MAX_BYTES) -> None:
        self.inner = inner
        self.name, self.dim, self.max_tokens = inner.name, inner.dim, inner.max_tokens
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path / DB_NAME, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # per connection; see the module doc
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self._db.execute("CREATE TABLE IF NOT EXISTS emb (key BLOB PRIMARY KEY, vec BLOB)")
        self._rows = self._db.execute("SELECT count(*) FROM emb").fetchone()[0]
        self._broken = False  # a write failed (a full disk): the cache only reads from then on
        # Bounded: past max_rows vectors the oldest (first inserted) are evicted.
        self.max_rows = (None if max_bytes is None
                         else max(1, max_bytes // (4 * self.dim + ROW_OVERHEAD)))
        self.hits = 0
        self.misses = 0
        self.evicted = 0

    def __getattr__(self, attr: str):
        return getattr(self.inner, attr)

    def _keys(self, texts: list[str]) -> list[bytes]:
        prefix = f"{self.name}\0".encode()
        return [hashlib.blake2b(prefix + t.encode("utf-8", "surrogatepass"),
                                digest_size=16).digest() for t in texts]

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        texts = list(texts)
        return self._encode(texts, lambda rows: self.inner.encode(
            [texts[r] for r in rows], batch_size=batch_size))

    def encode_inputs_for(self, texts: list[str], flat: np.ndarray, lengths: np.ndarray,
                          batch_size: int = 64) -> np.ndarray:
        """:meth:`encode` of ``texts`` whose model inputs are given (the chunker's token ids,
        ``model_inputs``' layout): keyed by the texts, the misses embedded from their ids."""
        from gpurag.embed.tokens import concat_ranges

        lengths = np.asarray(lengths, dtype=np.int64)
        starts = np.cumsum(lengths) - lengths

        def compute(rows: list[int]) -> np.ndarray:
            idx = np.asarray(rows, dtype=np.int64)
            return self.inner.encode_tokens(flat[concat_ranges(starts[idx], lengths[idx])],
                                            lengths[idx], batch_size=batch_size)

        return self._encode(list(texts), compute)

    def _encode(self, texts: list[str], compute) -> np.ndarray:
        """Vectors of ``texts``: cached ones read, the rest from ``compute(rows)`` (the first
        row of each missing text) and stored."""
        keys = self._keys(texts)
        found: dict[bytes, bytes] = {}
        unique = list(dict.fromkeys(keys))
        for i in range(0, len(unique), LOOKUP_CHUNK):
            part = unique[i : i + LOOKUP_CHUNK]
            marks = ",".join("?" * len(part))
            found.update(self._db.execute(
                f"SELECT key, vec FROM emb WHERE key IN ({marks})", part).fetchall())
        size = 4 * self.dim  # a blob of another size (not written by this dim) is a miss
        stale = {k for k, v in found.items() if len(v) != size}  # replaced, not new rows
        found = {k: v for k, v in found.items() if len(v) == size}
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        hit = np.fromiter((k in found for k in keys), dtype=bool, count=len(keys))
        if found:
            hits = np.flatnonzero(hit)
            out[hits] = np.frombuffer(b"".join(found[keys[i]] for i in hits),
                                      dtype=np.float32).reshape(len(hits), self.dim)
        missing = np.flatnonzero(~hit).tolist()
        if missing:
            first_row: dict[bytes, int] = {}
            for i in missing:
                first_row.setdefault(keys[i], i)
            first = list(first_row)
            pos = {k: j for j, k in enumerate(first)}
            vecs = compute([first_row[k] for k in first])
            out[missing] = vecs[[pos[keys[i]] for i in missing]]
            if not self._broken:
                self._store(first, vecs, replaced=len(stale))
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        return out

    def _store(self, keys: list[bytes], vecs: np.ndarray, replaced: int = 0) -> None:
        """Remember new vectors (``replaced`` of them overwrite a stored row: not counted as
        new); a failed write (a full disk) is logged once and the vectors are still
        returned: a cache never fails the build it speeds up."""
        blob = np.ascontiguousarray(vecs, dtype=np.float32).tobytes()
        size = 4 * self.dim
        rows = [(k, blob[j * size : (j + 1) * size]) for j, k in enumerate(keys)]
        try:
            with self._db:  # one transaction: the batch is stored whole or not at all
                self._db.executemany("INSERT OR REPLACE INTO emb VALUES (?, ?)", rows)
                self._rows += len(keys) - replaced
                self._evict()
        except sqlite3.Error as exc:
            import logging

            self._broken = True
            logging.getLogger(__name__).warning(
                "embedding cache %s: cannot store new vectors (%s); not caching from here on",
                self.path, exc)

    def _evict(self) -> None:
        """Delete the oldest vectors past ``max_rows`` (inside the caller's transaction)."""
        if self.max_rows is None or self._rows <= self.max_rows:
            return
        self._rows = self._db.execute("SELECT count(*) FROM emb").fetchone()[0]
        excess = self._rows - self.max_rows
        if excess > 0:
            self._db.execute("DELETE FROM emb WHERE rowid IN (SELECT rowid FROM emb "
                             "ORDER BY rowid LIMIT ?)", (excess,))
            self._rows -= excess
            self.evicted += excess

    def close(self) -> None:
        """Close the database (also done when collected)."""
        self._db.close()
