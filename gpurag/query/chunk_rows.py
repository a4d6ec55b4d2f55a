"""The chunk table's columns that a result shows, held once per opened index for taking the
few rows a query returns.

``DataFrame.iloc`` of the returned rows followed by a column lookup per field costs about
8 ms a call on 2 cores, whatever the number of rows (pandas' indexing machinery); taking the
rows from each column's own array costs well under one. A string column backed by Arrow is
taken with Arrow's ``take`` (no copy of the column is made); a column with missing values, or
of another kind, through pandas as before, so every value is the one ``iloc`` gives.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from gpurag.arrays import unique_sorted

FIELDS = ("chunk_id", "doc_id", "title", "text", "char_start", "char_end")
Taker = Callable[[np.ndarray], list]


class ChunkColumns:
    """The :data:`FIELDS` of a chunk table; :meth:`take` gives their values at some rows."""

    def __init__(self, chunks: pd.DataFrame) -> None:
        self.chunks = chunks
        self._takers = [_taker(chunks[name]) for name in FIELDS]

    def take(self, rows: np.ndarray) -> list[list]:
        """Per field of :data:`FIELDS`, its values at ``rows`` (positions), as a list."""
        rows = np.asarray(rows, np.int64)
        return [take(rows) for take in self._takers]


def _taker(column: pd.Series) -> Taker:
    """How to take values of ``column`` at positions: Arrow's take for an Arrow-backed string
    column without nulls, the NumPy array for a plain NumPy column, pandas otherwise."""
    array = column.array
    if isinstance(column.dtype, pd.StringDtype) and hasattr(array, "__arrow_array__"):
        arrow = array.__arrow_array__()
        if arrow.null_count == 0:
            return _arrow_taker(arrow)
    if isinstance(column.dtype, np.dtype) and column.dtype.kind in "iuf":
        values = column.to_numpy()
        return lambda rows: values[rows].tolist()
    return lambda rows: list(column.iloc[rows])


def _arrow_taker(arrow) -> Taker:
    """Arrow's take, chunk by chunk: ``ChunkedArray.take`` over several chunks concatenates the
    whole column first (32 ms a call for the text of 148k passages in two chunks); each
    chunk's own take reads only the rows asked for."""
    chunks = list(getattr(arrow, "chunks", [arrow]))
    if len(chunks) <= 1:
        one = chunks[0] if chunks else arrow
        return lambda rows: one.take(rows).to_pylist()
    starts = np.cumsum([0] + [len(c) for c in chunks])

    def take(rows: np.ndarray) -> list:
        which = np.searchsorted(starts, rows, side="right") - 1
        out = np.empty(len(rows), dtype=object)
        for c in unique_sorted(which).tolist():  # the few chunks the rows fall in
            sel = np.flatnonzero(which == c)
            out[sel] = chunks[c].take(rows[sel] - starts[c]).to_pylist()
        return out.tolist()

    return take
