"""Result passages take the chunk table's values as ``DataFrame.iloc`` gives them: Arrow
string columns, NumPy columns, and columns with missing values (taken through pandas)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpurag.query.chunk_rows import FIELDS, ChunkColumns


def _chunks(n: int) -> pd.DataFrame:
    return pd.DataFrame({
        "chunk_id": [f"c{i}" for i in range(n)],
        "doc_id": pd.Series([f"d{i // 2}" for i in range(n)], dtype=object),
        "title": [None if i % 3 == 0 else f"T{i}" for i in range(n)],
        "text": [f"text {i} é" for i in range(n)],
        "char_start": np.arange(n, dtype=np.int64) * 10,
        "char_end": np.arange(n, dtype=np.int64) * 10 + 9,
        "n_tokens": np.ones(n, np.int32),
    })


def test_take_gives_the_values_iloc_gives():
    chunks = _chunks(20)
    cols = ChunkColumns(chunks)
    for rows in (np.array([3]), np.array([5, 0, 19, 5, 9]), np.zeros(0, np.int64)):
        got = cols.take(rows)
        sub = chunks.iloc[rows]
        for name, values in zip(FIELDS, got, strict=True):
            want = list(sub[name])
            assert len(values) == len(want)
            for g, w in zip(values, want, strict=True):
                assert type(g) is type(w) and (g == w or (g != g and w != w)), (name, g, w)


def test_take_over_a_column_of_several_arrow_chunks():
    """A string column read from parquet comes in chunks (two at 148k passages); each chunk is
    taken on its own, the values and their order those of ``iloc``."""
    import pyarrow as pa

    chunks = _chunks(20)
    parts = [chunks["text"].tolist()[a:b] for a, b in ((0, 7), (7, 8), (8, 20))]
    text = pd.Series(pd.arrays.ArrowStringArray(pa.chunked_array(parts)))
    assert text.array.__arrow_array__().num_chunks == 3
    chunks["text"] = text
    cols = ChunkColumns(chunks)
    for rows in (np.array([19, 0, 7, 8, 7, 6, 12]), np.array([7]), np.zeros(0, np.int64)):
        got = cols.take(rows)[FIELDS.index("text")]
        assert got == list(chunks["text"].iloc[rows])
        assert all(type(v) is str for v in got)
