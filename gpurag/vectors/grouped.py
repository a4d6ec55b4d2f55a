"""Search a vector set whose rows belong to groups, and rank the groups.

The entity index is the index of every surface name: an entity's score for a question is the
best score of its names (an alias that matches well finds its entity, where a count-weighted
mean vector of all names could not). Storing the name vectors once serves both the entity seeds
and incremental alias resolution.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpurag.vectors.faiss_index import search as faiss_search

OVERFETCH = 2  # rows asked per group wanted, before asking again for more


class GroupedIndex:
    """``search(x, k)`` over groups: the ``k`` best groups per query by their best row.

    ``index`` is a FAISS index (or anything with ``search(x, k)`` and ``ntotal``) and
    ``group_of_row`` the group id of each of its rows, in ``[0, n_groups)``.
    """

    def __init__(self, index: Any, group_of_row: np.ndarray, n_groups: int) -> None:
        self.index = index
        self.group_of_row = np.asarray(group_of_row, dtype=np.int64)
        self.n_groups = int(n_groups)
        self.d = int(index.d)

    @property
    def ntotal(self) -> int:
        return self.n_groups if int(self.index.ntotal) else 0

    def searched_by(self, searcher: Callable[[Any], Any]) -> GroupedIndex:
        """The same groups over ``searcher(rows index)`` (e.g. a device searcher of the
        rows: the runtime's searcher factory)."""
        return GroupedIndex(searcher(self.index), self.group_of_row, self.n_groups)

    def _rows(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if hasattr(self.index, "metric_type"):  # a FAISS index
            return faiss_search(self.index, x, k)
        return self.index.search(x, k)  # a device searcher: padded with -1

    def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores (q, k) float32, group ids (q, k) int64)``; -1 and -inf pad rows that
        reach fewer than ``k`` groups."""
        x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
        n_rows = int(self.index.ntotal)
        k = max(1, int(k))
        want = min(n_rows, max(k * OVERFETCH, k + 8))
        while True:
            scores, rows = self._rows(x, max(want, 1))
            s, g, complete = top_groups(scores, rows, self.group_of_row, k)
            if complete.all() or want >= n_rows:
                return s, g
            want = min(n_rows, want * 4)


def top_groups(scores: np.ndarray, rows: np.ndarray, group_of_row: np.ndarray,
               k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first ``k`` distinct groups of each row of a best-first ``(q, m)`` result.

    Returns ``(scores (q, k), groups (q, k), complete (q,))``: ``complete`` is False where the
    ``m`` rows held fewer than ``k`` groups and a row could have been cut off (the result may
    then miss a group whose best row was not fetched).
    """
    q, m = rows.shape
    valid = rows >= 0
    groups = np.where(valid, group_of_row[np.maximum(rows, 0)], -1)
    # First occurrence of each (query, group): sort by group within a query, stable in rank.
    order = np.argsort(groups, axis=1, kind="stable")
    sorted_g = np.take_along_axis(groups, order, axis=1)
    first = np.ones_like(sorted_g, dtype=bool)
    first[:, 1:] = sorted_g[:, 1:] != sorted_g[:, :-1]
    keep = np.zeros_like(first)
    np.put_along_axis(keep, order, first, axis=1)
    keep &= valid
    # Compact the kept entries of each row, in rank order, into the first k columns.
    rank = np.cumsum(keep, axis=1) - 1
    take = keep & (rank < k)
    out_s = np.full((q, k), -np.inf, dtype=np.float32)
    out_g = np.full((q, k), -1, dtype=np.int64)
    r, c = np.nonzero(take)
    out_s[r, rank[r, c]] = scores[r, c]
    out_g[r, rank[r, c]] = groups[r, c]
    n_valid = valid.sum(axis=1)
    complete = (keep.sum(axis=1) >= k) | (n_valid < m)  # enough groups, or every row seen
    return out_s, out_g, complete
