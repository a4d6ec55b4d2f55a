"""A vector index with some of its rows deleted (tombstones): searched as if they were gone.

A local delete keeps the passage FAISS file as it is (a hard link: nothing rewritten) and
records the removed rows in a small tombstone array (:data:`~gpurag.store.layout.
DELETED_CHUNKS`). :class:`MaskedIndex` searches the stored index without them, the other rows'
ids and scores unchanged:

* a host FAISS index (flat, scalar-quantized, IVF, HNSW) searches with FAISS's own selector
  (``SearchParameters(sel=IDSelectorNot(IDSelectorBatch(deleted)))``, with the index's own
  ``nprobe`` / ``efSearch``), so a deleted row is never a candidate; except a float32 flat
  index searched for :data:`WIDER_MIN_ROWS` or more query rows with at most
  :data:`WIDER_MAX_DELETED` tombstones: a selector takes IndexFlat off its BLAS path, so it is
  searched plainly for ``k`` plus the deleted rows and those dropped (exact: the ids and
  scores of the unmasked search, the kernel a full build's index is searched with; the
  selector's scalar kernel differs from it by up to ~2e-7 in a score and may order exactly
  equal scores differently);
* a :class:`~gpurag.vectors.parted.PartedIndex` masks each piece with its own rows;
* on a device (:func:`~gpurag.backends.searcher.query_index` on cuda) the searcher is made
  from the live rows only (:meth:`MaskedIndex.live_searcher`: :class:`LiveRows` decoded,
  :class:`LiveSearcher` mapping its rows back to ids): exact, its cost that of the live rows,
  whatever the number of tombstones (asking a device searcher for ``k`` plus the deleted rows
  made the scan keep, and the float32 re-rank gather, ``q x (k + |D|)`` candidates: 20k
  tombstones, 1,024 queries, d = 384 gave ~31 GB, and FAISS-GPU refuses ``k > 2048``);
* anything else (a searcher given directly) is searched for ``k`` plus the number of
  deleted rows and the deleted ones dropped.

``reconstruct_n`` / ``reconstruct_batch`` (so :func:`~gpurag.vectors.codec.decode_all`) give a
deleted row as a zero vector: what rewriting the file with the row blanked gave, without the
rewrite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class MaskedIndex:
    """``inner`` (a FAISS index, a PartedIndex or a searcher) without the rows ``deleted``."""

    def __init__(self, inner: Any, deleted: np.ndarray) -> None:
        self.inner = inner
        self.deleted = np.asarray(deleted, np.int64)
        self._gone: np.ndarray | None = None

    @property
    def ntotal(self) -> int:
        return int(self.inner.ntotal)

    @property
    def d(self) -> int:
        return int(self.inner.d)

    @property
    def metric_type(self) -> Any:
        return self.inner.metric_type

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        return self.reconstruct_batch(np.arange(start, start + n, dtype=np.int64))

    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray:
        """The stored vectors of ``rows``, a deleted row's as zeros (as a delete that
        rewrote the file would have blanked it)."""
        from gpurag.vectors.codec import decode_all

        rows = np.asarray(rows, np.int64)
        out = decode_all(self.inner, rows)
        out[self.gone()[rows]] = 0
        return out

    def gone(self) -> np.ndarray:
        """``(ntotal,)`` bool: the deleted rows."""
        if self._gone is None or len(self._gone) != self.ntotal:
            gone = np.zeros(self.ntotal, bool)
            gone[self.deleted[self.deleted < self.ntotal]] = True
            self._gone = gone
        return self._gone

    def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
        if not self.deleted.size:
            return self.inner.search(x, k)
        return masked_search(self.inner, x, k, self.deleted, self.gone())

    def live_searcher(self, make: Callable[[Any], Any]) -> LiveSearcher:
        """A searcher of the live rows only: ``make(LiveRows(self))`` (a device searcher
        factory: it decodes the rows it is given), its rows mapped back to ids."""
        rows = LiveRows(self)
        return LiveSearcher(make(rows), rows.ids, self.ntotal)


class LiveRows:
    """The rows of a :class:`MaskedIndex` that are not deleted, as an index of their own
    (row ``i`` is id ``ids[i]``) for a device copy to decode: ``d``, ``metric_type``,
    ``ntotal`` (the live count), ``reconstruct_n`` / ``reconstruct_batch``."""

    def __init__(self, index: MaskedIndex) -> None:
        self.inner = index.inner
        self.ids = np.flatnonzero(~index.gone()).astype(np.int64)
        self.d = int(index.d)
        self.metric_type = index.metric_type

    @property
    def ntotal(self) -> int:
        return len(self.ids)

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        return self.reconstruct_batch(np.arange(start, start + n, dtype=np.int64))

    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray:
        from gpurag.vectors.codec import decode_all

        return decode_all(self.inner, self.ids[np.asarray(rows, np.int64)])


class LiveSearcher:
    """``searcher`` over the live rows (:class:`LiveRows`) answering in ids: its row ``i``
    is id ``ids[i]``; ``ntotal`` the id space (as :class:`MaskedIndex`), -1 (score 0) padding
    as the host masked search gives."""

    def __init__(self, searcher: Any, ids: np.ndarray, ntotal: int) -> None:
        self.searcher = searcher
        self.ids = np.asarray(ids, np.int64)
        self._ntotal = int(ntotal)
        self.d = int(searcher.d)
        self.implementation = str(getattr(searcher, "implementation", type(searcher).__name__)
                                  ) + f" (live rows {len(self.ids)} of {self._ntotal})"

    @property
    def ntotal(self) -> int:
        return self._ntotal

    def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
        if not len(self.ids):
            return _padded(np.zeros((len(x), 0), np.float32), np.zeros((len(x), 0), np.int64),
                           k)
        scores, rows = self.searcher.search(x, max(1, min(k, len(self.ids))))
        rows = np.asarray(rows, np.int64)
        ids = np.where(rows >= 0, self.ids[np.clip(rows, 0, None)], -1)
        return _padded(np.asarray(scores, np.float32), ids, k)


# A float32 flat index with tombstones is searched plainly for k + |D| and the deleted rows
# dropped (not with FAISS's selector, which leaves the BLAS path) from this many query rows and
# up to this many tombstones. Same-run A/B, 30k x 384 fp32, k = 10, medians, load 2.5-5.8
# (bench/results/masked_flat.md): |D| = 16: 1 q selector 1.9 ms / wider 4.7, 4 q 8.3 / 4.6,
# 64 q 142 / 34, 512 q 1,525 / 161; |D| = 4,096: 4 q 11.7 / 7.5, 64 q 141 / 65. int8 (a scalar
# quantizer, no BLAS) gains nothing (|D| = 1,024, 512 q: 364 / 637 ms) and keeps the selector.
WIDER_MIN_ROWS = 4
WIDER_MAX_DELETED = 4096


def _searched_wider(index: Any, rows: int, n_deleted: int) -> bool:
    """Whether ``index`` (host FAISS) is searched for ``k + n_deleted`` and the deleted rows
    dropped rather than with a selector (see :data:`WIDER_MIN_ROWS`)."""
    from gpurag.vectors.faiss_index import _faiss

    return (isinstance(index, _faiss().IndexFlat) and rows >= WIDER_MIN_ROWS
            and n_deleted <= WIDER_MAX_DELETED)


def _is_host_faiss(index: Any) -> bool:
    from gpurag.vectors.faiss_index import _faiss

    faiss = _faiss()
    return isinstance(index, faiss.Index) and not type(index).__name__.startswith("Gpu")


def _params(index: Any, deleted: np.ndarray):
    """FAISS search parameters excluding ``deleted``, keeping the index's own search depth
    (``nprobe`` of an IVF index, ``efSearch`` of an HNSW one), or None where there are none."""
    from gpurag.vectors.faiss_index import _faiss

    faiss = _faiss()
    sel = faiss.IDSelectorNot(faiss.IDSelectorBatch(len(deleted), faiss.swig_ptr(deleted)))
    if isinstance(index, faiss.IndexIVF):
        params = faiss.SearchParametersIVF(sel=sel, nprobe=int(index.nprobe))
    elif isinstance(index, faiss.IndexHNSW):
        params = faiss.SearchParametersHNSW(sel=sel, efSearch=int(index.hnsw.efSearch))
    else:
        params = faiss.SearchParameters(sel=sel)
    params._keep = (sel, deleted)  # the selector must outlive the call
    return params


def masked_search(index: Any, x: np.ndarray, k: int, deleted: np.ndarray, gone: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` ``(scores, ids)`` of ``index`` without the rows ``deleted`` (sorted ids;
    ``gone``: the same as a bool mask), -1 padded."""
    from gpurag.vectors.parted import PartedIndex, merge_hits

    n = int(index.ntotal)
    if isinstance(index, PartedIndex):
        hits, offsets = [], []
        for piece, lo, hi in zip(index.pieces, index.offsets[:-1], index.offsets[1:],
                                 strict=True):
            if hi <= lo:
                continue
            local = deleted[(deleted >= lo) & (deleted < hi)] - lo
            kk = min(k, int(hi - lo))
            hits.append(masked_search(piece, x, kk, local, gone[lo:hi]) if local.size
                        else _plain(piece, x, kk))
            offsets.append(int(lo))
        if not hits:
            return (np.zeros((len(x), k), np.float32), np.full((len(x), k), -1, np.int64))
        return merge_hits(hits, offsets, k, index._larger_first())
    if _is_host_faiss(index) and deleted.size and _searched_wider(index, len(x), deleted.size):
        return _wider(_plain, index, x, k, deleted, gone)
    if _is_host_faiss(index) and deleted.size:
        from gpurag.vectors.faiss_setup import SINGLE_THREAD_WORK, on_one_thread

        kk = max(1, min(k, n))
        params = _params(index, np.ascontiguousarray(deleted, np.int64))
        if len(x) * n < SINGLE_THREAD_WORK:
            scores, ids = on_one_thread(lambda q, kq: index.search(q, kq, params=params), x, kk)
        else:
            scores, ids = index.search(x, kk, params=params)
        return _padded(np.asarray(scores, np.float32), np.asarray(ids, np.int64), k)
    # a searcher given directly: ask for the deleted rows' worth more and drop them
    return _wider(lambda i, q, kq: i.search(q, kq), index, x, k, deleted, gone)


def _wider(search: Any, index: Any, x: np.ndarray, k: int, deleted: np.ndarray,
           gone: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``search(index, x, k + |deleted|)`` with the deleted rows dropped, the others moved
    up in their order: the top ``k`` of the live rows (at most ``|deleted|`` of the wider hits
    are deleted)."""
    n = int(index.ntotal)
    kk = max(1, min(k + int(deleted.size), n))
    scores, ids = search(index, x, kk)
    scores, ids = np.asarray(scores, np.float32), np.asarray(ids, np.int64)
    bad = (ids < 0) | gone[np.clip(ids, 0, max(n - 1, 0))]
    order = np.argsort(bad, axis=1, kind="stable")  # kept hits first, in their order
    ids = np.where(bad, -1, ids)
    return _padded(np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1), k)


def _plain(index: Any, x: np.ndarray, k: int):
    from gpurag.vectors.faiss_index import search

    return search(index, x, k)


def _padded(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` columns, -1 padded (score 0 at the padding, as FAISS's search wrapper
    gives an empty index)."""
    q = len(ids)
    out_s = np.zeros((q, k), np.float32)
    out_i = np.full((q, k), -1, np.int64)
    m = min(k, ids.shape[1])
    out_s[:, :m], out_i[:, :m] = scores[:, :m], ids[:, :m]
    out_s[out_i < 0] = 0
    return out_s, out_i


def masked(index: Any, deleted: np.ndarray) -> Any:
    """``index`` without the rows ``deleted``: ``index`` itself when there are none."""
    deleted = np.asarray(deleted, np.int64)
    return MaskedIndex(index, deleted) if deleted.size else index


def drop_rows(scores: np.ndarray, rows: np.ndarray, deleted: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``rows`` (``(q, k)`` ids, -1 padded), the ids not in ``deleted`` (sorted),
    moved up in their order, -1 (score 0) after them: results never show a deleted chunk."""
    from gpurag.arrays import isin_sorted

    rows = np.asarray(rows, np.int64)
    bad = rows < 0
    if not rows.size or not deleted.size:
        return scores, rows
    bad |= isin_sorted(rows, deleted)
    if not bad.any():
        return scores, rows
    order = np.argsort(bad, axis=1, kind="stable")
    rows = np.take_along_axis(np.where(bad, -1, rows), order, 1)
    scores = np.take_along_axis(np.where(bad, 0, scores).astype(scores.dtype), order, 1)
    return scores, rows
