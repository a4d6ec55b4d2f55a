"""GPURAG_EMBED_CACHE: a rebuild embeds nothing it has embedded before, with equal vectors."""

from __future__ import annotations

import numpy as np

from gpurag.backends.embed import load_embedder
from gpurag.embed.cache import CachedEmbedder


def test_cached_vectors_equal_fresh_ones_and_are_not_recomputed(tmp_path, monkeypatch):
    inner = load_embedder()
    cache = CachedEmbedder(inner, tmp_path / "cache")
    texts = ["the river Sedge", "Kestrel Dynamics", "the river Sedge", "Zoë Ødegård"]
    first = cache.encode(texts)
    np.testing.assert_allclose(first, inner.encode(texts), atol=1e-6)

    calls: list[int] = []
    real = inner.encode
    monkeypatch.setattr(inner, "encode", lambda t, batch_size=64: calls.append(len(t))
                        or real(t, batch_size))
    again = CachedEmbedder(inner, tmp_path / "cache")  # a new process would reopen the file
    second = again.encode([*texts, "a new text"])
    assert calls == [1]
    np.testing.assert_array_equal(second[:4], first)


def test_index_rebuild_with_cache_only_embeds_new_texts(tmp_path, monkeypatch):
    import json

    from gpurag import Index

    monkeypatch.setenv("GPURAG_EMBED_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "title": f"Harbour {i}",
                                          "text": f"Harbour {i} was built by Ada Quill{i}."})
                              + "\n" for i in range(5)), encoding="utf-8")
    a = Index.build(corpus, tmp_path / "a", show_progress=False)
    inner = load_embedder()
    calls: list[int] = []
    real = inner.encode
    monkeypatch.setattr(inner, "encode", lambda t, batch_size=64: calls.append(len(t))
                        or real(t, batch_size))
    b = Index.build(corpus, tmp_path / "b", show_progress=False)
    assert sum(calls) == 0
    np.testing.assert_array_equal(a.passage_vectors(),
                                  b.passage_vectors())


CHILD = r"""
import os, signal, sys
import numpy as np
from gpurag.backends.embed import load_embedder
from gpurag.embed.cache import CachedEmbedder

folder, first_n, second_n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cache = CachedEmbedder(load_embedder(), folder)
np.save(os.path.join(folder, "first.npy"),
        cache.encode([f"stored passage {i}" for i in range(first_n)]))
wal = os.path.join(folder, "embeddings.sqlite-wal")
with open(os.path.join(folder, "wal_bytes"), "w") as fh:
    fh.write(str(os.path.getsize(wal)))
real = cache._db
real.execute("PRAGMA cache_size=4")  # the half-written batch spills pages into the WAL


class DiesMidBatch:  # fault injection: SIGKILL after half of the next batch's rows
    def __getattr__(self, name):
        return getattr(real, name)

    def __enter__(self):
        return real.__enter__()

    def __exit__(self, *exc):
        return real.__exit__(*exc)

    def executemany(self, sql, rows):
        def rows_then_kill():
            for i, row in enumerate(rows):
                if i == len(rows) // 2:
                    os.kill(os.getpid(), signal.SIGKILL)
                yield row
        return real.executemany(sql, rows_then_kill())


cache._db = DiesMidBatch()
cache.encode([f"killed passage {i}" for i in range(second_n)])
"""


def test_kill_during_a_batch_leaves_no_vector_of_it(tmp_path, embedder, monkeypatch):
    """kill -9 while a batch of new vectors is being stored (pages of it already in the WAL):
    the earlier batch reads back exactly, no row of the killed one is stored or returned."""
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    from pathlib import Path

    folder = tmp_path / "cache"
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(repo), os.environ.get("PYTHONPATH", "")]), "GPURAG_PROGRESS": "0"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(folder), "20", "60"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    # pages of the killed batch reached the WAL (uncommitted)
    assert (folder / "embeddings.sqlite-wal").stat().st_size > int(
        (folder / "wal_bytes").read_text())

    db = sqlite3.connect(folder / "embeddings.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("SELECT count(*) FROM emb").fetchone() == (20,)
    db.close()
    calls: list[int] = []
    real = embedder.encode
    monkeypatch.setattr(embedder, "encode", lambda t, batch_size=64: calls.append(len(t))
                        or real(t, batch_size))
    cache = CachedEmbedder(embedder, folder)
    stored = cache.encode([f"stored passage {i}" for i in range(20)])
    assert calls == []
    np.testing.assert_array_equal(stored, np.load(folder / "first.npy"))
    killed = [f"killed passage {i}" for i in range(60)]
    again = cache.encode(killed)
    assert calls == [60]  # nothing of the killed batch was trusted
    np.testing.assert_allclose(again, real(killed), atol=1e-6)


def test_a_stored_blob_of_the_wrong_size_is_a_miss(tmp_path, embedder):
    """A row whose vector is not ``dim`` float32 values is embedded again and replaced,
    never returned."""
    import sqlite3

    cache = CachedEmbedder(embedder, tmp_path / "cache")
    (key,) = cache._keys(["a damaged row"])
    with cache._db:
        cache._db.execute("INSERT INTO emb VALUES (?, ?)", (key, b"\0" * 100))
    cache.close()
    cache = CachedEmbedder(embedder, tmp_path / "cache")
    got = cache.encode(["a damaged row", "a fresh row"])
    assert cache._rows == 2  # the replaced row counted once (the eviction bound reads it)
    np.testing.assert_allclose(got, embedder.encode(["a damaged row", "a fresh row"]),
                               atol=1e-6)
    assert cache.misses == 2
    db = sqlite3.connect(tmp_path / "cache" / "embeddings.sqlite")
    (blob,) = db.execute("SELECT vec FROM emb WHERE key = ?", (key,)).fetchone()
    assert len(blob) == 4 * embedder.dim
