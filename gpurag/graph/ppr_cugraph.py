"""pylibcugraph (RAPIDS cuGraph) wrappers: personalized PageRank and flat Leiden on the GPU.

Written against pylibcugraph's documented API (``SGGraph``, ``personalized_pagerank``,
``leiden``); imported lazily, so this module loads without RAPIDS. :func:`available` says
whether it can run. Conventions match :mod:`gpurag.graph.ppr`: cuGraph's ``alpha`` is our
``damping`` (probability of following an edge), and cuGraph sends the mass of dangling nodes
back to the personalization vector, as we do. cuGraph solves one personalization vector per
call (no batching), so a batch is a loop over queries on one cached graph; its ``epsilon`` is
an L1 tolerance like ours.

Leiden: cuGraph returns one flat partition; :func:`leiden_labels` has the signature of the host
Leiden functions in :mod:`gpurag.graph.leiden` (CSR in, one label per node out), so the capped
hierarchy is built by the same re-clustering of oversize communities (see
:func:`gpurag.backends.leiden.leiden_part`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

_INT32_MAX = 2**31 - 1


@lru_cache(maxsize=1)
def available() -> bool:
    """True when pylibcugraph and CuPy import and a GPU is visible."""
    try:
        importlib.import_module("pylibcugraph")
        cupy = importlib.import_module("cupy")
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # any failure means "not usable"
        return False


def _modules() -> tuple[Any, Any]:
    import cupy
    import pylibcugraph

    return pylibcugraph, cupy


def _csr_arrays(indptr: Any, indices: Any, weights: Any, cupy: Any) -> tuple[Any, Any, Any]:
    """CSR as CuPy arrays with one integer type (cuGraph wants vertex and edge types to agree)."""
    nnz = int(indptr[-1])
    n = len(indptr) - 1
    itype = np.int32 if max(nnz, n) <= _INT32_MAX else np.int64
    return (
        cupy.asarray(indptr).astype(itype, copy=False),
        cupy.asarray(indices).astype(itype, copy=False),
        cupy.asarray(weights).astype(np.float32, copy=False),
    )


@dataclass(frozen=True, eq=False)
class CugraphGraph:
    """A pylibcugraph ``SGGraph`` with the resource handle and integer type it was built with."""

    handle: Any
    graph: Any
    itype: Any
    n_nodes: int


def make_graph(
    indptr: Any, indices: Any, weights: Any, store_transposed: bool, symmetric: bool
) -> CugraphGraph:
    """A pylibcugraph ``SGGraph`` over CSR arrays (NumPy, CuPy or CUDA torch), no renumbering.

    ``store_transposed=True`` is what PageRank wants, ``False`` what Leiden wants.
    """
    plc, cupy = _modules()
    offsets, cols, w = _csr_arrays(indptr, indices, weights, cupy)
    handle = plc.ResourceHandle()
    graph = plc.SGGraph(
        resource_handle=handle,
        graph_properties=plc.GraphProperties(is_symmetric=symmetric, is_multigraph=False),
        src_or_offset_array=offsets,
        dst_or_index_array=cols,
        weight_array=w,
        store_transposed=store_transposed,
        renumber=False,
        do_expensive_check=False,
        input_array_format="CSR",
    )
    return CugraphGraph(handle, graph, offsets.dtype, int(offsets.size) - 1)


def personalized_pagerank(
    graph: CugraphGraph,
    reset_rows: Any,
    damping: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 100,
) -> Any:
    """PPR of each row of a validated, row-normalized ``(q, n)`` SciPy CSR reset matrix.

    ``graph`` comes from :func:`make_graph` with ``store_transposed=True``. Returns a CuPy
    ``(q, n)`` float32 array (rows renormalized to sum 1). Non-convergence is not an error:
    cuGraph's float32 iteration can stall above a very small ``tol``.
    """
    plc, cupy = _modules()
    itype = graph.itype
    q = reset_rows.shape[0]
    out = cupy.zeros((q, graph.n_nodes), dtype=cupy.float32)
    indptr = np.asarray(reset_rows.indptr)
    for i in range(q):  # one cuGraph call per query: its API takes one personalization vector
        lo, hi = int(indptr[i]), int(indptr[i + 1])
        vertices, values, _converged = plc.personalized_pagerank(
            resource_handle=graph.handle,
            graph=graph.graph,
            precomputed_vertex_out_weight_vertices=None,
            precomputed_vertex_out_weight_sums=None,
            initial_guess_vertices=None,
            initial_guess_values=None,
            personalization_vertices=cupy.asarray(reset_rows.indices[lo:hi]).astype(itype),
            personalization_values=cupy.asarray(reset_rows.data[lo:hi]).astype(cupy.float32),
            alpha=float(damping),
            epsilon=float(tol),
            max_iterations=int(max_iter),
            do_expensive_check=False,
            fail_on_nonconvergence=False,
        )
        out[i, vertices] = values
    out /= out.sum(axis=1, keepdims=True)
    return out


def leiden_labels(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    n: int,
    resolution: float,
    randomness: float,
    seed: int,
) -> np.ndarray:
    """cuGraph Leiden on a symmetric CSR graph: one label per node (int64, host).

    Same signature as the host backends in :mod:`gpurag.graph.leiden`; ``randomness`` is passed
    as cuGraph's ``theta``. Nodes cuGraph does not report (isolated) become singletons.
    """
    labels = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return labels
    if len(indices) == 0:
        return np.arange(n, dtype=np.int64)
    plc, cupy = _modules()
    g = make_graph(indptr, indices, data, store_transposed=False, symmetric=True)
    theta = float(randomness) if randomness > 0 else 0.01
    try:
        vertices, clusters, _modularity = plc.leiden(
            resource_handle=g.handle,
            random_state=int(seed),
            graph=g.graph,
            max_level=100,
            resolution=float(resolution),
            theta=theta,
            do_expensive_check=False,
        )
    except TypeError:  # releases before 23.06 take neither random_state nor theta
        vertices, clusters, _modularity = plc.leiden(
            g.handle, g.graph, 100, float(resolution), False
        )
    labels[cupy.asnumpy(vertices).astype(np.int64)] = cupy.asnumpy(clusters).astype(np.int64)
    missing = labels < 0
    labels[missing] = labels.max(initial=-1) + 1 + np.arange(int(missing.sum()))
    return labels
