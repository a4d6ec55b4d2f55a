"""The implementation of each component per device, resolved once: :class:`Backends`.

:meth:`Backends.for_device` picks, for ``"cpu"`` or ``"cuda"``:

* PPR: pylibcugraph ``personalized_pagerank`` on cuda when importable, else
  ``kernels.ppr_batched`` (torch sparse x dense power iteration) on cuda, else the host
  :func:`gpurag.graph.ppr.ppr` (SciPy power iteration / frontier push);
* Leiden: pylibcugraph ``leiden`` on cuda when importable (flat; the size-capped hierarchy is
  built by :func:`~gpurag.graph.leiden.hierarchical_leiden` re-running it on oversize
  communities through ``labels_fn``), else the host Leiden (graspologic-native or igraph);
* kNN: FAISS-GPU ``GpuIndexFlatIP`` on cuda when present, else ``kernels.knn.ExactIndex``
  (torch fp16 matmul + top-k, fp32 re-rank) on cuda, else faiss-cpu;
* top-k: ``kernels.topk`` (torch) on cuda, NumPy ``argpartition`` on the host;
* embedder: :func:`gpurag.embed.load_embedder` on the device.

One keyword-only call shape per component, whatever the implementation:

* ``ppr(g, reset, *, k, lo=0, hi=None, gather=None, damping, tol, max_iter=100,
  method="auto", full=False, local_fanout=None) -> PPRTop``: personalized PageRank of every
  row of the ``(q, n)`` reset matrix; only the per-question top-``k`` over nodes ``[lo, hi)``
  (and the scores at ``gather`` ids) come back to the host, never a dense ``(q, n)`` array;
  ``local_fanout`` also returns the scores a candidate-subgraph reranker with that fanout
  reads around the top-``k`` and gathered nodes (on the device, recorded there:
  :class:`~gpurag.graph.ppr_local.LocalScores`; on the host, a view of the rows it computed
  in host memory anyway); ``full=True`` the whole scores (tests);
* ``leiden(g, *, max_cluster_size, seed) -> DataFrame`` (the hierarchy of
  :func:`~gpurag.graph.leiden.hierarchical_leiden`, ``attrs["implementation"]`` set);
* ``knn(vectors, *, approximate_above=None) -> index`` with ``search(queries, k) ->
  (scores, ids)`` and ``ntotal`` (``approximate_above``: a row count from which a host index
  may trade exactness for speed; device indexes stay exact);
* ``topk(scores, k) -> (values, ids)`` per row of a 2-D NumPy or torch array;
* ``embedder(spec, *, device) -> Embedder``.

``Backends.names`` holds the implementation name of each (what ``gpurag info`` prints);
what a build actually ran is recorded by the build (:class:`gpurag.runtime.BuildRecord`).
:class:`DeviceGraph` uploads a ``CSRGraph``'s arrays to the GPU once (cached per graph and
device) and caches what the backends derive from them (the ``P^T`` operator, cuGraph graphs).
torch, CuPy, pylibcugraph and faiss are imported only when a backend that needs them runs.
"""

from __future__ import annotations

import functools
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from gpurag.device import package_version, resolve_device, version_label
from gpurag.graph import leiden as host_leiden
from gpurag.graph import ppr as host_ppr
from gpurag.graph import ppr_cugraph
from gpurag.graph.csr import CSRGraph
from gpurag.graph.ppr_local import DenseScores, LocalScores, local_from_device

PPRFn = Callable[..., Any]
LeidenFn = Callable[..., Any]
KnnFn = Callable[..., Any]
TopKFn = Callable[..., tuple[Any, Any]]

_CUGRAPH_DISTS = ("pylibcugraph-cu13", "pylibcugraph-cu12", "pylibcugraph")
_FAISS_GPU_DISTS = ("faiss-gpu-cu13-cuvs", "faiss-gpu-cu12-cuvs", "faiss-gpu-cu12", "faiss-gpu")


def _version_label(dists: tuple[str, ...], fallback: str) -> str:
    return version_label(*dists) or fallback


# -- availability probes (module-level so tests can substitute them) -----------------------
def _cugraph_available() -> bool:
    return ppr_cugraph.available()


def _faiss_gpu_available() -> bool:
    try:
        import faiss

        return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    except Exception:  # absent, broken, or a CPU build: no FAISS-GPU
        return False


# -- the graph on the device ----------------------------------------------------------------
class DeviceGraph:
    """A ``CSRGraph``'s arrays on a torch device, uploaded once, with derived operators cached.

    ``indptr`` int64, ``indices`` int32, ``weights`` float32 (the host layout). Use
    :meth:`of` to share one upload per graph and device.
    """

    _cache: ClassVar[weakref.WeakKeyDictionary[CSRGraph, dict[str, DeviceGraph]]] = (
        weakref.WeakKeyDictionary()
    )
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, g: CSRGraph, device: str = "cuda") -> None:
        import torch

        self.graph_ref = weakref.ref(g)
        self.device = torch.device(device)
        self.n_nodes = g.n_nodes
        self.n_edges = g.n_edges
        with warnings.catch_warnings():  # read-only (memory-mapped) arrays: never written
            warnings.filterwarnings("ignore", message=".*not writable.*")
            self.indptr, self.indices, self.weights = (
                torch.from_numpy(np.ascontiguousarray(a)).to(self.device)
                for a in (g.indptr, g.indices, g.weights)
            )
        self._derived: dict[str, Any] = {}

    @classmethod
    def of(cls, g: CSRGraph, device: str = "cuda") -> DeviceGraph:
        """The cached :class:`DeviceGraph` of ``g`` on ``device`` (uploaded on first use)."""
        with cls._lock:
            per_graph = cls._cache.setdefault(g, {})
            dg = per_graph.get(str(device))
            if dg is None:
                dg = cls(g, device)
                per_graph[str(device)] = dg
            return dg

    def nbytes(self) -> int:
        """Bytes of the uploaded CSR arrays."""
        return sum(t.numel() * t.element_size() for t in (self.indptr, self.indices, self.weights))

    def transition_operator(self) -> Any:
        """``P^T`` as a torch sparse CSR ``kernels.ppr_batched.TransitionOperator``, cached."""
        op = self._derived.get("pt")
        if op is None:
            from gpurag.kernels.ppr_batched import build_operator

            op = build_operator(self.indptr, self.indices, self.weights, self.device)
            self._derived["pt"] = op
        return op

    def cupy_arrays(self) -> tuple[Any, Any, Any]:
        """Zero-copy CuPy views of ``(indptr, indices, weights)`` (CUDA only)."""
        import cupy

        return tuple(cupy.asarray(t) for t in (self.indptr, self.indices, self.weights))

    def cugraph(self, store_transposed: bool) -> Any:
        """A cached pylibcugraph graph over these arrays (transposed for PageRank)."""
        key = f"cugraph-{store_transposed}"
        graph = self._derived.get(key)
        if graph is None:
            graph = ppr_cugraph.make_graph(
                *self.cupy_arrays(), store_transposed=store_transposed, symmetric=False
            )
            self._derived[key] = graph
        return graph


# -- PPR --------------------------------------------------------------------------------------
def _ppr_output(x: Any, output: str) -> Any:
    """Convert a torch (q, n) result to the requested output form."""
    if output == "device":
        return x
    dense = x.float().cpu().numpy()
    return sp.csr_array(dense) if output == "sparse" else dense


def _check_output(output: str) -> None:
    if output not in ("dense", "sparse", "device"):
        raise ValueError(f"unknown output {output!r}")


def make_kernels_ppr(device: str) -> PPRFn:
    """The ``kernels.ppr_batched`` PPR on ``device`` with the backend call shape."""

    def ppr_kernels(
        g: CSRGraph,
        reset: Any,
        damping: float = 0.5,
        tol: float = 1e-8,
        max_iter: int = 100,
        output: str = "dense",
        method: str = "power",
        eps: float = 1e-6,
        batch_size: int | None = None,
    ) -> Any:
        """Batched power iteration on the device (``method`` and ``eps`` are accepted for
        compatibility with :func:`gpurag.graph.ppr.ppr` and ignored: always power iteration)."""
        from gpurag.kernels.ppr_batched import ppr_batched

        _check_output(output)
        op = DeviceGraph.of(g, device).transition_operator()
        x = ppr_batched(
            op, reset, damping=damping, tol=tol, max_iter=max_iter, batch_size=batch_size
        )
        return _ppr_output(x, output)

    return ppr_kernels


def make_cugraph_ppr(device: str = "cuda") -> PPRFn:
    """pylibcugraph's ``personalized_pagerank`` (one call per query) with the backend shape."""

    def ppr_cugraph_fn(
        g: CSRGraph,
        reset: Any,
        damping: float = 0.5,
        tol: float = 1e-8,
        max_iter: int = 100,
        output: str = "dense",
        method: str = "power",
        eps: float = 1e-6,
    ) -> Any:
        """cuGraph PPR; ``method`` and ``eps`` are accepted for compatibility and ignored."""
        import torch

        _check_output(output)
        host_ppr._check_damping(damping)
        r = host_ppr._normalized_reset(reset, g.n_nodes)
        graph = DeviceGraph.of(g, device).cugraph(store_transposed=True)
        x = ppr_cugraph.personalized_pagerank(graph, r, damping, tol, max_iter)
        return _ppr_output(torch.as_tensor(x, device=device), output)

    return ppr_cugraph_fn


def select_ppr_backend(device: str | None = None) -> tuple[str, PPRFn]:
    """``(name, fn)`` of the full-output PPR for ``device`` (see the module docstring):
    ``fn(g, reset, damping=..., tol=..., max_iter=..., output="dense"|"sparse"|"device")``."""
    dev = resolve_device(device)
    if dev == "cuda" and _cugraph_available():
        name = _version_label(_CUGRAPH_DISTS, "pylibcugraph") + " personalized_pagerank"
        fn = make_cugraph_ppr("cuda")
    elif dev == "cuda":
        name = "kernels.ppr_batched (torch " + (package_version("torch") or "?") + " SpMM)"
        fn = make_kernels_ppr("cuda")
    else:
        name = "scipy " + (package_version("scipy") or "?") + " (gpurag.graph.ppr)"
        fn = host_ppr.ppr
    return name, fn


# -- PPR, top-k only to the host -----------------------------------------------------------------
@dataclass
class PPRTop:
    """What the PPR component returns per question: the top-``k`` ``values`` (float32) and
    node ``ids`` (int64, relative to ``lo``; -1 and ``-inf`` pad rows with fewer nodes), the
    scores at the requested ``gathered`` ids (0 where the id is -1), ``local`` (the scores
    recorded around the top-k and gathered nodes for ``local_fanout``) and ``full`` (the
    whole ``(q, n)`` scores on the host), each only when asked for."""

    values: np.ndarray
    ids: np.ndarray
    gathered: np.ndarray
    full: np.ndarray | None = None
    local: LocalScores | DenseScores | None = None


def numpy_topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of each row of a 2-D array, best first; ties, also at the cut, go to the lower
    id (as a stable sort of the whole row would); padded with -1 ids and ``-inf`` values where
    a row has fewer than ``k`` entries. O(n) per row plus a sort of the ``k`` kept."""
    scores = np.asarray(scores)
    q, n = scores.shape
    kk = min(k, n)
    values = np.full((q, k), -np.inf, dtype=np.float32)
    ids = np.full((q, k), -1, dtype=np.int64)
    if kk > 0 and q:
        part = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
        cut = np.take_along_axis(scores, part, axis=1).min(axis=1, keepdims=True)
        above = scores > cut
        at_cut = scores == cut
        need = kk - above.sum(axis=1, keepdims=True)
        keep = above | (at_cut & (np.cumsum(at_cut, axis=1) <= need))
        _, c = np.nonzero(keep)  # kk per row, by id
        sel = c.reshape(q, kk)
        vals = np.take_along_axis(scores, sel, axis=1)
        order = np.lexsort((sel, -vals), axis=-1)
        ids[:, :kk] = np.take_along_axis(sel, order, axis=1)
        values[:, :kk] = np.take_along_axis(vals, order, axis=1)
    return values, ids


def torch_topk(scores: Any, k: int) -> tuple[Any, Any]:
    """Top-``k`` of each row of a 2-D torch tensor on its device (``kernels.topk``)."""
    from gpurag.kernels.topk import topk_dense

    return topk_dense(scores, k)


def _gather(part: Any, gather: Any) -> Any:
    """Scores of ``part`` (q, m) at ``gather`` (q, g) ids (-1: 0), NumPy or torch alike."""
    safe = gather.clip(0) if isinstance(gather, np.ndarray) else gather.clamp(min=0)
    if isinstance(part, np.ndarray):
        got = np.take_along_axis(part, safe, axis=1)
    else:
        got = part.gather(1, safe)
    return got * (gather >= 0)


def _local_roots(ids: np.ndarray, gather: np.ndarray | None, lo: int) -> np.ndarray:
    """Global node ids (-1 padded) of the top-k and gathered nodes (both relative to ``lo``)."""
    parts = [ids] if gather is None else [ids, np.asarray(gather, np.int64)]
    rel = np.concatenate(parts, axis=1)
    return np.where(rel >= 0, rel + lo, -1)


def host_ppr_topk(g: CSRGraph, reset: Any, *, k: int, lo: int = 0, hi: int | None = None,
                  gather: np.ndarray | None = None, damping: float, tol: float,
                  max_iter: int = 100, method: str = "auto", full: bool = False,
                  local_fanout: Sequence[int] | None = None) -> PPRTop:
    """The host PPR component: :func:`gpurag.graph.ppr.ppr`, then the top-``k`` over
    ``[lo, hi)`` (the scores are computed in host memory, where they already live).

    A batch whose ``(q, n)`` iterate would outgrow :data:`HOST_CHUNK_BYTES` runs in chunks of
    questions (each question's arithmetic is its own, so the scores are the same): at 1,024
    questions on a 2k-passage graph one block cost 3.5x more per question than blocks of 64."""
    r = sp.csr_array(reset) if sp.issparse(reset) else sp.csr_array(np.atleast_2d(reset))
    q_all = r.shape[0]
    rows = max(HOST_CHUNK_MIN_ROWS, HOST_CHUNK_BYTES // max(4 * g.n_nodes, 1))
    if q_all > rows and not full and local_fanout is None:
        parts = [host_ppr_topk(g, r[c0:c0 + rows], k=k, lo=lo, hi=hi,
                               gather=None if gather is None else gather[c0:c0 + rows],
                               damping=damping, tol=tol, max_iter=max_iter, method=method)
                 for c0 in range(0, q_all, rows)]
        return PPRTop(np.concatenate([p.values for p in parts]),
                      np.concatenate([p.ids for p in parts]),
                      np.concatenate([p.gathered for p in parts]), None, None)
    scores = host_ppr.ppr(g, r, method=method, damping=damping, tol=tol,
                          max_iter=max_iter, output="dense")
    part = scores[:, lo:hi]
    values, ids = numpy_topk(part, k)
    q = scores.shape[0]
    gathered = (_gather(part, np.asarray(gather, np.int64)).astype(np.float32)
                if gather is not None else np.zeros((q, 0), np.float32))
    # The rows are in host memory already: a reranker reads them where they are (recording
    # the local scores would only redo its own neighbour selection over more roots).
    local = DenseScores(scores) if local_fanout is not None else None
    return PPRTop(values, ids, gathered, scores if full else None, local)


# Host memory one chunk of a batch's (rows, n) PPR iterate may take (at least the rows below).
HOST_CHUNK_BYTES = 8 << 20
HOST_CHUNK_MIN_ROWS = 64

# Device memory one chunk of full (rows, n) PPR scores may take before its top-k is taken.
DEVICE_CHUNK_BYTES = 1 << 30


def make_device_ppr_topk(score_fn: PPRFn, device: str) -> PPRFn:
    """The PPR component over a device ``score_fn`` (``output="device"``): questions run in
    chunks whose ``(rows, n)`` scores fit :data:`DEVICE_CHUNK_BYTES`; only each chunk's top-k
    and gathered scores are copied to the host."""

    def ppr_topk(g: CSRGraph, reset: Any, *, k: int, lo: int = 0, hi: int | None = None,
                 gather: np.ndarray | None = None, damping: float, tol: float,
                 max_iter: int = 100, method: str = "auto", full: bool = False,
                 local_fanout: Sequence[int] | None = None) -> PPRTop:
        import torch

        r = sp.csr_array(reset) if sp.issparse(reset) else sp.csr_array(np.atleast_2d(reset))
        q, n = r.shape
        rows = max(1, DEVICE_CHUNK_BYTES // max(4 * n, 1))
        values, ids, gathered, fulls, locals_ = [], [], [], [], []
        gather_t = (torch.as_tensor(np.asarray(gather, np.int64), device=device)
                    if gather is not None else None)
        for c0 in range(0, q, rows):
            x = score_fn(g, r[c0:c0 + rows], damping=damping, tol=tol, max_iter=max_iter,
                         output="device")
            part = x[:, lo:hi]
            v, i = torch_topk(part, k)
            values.append(v.float().cpu().numpy())
            ids.append(i.cpu().numpy().astype(np.int64))
            if gather_t is not None:
                gathered.append(_gather(part, gather_t[c0:c0 + rows]).float().cpu().numpy())
            if full:
                fulls.append(x.float().cpu().numpy())
            if local_fanout is not None:  # lists chosen on the device: no (rows, n) copy
                dg = DeviceGraph.of(g, device)
                roots = _local_roots(ids[-1], None if gather is None else
                                     np.asarray(gather)[c0:c0 + rows], lo)
                locals_.append(local_from_device(x.float(), dg.indptr, dg.indices, roots,
                                                 local_fanout, lo))
            del x, part
        return PPRTop(
            _cat(values, (0, k)).astype(np.float32),
            _cat(ids, (0, k)).astype(np.int64),
            _cat(gathered, (q, 0)).astype(np.float32),
            _cat(fulls, (0, n)).astype(np.float32) if full else None,
            LocalScores.concat(locals_) if locals_ else None,
        )

    return ppr_topk


def _cat(parts: list[np.ndarray], shape: tuple[int, int]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(shape)


# -- Leiden -----------------------------------------------------------------------------------
def _host_leiden_name() -> str:
    return _version_label(("graspologic-native", "igraph"), "host leiden (missing)")


def select_leiden_backend(device: str | None = None) -> tuple[str, LeidenFn]:
    """``(name, fn)``: cuGraph Leiden (flat, the capped hierarchy by re-running it through
    ``hierarchical_leiden(labels_fn=...)``) on cuda when importable, else the host
    :func:`~gpurag.graph.leiden.hierarchical_leiden`."""
    dev = resolve_device(device)
    if dev == "cuda" and _cugraph_available():
        name = _version_label(_CUGRAPH_DISTS, "pylibcugraph") + " leiden"
        fn = functools.partial(host_leiden.hierarchical_leiden,
                               labels_fn=ppr_cugraph.leiden_labels, implementation=name)
    else:
        name = _host_leiden_name()
        fn = host_leiden.hierarchical_leiden
    return name, fn


# -- kNN --------------------------------------------------------------------------------------
class ReducedHNSW:
    """FAISS HNSW over PCA-reduced, re-normalized vectors; queries are reduced the same way.

    Scores are inner products in the reduced space: callers that need exact scores rescore.
    """

    def __init__(self, vectors: np.ndarray, search_dim: int | None = 128, hnsw_m: int = 16,
                 ef_search: int = 32) -> None:
        from gpurag.vectors.faiss_index import _faiss

        faiss = _faiss()  # this thread at the process's thread count (HNSW adds depend on it)

        x = np.ascontiguousarray(vectors, dtype=np.float32)
        n, dim = x.shape
        self.pca = None
        if search_dim and search_dim < dim:
            self.pca = faiss.PCAMatrix(dim, search_dim)
            sample = np.random.default_rng(0).choice(n, size=min(n, 50_000), replace=False)
            self.pca.train(x[np.sort(sample)])
        reduced = self._reduce(x)
        self.index = faiss.IndexHNSWFlat(reduced.shape[1], hnsw_m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = 40
        self.index.hnsw.efSearch = ef_search
        self.index.add(reduced)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def _reduce(self, x: np.ndarray) -> np.ndarray:
        if self.pca is None:
            return x
        out = self.pca.apply(np.ascontiguousarray(x, dtype=np.float32))
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.index.hnsw.efSearch = max(self.index.hnsw.efSearch, 2 * k)
        return self.index.search(self._reduce(queries), k)


def _build_faiss_cpu(vectors: np.ndarray, *, approximate_above: int | None = None,
                     search_dim: int | None = 128, hnsw_m: int = 16) -> Any:
    """Exact ``IndexFlatIP``; above ``approximate_above`` rows a :class:`ReducedHNSW`."""
    from gpurag.vectors.faiss_index import _faiss

    faiss = _faiss()

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    if approximate_above is not None and len(x) > approximate_above:
        return ReducedHNSW(x, search_dim=search_dim, hnsw_m=hnsw_m)
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    return index


def make_device_knn(device: str) -> KnnFn:
    """The device kNN: :func:`gpurag.vectors.make_searcher` (FAISS-GPU when installed, else
    ``kernels.knn``), exact at every size, with the component's call shape."""

    def build(vectors: np.ndarray, *, approximate_above: int | None = None) -> Any:
        from gpurag.vectors import make_searcher

        return make_searcher(vectors, device)

    return build


def select_knn_backend(device: str | None = None) -> tuple[str, KnnFn]:
    """``(name, build)``: on cuda the device searcher of :mod:`gpurag.vectors.searcher`
    (FAISS-GPU when present, else ``kernels.knn``: torch exact fp16 matmul + fp32 re-rank),
    else faiss-cpu."""
    dev = resolve_device(device)
    if dev == "cuda" and _faiss_gpu_available():
        name = _version_label(_FAISS_GPU_DISTS, "faiss (GPU)") + " GpuIndexFlatIP"
        fn = make_device_knn("cuda")
    elif dev == "cuda":
        name = "kernels.knn (torch " + (package_version("torch") or "?") + " fp16 matmul top-k)"
        fn = make_device_knn("cuda")
    else:
        name, fn = _version_label(("faiss-cpu",), "faiss-cpu (missing)"), _build_faiss_cpu
    return name, fn


# -- all components ---------------------------------------------------------------------------
def _load_embedder(spec: str | None, *, device: str) -> Any:
    from gpurag.embed import load_embedder

    return load_embedder(spec, device=device)


@dataclass(frozen=True)
class Backends:
    """The implementation of every component on one device (see the module docstring)."""

    device: str
    names: Mapping[str, str]
    ppr: PPRFn
    leiden: LeidenFn
    knn: KnnFn
    topk: TopKFn
    embedder: Callable[..., Any]

    @classmethod
    def for_device(cls, device: str | None = None) -> Backends:
        """The backends of ``device`` (resolved once per device and process)."""
        return _backends(resolve_device(device))


@functools.lru_cache(maxsize=4)
def _backends(device: str) -> Backends:
    ppr_name, ppr_scores = select_ppr_backend(device)
    leiden_name, leiden = select_leiden_backend(device)
    knn_name, knn = select_knn_backend(device)
    if device == "cpu":
        ppr, topk = host_ppr_topk, numpy_topk
        topk_name = "numpy " + (package_version("numpy") or "?") + " argpartition"
    else:
        ppr, topk = make_device_ppr_topk(ppr_scores, device), torch_topk
        topk_name = "kernels.topk (torch " + (package_version("torch") or "?") + ")"
    names = {"ppr": ppr_name, "leiden": leiden_name, "knn": knn_name, "topk": topk_name}
    return Backends(device=device, names=names, ppr=ppr,
                    leiden=functools.partial(_leiden_call, leiden), knn=knn, topk=topk,
                    embedder=_load_embedder)


def _leiden_call(fn: LeidenFn, g: CSRGraph, *, max_cluster_size: int, seed: int) -> Any:
    return fn(g, max_cluster_size=max_cluster_size, seed=seed)


def plan(device: str | None = None) -> dict[str, str]:
    """The implementation name of each component on ``device`` (what ``gpurag info`` shows)."""
    return dict(Backends.for_device(device).names)
