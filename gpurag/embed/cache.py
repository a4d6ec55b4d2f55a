"""An on-disk, content-addressed cache of embeddings: (model, text) -> vector.

Rebuilding an index with other graph settings, or re-indexing a corpus that changed a little,
then embeds only what is new. SQLite (WAL) keeps it safe across crashes and processes.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import numpy as np

from gpurag.embed.base import Embedder

LOOKUP_CHUNK = 900  # below SQLite's default limit of bound parameters


class CachedEmbedder:
    """Wraps an :class:`Embedder`; vectors of texts seen before come from the cache."""

    def __init__(self, inner: Embedder, directory: str | os.PathLike) -> None:
        self.inner = inner
        self.name, self.dim, self.max_tokens = inner.name, inner.dim, inner.max_tokens
        path = Path(directory)
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path / "embeddings.sqlite", check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS emb (key BLOB PRIMARY KEY, vec BLOB)")
        except (OSError, sqlite3.Error) as exc:
            from gpurag.errors import ConfigError

            raise ConfigError(f"GPURAG_EMBED_CACHE={directory}: cannot keep the embedding cache "
                              f"there ({exc}); point it at a writable folder or unset it"
                              ) from None
        self.hits = 0
        self.misses = 0

    def __getattr__(self, attr: str):
        return getattr(self.inner, attr)

    def _keys(self, texts: list[str]) -> list[bytes]:
        prefix = f"{self.name}\0".encode()
        return [hashlib.blake2b(prefix + t.encode("utf-8", "surrogatepass"),
                                digest_size=16).digest() for t in texts]

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        texts = list(texts)
        keys = self._keys(texts)
        found: dict[bytes, bytes] = {}
        unique = list(dict.fromkeys(keys))
        for i in range(0, len(unique), LOOKUP_CHUNK):
            part = unique[i : i + LOOKUP_CHUNK]
            marks = ",".join("?" * len(part))
            found.update(self._db.execute(
                f"SELECT key, vec FROM emb WHERE key IN ({marks})", part).fetchall())
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing = [i for i, k in enumerate(keys) if k not in found]
        for i, k in enumerate(keys):
            if k in found:
                out[i] = np.frombuffer(found[k], dtype=np.float32)
        if missing:
            first_row: dict[bytes, int] = {}
            for i in missing:
                first_row.setdefault(keys[i], i)
            first = list(first_row)
            pos = {k: j for j, k in enumerate(first)}
            vecs = self.inner.encode([texts[first_row[k]] for k in first], batch_size=batch_size)
            out[missing] = vecs[[pos[keys[i]] for i in missing]]
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO emb VALUES (?, ?)",
                                     [(k, vecs[j].tobytes()) for j, k in enumerate(first)])
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        return out
