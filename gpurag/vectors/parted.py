"""A FAISS index in parts: the stored base index and the small indexes local inserts appended.

A local insert writes its new vectors as a part of their own (a flat index in the base's codec,
:func:`delta_index`) instead of adding them to the stored index and writing all of it again
(:mod:`gpurag.store.parts` names the files; :meth:`~gpurag.store.reader.IndexDir.faiss` reads
them). :class:`PartedIndex` searches every piece and merges the hits by score: row ids run on
from piece to piece (the base's rows, then each part's), as if the vectors had been added to
one index. A flat delta searches its rows exactly, so over an HNSW base the merged results are
at least as close to exact as the base graph with the rows added; over a flat base the ids
are the same, and so are the scores for int8 and fp16 storage (bit for bit); fp32 scores may
differ in the last bits (BLAS sums a product in another order per batch shape, ~5e-8).
``gpurag compact`` (and any full write) gives one file again.

It offers what the callers use of a FAISS index: ``ntotal``, ``d``, ``metric_type``,
``search``, ``reconstruct_n`` and ``reconstruct_batch`` (so :func:`~gpurag.vectors.codec.
decode_all` and the device searchers read it as any index).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gpurag.arrays import unique_sorted
from gpurag.vectors.codec import VectorCodec, decode_all


def delta_index(vectors: np.ndarray, codec: VectorCodec | None):
    """A flat index (inner product, the ``codec``'s storage) over ``vectors``: the kind of
    the parts :class:`PartedIndex` reads."""
    from gpurag.vectors.faiss_index import build_index

    return build_index(vectors, ivf_threshold=len(vectors) + 1, hnsw_threshold=None,
                       codec=codec)


def merge_hits(hits: Sequence[tuple[np.ndarray, np.ndarray]], offsets: Sequence[int], k: int,
               larger_first: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` ``(scores, ids)`` per query over the pieces' hits (each ``(q, k_i)``, ids
    local to its piece, -1 padding), ids shifted by each piece's ``offsets``. Equal scores
    keep the pieces' order (lower ids first, as one index gives them); -1 pads."""
    scores = np.concatenate([s for s, _ in hits], axis=1).astype(np.float32, copy=False)
    ids = np.concatenate([np.where(i >= 0, i + off, -1) for (_, i), off in zip(
        hits, offsets, strict=True)], axis=1).astype(np.int64, copy=False)
    pad = -np.inf if larger_first else np.inf
    key = np.where(ids >= 0, scores, pad)
    order = np.argsort(-key if larger_first else key, axis=1, kind="stable")[:, :k]
    top_ids = np.take_along_axis(ids, order, axis=1)
    top = np.take_along_axis(scores, order, axis=1)
    if top.shape[1] < k:  # fewer rows than k in all pieces together
        extra = k - top.shape[1]
        top = np.pad(top, ((0, 0), (0, extra)), constant_values=0)
        top_ids = np.pad(top_ids, ((0, 0), (0, extra)), constant_values=-1)
    return top, top_ids


class PartedIndex:
    """The stored ``base`` index and its appended ``parts``, searched as one index."""

    def __init__(self, base: Any, parts: Sequence[Any]) -> None:
        self.base = base
        self.parts = list(parts)
        self.pieces = [base, *self.parts]
        self.offsets = np.concatenate(
            [[0], np.cumsum([int(p.ntotal) for p in self.pieces])]).astype(np.int64)
        self.d = int(base.d)
        self.metric_type = base.metric_type

    @property
    def ntotal(self) -> int:
        return int(self.offsets[-1])

    def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS's ``search``: ``(scores, ids)`` of the ``k`` best rows of all pieces."""
        return self._merged(lambda piece, q, kk: _faiss_search(piece, q, kk), x, k)

    def _larger_first(self) -> bool:
        from gpurag.vectors.faiss_setup import configured_faiss

        return self.metric_type == configured_faiss().METRIC_INNER_PRODUCT

    def _merged(self, one: Callable, x: np.ndarray, k: int):
        x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
        live = [(p, int(off)) for p, off in zip(self.pieces, self.offsets[:-1], strict=True)
                if int(p.ntotal)]
        if not live:
            return (np.zeros((len(x), k), np.float32), np.full((len(x), k), -1, np.int64))
        hits = [one(p, x, min(k, int(p.ntotal))) for p, _ in live]
        return merge_hits(hits, [off for _, off in live], k, self._larger_first())

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        return self.reconstruct_batch(np.arange(start, start + n, dtype=np.int64))

    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray:
        """Float32 vectors of the global ``rows``, each from its piece."""
        rows = np.asarray(rows, np.int64)
        out = np.empty((len(rows), self.d), np.float32)
        piece = np.searchsorted(self.offsets, rows, side="right") - 1
        for i in unique_sorted(piece):
            at = np.flatnonzero(piece == i)
            out[at] = decode_all(self.pieces[int(i)], rows[at] - self.offsets[int(i)])
        return out


def _faiss_search(index, x: np.ndarray, k: int):
    from gpurag.vectors.faiss_index import search

    return search(index, x, k)
