"""How vectors are stored: one FAISS file per vector set, its codes in int8, float16 or float32.

A :class:`VectorCodec` is chosen by ``IndexConfig.vector_precision``:

* ``int8`` (default): FAISS ``QT_8bit_uniform`` with a fixed range ``[-r, r]``, ``r = 6 /
  sqrt(dim)`` (0.306 for MiniLM's 384 dimensions, where no component of a unit vector from the
  shared corpora exceeds 0.31): a quarter of float32, recall@10 0.995 against exact float32 search
  on names, facts and passages (``bench/scale.py`` measures it on every build);
* ``fp16``: ``QT_fp16``, half of float32, recall@10 >= 0.9995;
* ``fp32``: plain ``IndexFlatIP`` storage.

The quantizer never depends on the data (the int8 range is fixed, not trained), so a vector
keeps its codes whatever else is indexed with it. Builds pass every new embedding through
:meth:`VectorCodec.round_trip` and work from the stored values from then on: an incremental
update that decodes the stored vectors computes exactly what a full build computes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from gpurag.vectors.faiss_setup import configured_faiss as _faiss

PRECISIONS = ("int8", "fp16", "fp32")
INT8_RANGE_SIGMAS = 6.0  # components of unit vectors have sd 1/sqrt(dim)
_DECODE_ROWS = 65_536
_DIRECT_MAP_LOCK = threading.Lock()  # FAISS builds an IVF's id -> list map without one


@dataclass(frozen=True)
class VectorCodec:
    """The storage precision of a vector set of dimension ``dim``."""

    precision: str
    dim: int

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"vector precision must be one of {', '.join(PRECISIONS)}, "
                             f"got {self.precision!r}")

    @property
    def int8_range(self) -> float:
        return min(1.0, INT8_RANGE_SIGMAS / float(np.sqrt(self.dim)))

    def quantizer_type(self) -> int | None:
        """The FAISS ``ScalarQuantizer`` type, or None for float32 storage."""
        sq = _faiss().ScalarQuantizer
        return {"int8": sq.QT_8bit_uniform, "fp16": sq.QT_fp16, "fp32": None}[self.precision]

    def prepare(self, sq) -> None:
        """Give a ``ScalarQuantizer`` its fixed parameters (int8: the range, not trained)."""
        if self.precision == "int8":
            r = self.int8_range
            _faiss().copy_array_to_vector(np.array([-r, 2 * r], np.float32), sq.trained)

    def _scalar_quantizer(self):
        faiss = _faiss()
        sq = faiss.ScalarQuantizer(self.dim, self.quantizer_type())
        self.prepare(sq)
        return sq

    def round_trip(self, vectors: np.ndarray, *, in_place: bool = False) -> np.ndarray:
        """``vectors`` (n, dim) as the store gives them back: float32, idempotent.
        ``in_place``: overwrite ``vectors`` when they are already contiguous float32 (a
        caller's own fresh embeddings: no second copy)."""
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.precision == "fp32" or not len(x):
            return x
        sq = self._scalar_quantizer()  # FAISS's own rounding (not NumPy's, for float16 too)
        out = x if in_place else np.empty_like(x)
        for start in range(0, len(x), _DECODE_ROWS):
            block = x[start : start + _DECODE_ROWS]
            out[start : start + len(block)] = sq.decode(sq.compute_codes(block))
        return out

    def bytes_per_vector(self) -> int:
        return self.dim * {"int8": 1, "fp16": 2, "fp32": 4}[self.precision]


def codec_for(precision: str, dim: int) -> VectorCodec:
    return VectorCodec(precision, int(dim))


def ensure_direct_map(index) -> None:
    """Give an IVF index its id -> (list, offset) map once: threads decoding from one opened
    index (the service's) must not build it at the same time, nor rebuild it under a reader."""
    faiss = _faiss()
    if index.direct_map.type == faiss.DirectMap.Array:
        return
    with _DIRECT_MAP_LOCK:
        if index.direct_map.type != faiss.DirectMap.Array:
            index.make_direct_map()


def decode_all(index, rows: np.ndarray | None = None) -> np.ndarray:
    """Float32 vectors of a FAISS index built by :func:`~gpurag.vectors.build_index` (flat,
    scalar-quantized, IVF or HNSW): all of them, or the given ``rows`` (ids)."""
    faiss = _faiss()
    n = int(index.ntotal)
    want = np.arange(n, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    out = np.empty((len(want), int(index.d)), np.float32)
    if not len(want):
        return out
    if isinstance(index, faiss.IndexIVF):
        ensure_direct_map(index)
    for start in range(0, len(want), _DECODE_ROWS):
        block = want[start : start + _DECODE_ROWS]
        if rows is None:
            out[start : start + len(block)] = index.reconstruct_n(int(block[0]), len(block))
        else:
            out[start : start + len(block)] = index.reconstruct_batch(block)
    return out
