"""The scale index (:class:`gpurag.memory.scale.ScaleIndex`) in a memory snapshot, so an
open of a large memory reads it back instead of tokenizing every trace, rebuilding the
inverted lists and training and filling the IVF again at its first search.

Each part is one ``.npy`` file (the IVF as FAISS's own serialization, the term dictionary as
newline-separated UTF-8); the snapshot writer records its size and CRC-32 under
``"optional"`` in ``snapshot.json`` and the index's counts under ``"scale"``. Unlike the
snapshot's core files, a damaged or missing part does not make the snapshot unreadable:
:func:`load` logs one line naming the part and returns None, and the index is rebuilt from the
traces (what an open did before this file existed), with the same results.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from gpurag.memory.postings import Grow, Postings
from gpurag.memory.scale import ScaleIndex
from gpurag.memory.snapshot import verify_optional

logger = logging.getLogger(__name__)

PREFIX = "scale_"
FORMAT = 2  # 2: the co-mention pairs
_GROW = ("session", "turn", "time", "doc_len", "row_ptr", "row_ent", "m")
_POSTINGS = ("sess", "terms", "ent", "pairs")
_VALUED = ("terms", "pairs")  # lists whose values are not all ones


def parts(index: ScaleIndex, discourse: bool) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(arrays, meta)`` of ``index`` for the snapshot writer (``discourse``: whether the
    lexical documents hold the discourse expansions)."""
    from gpurag.vectors.faiss_setup import configured_faiss

    faiss = configured_faiss()

    out: dict[str, np.ndarray] = {}
    for name in _GROW:
        out[f"{PREFIX}{name}.npy"] = getattr(index, name).view()
    for name in _POSTINGS:
        keys, rows, vals = getattr(index, name).merged()
        out[f"{PREFIX}{name}_keys.npy"] = keys
        out[f"{PREFIX}{name}_rows.npy"] = rows
        if name in _VALUED:  # term frequencies, pair fans (the other lists hold ones)
            out[f"{PREFIX}{name}_vals.npy"] = vals
    out[f"{PREFIX}deg.npy"] = index.deg
    out[f"{PREFIX}canon.npy"] = (index.canon_used if index.canon_used is not None
                                 else np.zeros(0, np.int64))
    terms = "\n".join(index.term_ids).encode("utf-8")  # ids are insertion order
    out[f"{PREFIX}terms.npy"] = np.frombuffer(terms, np.uint8)
    if index.dense is not None:
        out[f"{PREFIX}dense.npy"] = faiss.serialize_index(index.dense)
    meta = {"format": FORMAT, "dim": index.dim, "n": index.n, "n_dense": index.n_dense,
            "n_ent_rows": index.n_ent_rows, "nlist": index._nlist, "nprobe": index.nprobe,
            "n_terms": len(index.term_ids), "dense": index.dense is not None,
            "discourse": bool(discourse), "files": sorted(out)}
    return out, meta


def load(folder: Path, meta: dict[str, Any], dim: int, discourse: bool,
         traces: int) -> ScaleIndex | None:
    """The index saved in the snapshot ``folder`` (``meta``: its snapshot.json), or None when
    there is none for these ``traces`` or a part is damaged (logged: it is then rebuilt)."""
    info = meta.get("scale")
    if not info:
        return None
    where = f"memory snapshot {folder}: scale index"
    if (info.get("format") != FORMAT or info.get("dim") != dim
            or info.get("discourse") != bool(discourse) or info.get("n") != traces
            or info.get("n_dense") != traces or info.get("n_ent_rows") != traces):
        logger.warning("%s does not match this memory (saved for %s traces, dim %s, "
                       "discourse %s); rebuilding it", where, info.get("n"), info.get("dim"),
                       info.get("discourse"))
        return None
    bad = verify_optional(folder, meta, info["files"])
    if bad:
        logger.warning("%s is damaged (%s); rebuilding it from the traces", where, bad)
        return None
    try:
        return _restore(folder, info)
    except Exception as exc:  # any unreadable part: rebuild, never fail the open
        logger.warning("%s could not be read (%s: %s); rebuilding it from the traces", where,
                       type(exc).__name__, exc)
        return None


def _restore(folder: Path, info: dict[str, Any]) -> ScaleIndex:
    from gpurag.vectors.faiss_setup import configured_faiss

    faiss = configured_faiss()

    def arr(name: str) -> np.ndarray:
        return np.load(folder / f"{PREFIX}{name}.npy", allow_pickle=False)

    index = ScaleIndex(int(info["dim"]), nlist=info["nlist"], nprobe=int(info["nprobe"]))
    index.entity_rebuilds = 0
    for name in _GROW:
        grow: Grow = getattr(index, name)
        grow.n = 0
        grow.extend(arr(name))
    for name in _POSTINGS:
        keys, rows = arr(f"{name}_keys"), arr(f"{name}_rows")
        vals = arr(f"{name}_vals") if name in _VALUED else np.ones(len(keys), np.float32)
        if not len(keys) == len(rows) == len(vals):
            raise ValueError(f"{name} lists have unequal parts")
        if len(keys) and (np.diff(keys) < 0).any():
            raise ValueError(f"{name} list keys are not sorted")
        post: Postings = getattr(index, name)
        post.set_run(keys, rows, vals)
    index.deg = arr("deg").astype(np.int64)
    canon = arr("canon").astype(np.int64)
    index.canon_used = canon if len(canon) else None
    text = arr("terms").tobytes().decode("utf-8")
    terms = text.split("\n") if text else []
    if len(terms) != int(info["n_terms"]):
        raise ValueError(f"{len(terms)} terms, expected {info['n_terms']}")
    index.term_ids = {t: i for i, t in enumerate(terms)}
    if info["dense"]:
        index.dense = faiss.deserialize_index(arr("dense"))
    index.n = index.n_dense = index.n_ent_rows = int(info["n"])
    if (len(index.session) != index.n or len(index.doc_len) != index.n
            or len(index.m) != index.n or len(index.row_ptr) != index.n + 1
            or (index.dense is not None and index.dense.ntotal != index.n)):
        raise ValueError("parts cover different numbers of traces")
    index.source = "snapshot"
    return index
