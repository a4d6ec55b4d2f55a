"""FAISS vector indexes: exact inner product for small collections, IVF above a threshold.

Vectors are unit-norm float32, so inner product is cosine similarity. FAISS-GPU is used when
the installed faiss has GPU support and the device is ``cuda``.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

import numpy as np

from gpurag.errors import IndexFormatError
from gpurag.profile import BuildProfile, hnsw_options
from gpurag.vectors.codec import VectorCodec
from gpurag.vectors.faiss_setup import SINGLE_THREAD_WORK, on_one_thread
from gpurag.vectors.faiss_setup import configured_faiss as _faiss

# (M, efConstruction, efSearch) of the build profile "default" (gpurag/profile.py): M = 16: on
# 65k MiniLM name vectors (int8) recall@10 0.988 against exact (M = 32: 0.990), 0.23 ms a
# query instead of 0.36, and 528 bytes a vector instead of 656. A build passes its profile's.
DEFAULT_HNSW = hnsw_options(BuildProfile())


def index_kind(n: int, ivf_threshold: int = 200_000, hnsw_threshold: int | None = None) -> str:
    """The kind of index :func:`build_index` builds over ``n`` vectors: ``"hnsw"`` at or above
    ``hnsw_threshold`` (None: never), else ``"flat"`` below ``ivf_threshold``, else ``"ivf"``."""
    if hnsw_threshold is not None and n >= hnsw_threshold:
        return "hnsw"
    return "flat" if n < ivf_threshold else "ivf"


def build_index(vectors: np.ndarray, ivf_threshold: int = 200_000, seed: int = 42,
                hnsw_threshold: int | None = None, codec: VectorCodec | None = None,
                hnsw: tuple[int, int, int] = DEFAULT_HNSW):
    """A FAISS index over ``vectors`` (n, d): exact inner product for small collections; at or
    above ``hnsw_threshold`` rows an HNSW graph (for the entity and fact seeds, searched once per
    question: sub-millisecond instead of a full scan), else IVF at or above ``ivf_threshold``.
    ``codec`` (default float32) gives the storage precision: int8 or float16 codes through a
    FAISS scalar quantizer with fixed, untrained parameters. ``hnsw``: the graph's ``(M,
    efConstruction, efSearch)``; the file keeps efSearch, which its searches use."""
    faiss = _faiss()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n, dim = vectors.shape
    qt = codec.quantizer_type() if codec is not None else None
    ip = faiss.METRIC_INNER_PRODUCT
    kind = index_kind(n, ivf_threshold, hnsw_threshold)
    if kind == "hnsw":
        m, ef_construction, ef_search = hnsw
        if qt is None:
            index = faiss.IndexHNSWFlat(dim, m, ip)
        else:
            index = faiss.IndexHNSWSQ(dim, qt, m, ip)
            _fix_quantizer(faiss.downcast_index(index.storage), codec)
            index.is_trained = True
        index.hnsw.efConstruction = ef_construction
        index.hnsw.efSearch = ef_search
    elif kind == "flat":
        if qt is None:
            index = faiss.IndexFlatIP(dim)
        else:
            index = faiss.IndexScalarQuantizer(dim, qt, ip)
            _fix_quantizer(index, codec)
    else:
        nlist = int(4 * np.sqrt(n))
        quantizer = faiss.IndexFlatIP(dim)
        if qt is None:
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, ip)
        else:  # codes of the vectors themselves, not of residuals: no data-dependent range
            index = faiss.IndexIVFScalarQuantizer(quantizer, dim, nlist, qt, ip, False)
        rng = np.random.default_rng(seed)
        sample = vectors[rng.choice(n, size=min(n, nlist * 64), replace=False)]
        index.train(sample)
        if qt is not None:
            codec.prepare(index.sq)  # training fitted a range: use the fixed one
        index.nprobe = max(8, nlist // 32)
    index.add(vectors)
    return index


def _fix_quantizer(index, codec: VectorCodec) -> None:
    """A flat scalar-quantizer index with the codec's fixed parameters (nothing to train)."""
    codec.prepare(index.sq)
    index.is_trained = True


def search(index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` (scores, ids) per query row; ids are -1 where fewer than k exist."""
    queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    k = max(1, min(k, index.ntotal)) if index.ntotal else 1
    if index.ntotal == 0:
        empty = np.full((len(queries), k), -1, dtype=np.int64)
        return np.zeros((len(queries), k), dtype=np.float32), empty
    _faiss()  # configured once per process (and this thread once): no count is set per call
    if len(queries) * index.ntotal < SINGLE_THREAD_WORK:  # OpenMP start-up would cost more
        return on_one_thread(index.search, queries, k)
    return index.search(queries, k)


# Query rows x indexed vectors from which a single-threaded scan is worth handing to a helper
# thread beside other stages (gpurag.query.overlap): a 148k-passage int8 scan of one question
# takes ~12 ms on one core; below ~50k vectors the scan is shorter than the hand-over.
OVERLAP_MIN_WORK = 50_000


def scans_every_vector(index) -> bool:
    """Whether ``index`` is a host FAISS index whose search scans every vector (flat or flat
    scalar-quantized: its cost is rows x vectors), or a parted index (``pieces``,
    :class:`~gpurag.vectors.parted.PartedIndex`) of such pieces. Not IVF or HNSW (they scan
    a fraction), a GPU index or a torch searcher (they do not run on a host core). An index
    with tombstones (:class:`~gpurag.vectors.masked.MaskedIndex`: ``inner`` and ``deleted``)
    is its stored index."""
    if hasattr(index, "deleted") and hasattr(index, "inner"):
        return scans_every_vector(index.inner)
    pieces = getattr(index, "pieces", None)
    if pieces is not None:
        return bool(pieces) and all(scans_every_vector(p) for p in pieces)
    faiss = _faiss()
    return isinstance(index, (faiss.IndexFlat, faiss.IndexScalarQuantizer))


def overlaps_scan(index, rows: int) -> bool:
    """Whether a search of ``rows`` query rows in ``index`` is worth running beside other
    work: an exhaustive host scan (:func:`scans_every_vector`: only there does rows x vectors
    give its cost), long enough to hand over, and on one thread (:data:`SINGLE_THREAD_WORK`:
    a larger search already takes every core)."""
    work = rows * int(getattr(index, "ntotal", 0))
    return OVERLAP_MIN_WORK <= work < SINGLE_THREAD_WORK and scans_every_vector(index)


def save_index(index, path: Path) -> None:
    """Write a FAISS index file (FAISS's own binary format, no pickle), checked.

    ``faiss.write_index(index, filename)`` only prints a failed close (a full disk), leaving a
    short file that a commit would seal; here every write goes through Python, so a failed
    write, flush, fsync or close raises ``OSError`` naming the file, and the size on disk must
    equal the bytes written.
    """
    faiss = _faiss()
    path = Path(path)
    fh = open(path, "wb")  # noqa: SIM115 - closed below, its close error checked
    try:
        written = _write_checked(faiss, index, fh, path)
        fh.close()
    except BaseException:
        with contextlib.suppress(OSError):
            fh.close()
        path.unlink(missing_ok=True)  # a short file is never left to be sealed
        raise
    size = path.stat().st_size
    if size != written:
        path.unlink(missing_ok=True)
        raise OSError(errno.EIO, f"wrote {written} bytes but the file holds {size}", str(path))


def _write_checked(faiss, index, fh, path: Path) -> int:
    """Serialize ``index`` into ``fh`` through Python writes, flush and fsync; bytes written."""
    failed: list[OSError] = []

    def write(data: bytes) -> int:
        if failed:
            return 0
        try:
            fh.write(data)
        except OSError as exc:
            failed.append(exc)
            return 0
        return len(data)

    sink = faiss.PyCallbackIOWriter(write)
    try:
        faiss.write_index(index, sink)
    except RuntimeError:
        if not failed:
            raise
    finally:
        del sink
    try:
        if failed:
            raise failed[0]
        fh.flush()
        os.fsync(fh.fileno())
    except OSError as exc:
        raise _named(exc, path) from None
    return fh.tell()


def _named(exc: OSError, path: Path) -> OSError:
    """``exc`` with ``path`` as its file name (a write error on a file object has none)."""
    if exc.filename is None:
        exc = OSError(exc.errno, exc.strerror or str(exc), str(path))
    return exc


def load_index(path: Path, shown: Path | None = None):
    """Read a FAISS index file, naming the file when it is unreadable (as ``shown``: the index
    file itself, not the private view path it is read through)."""
    faiss = _faiss()
    try:
        index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    except RuntimeError:
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as exc:
            name = str(shown or path)
            detail = " ".join(str(exc).replace(str(path), name).split())
            raise IndexFormatError(f"corrupt FAISS index file {name}: {detail}") from exc
    if hasattr(index, "nprobe"):
        index.nprobe = max(8, index.nlist // 32)
    return index  # an HNSW graph searches with the efSearch its build stored


def faiss_implementation() -> str:
    """What writes a stored index (always host FAISS): ``"faiss-cpu VERSION"``."""
    from gpurag.device import package_version

    return f"faiss-cpu {package_version('faiss-cpu') or ''}".strip()
