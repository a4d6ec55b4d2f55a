"""A table's bytes depend on its rows, not on the pieces they arrived in: Parquet cuts pages
at the input's chunk boundaries, so without one chunk per column a 50k-passage ``compact``
(stored rows read back) differed from the full build (rows written from its batches)."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from gpurag.store import layout
from gpurag.store.writer import IndexWriter


def _texts(n: int) -> list[str]:
    # long, varied text: the dictionary overflows and plain pages are cut by size
    rng = np.random.default_rng(0)
    words = np.array(["alpha", "beta", "gamma", "delta", "eps", "zeta", "theta", "iota"])
    return [" ".join(words[rng.integers(0, len(words), int(rng.integers(20, 80)))]) + f" {i}"
            for i in range(n)]


def test_the_same_rows_in_other_pieces_give_the_same_file(tmp_path):
    one = pa.table({"chunk_id": [f"c{i}" for i in range(30_000)], "text": _texts(30_000)})
    cuts = [0, 777, 5_000, 13_001, 20_000, 30_000]
    pieces = pa.concat_tables([one.slice(a, b - a) for a, b in itertools.pairwise(cuts)])
    assert pieces.column("text").num_chunks == 5
    def written(name: str, table) -> bytes:
        w = IndexWriter(tmp_path / name)
        w.write_table(layout.CHUNKS, table)
        data = w.path(layout.CHUNKS).read_bytes()
        w.abort()
        return data

    assert written("one", one) == written("pieces", pieces)
    # the build's frames (pandas' pyarrow-backed strings keep the pieces)
    assert written("frame", one.to_pandas()) == written("frame_pieces", pieces.to_pandas())
