"""Runtime choice of the implementation of PPR, Leiden and kNN, and the graph held on a device.

Each ``select_*_backend(device)`` resolves ``device`` (``None``: ``$GPURAG_DEVICE`` or
auto-detect; ``"cuda"`` without a usable GPU raises :class:`~gpurag.device.DeviceError`) and
returns ``(name, fn)``; ``name`` is what ``gpurag info`` prints and is recorded in
:data:`gpurag.device.COMPONENTS`.

* PPR: pylibcugraph ``personalized_pagerank`` on cuda when importable, else
  ``kernels.ppr_batched`` (torch sparse x dense power iteration) on cuda, else the host
  :func:`gpurag.graph.ppr.ppr` (SciPy power iteration / frontier push);
* Leiden: pylibcugraph ``leiden`` on cuda when importable (flat; the size-capped hierarchy is
  built by re-running it on oversize communities), else the host
  :func:`~gpurag.graph.leiden.hierarchical_leiden` (graspologic-native or igraph);
* kNN: FAISS-GPU ``GpuIndexFlatIP`` on cuda when present, else ``kernels.knn.ExactIndex``
  (torch fp16 matmul + top-k, fp32 re-rank) on cuda, else faiss-cpu.

Uniform call shapes: ``ppr_fn(g, reset, damping=..., tol=..., max_iter=..., output=...)`` with
``output`` ``"dense"`` (NumPy ``(q, n)`` float32, the default), ``"sparse"`` (SciPy CSR) or,
on GPU backends, ``"device"`` (a torch tensor on the GPU); ``leiden_fn`` has the signature of
:func:`~gpurag.graph.leiden.hierarchical_leiden`; ``knn_fn(vectors)`` builds an index with
``search(queries, k) -> (scores, ids)`` and ``ntotal``.

:class:`DeviceGraph` uploads a ``CSRGraph``'s arrays to the GPU once (cached per graph and
device) and caches what the backends derive from them (the ``P^T`` operator, cuGraph graphs).
torch, CuPy, pylibcugraph and faiss are imported only when a backend that needs them is used.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from gpurag.device import COMPONENTS, package_version, resolve_device
from gpurag.graph import leiden as host_leiden
from gpurag.graph import ppr as host_ppr
from gpurag.graph import ppr_cugraph
from gpurag.graph.csr import CSRGraph

PPRFn = Callable[..., Any]
LeidenFn = Callable[..., Any]
KnnFn = Callable[[np.ndarray], Any]

_CUGRAPH_DISTS = ("pylibcugraph-cu13", "pylibcugraph-cu12", "pylibcugraph")
_FAISS_GPU_DISTS = ("faiss-gpu-cu13-cuvs", "faiss-gpu-cu12-cuvs", "faiss-gpu-cu12", "faiss-gpu")


def _version_label(dists: tuple[str, ...], fallback: str) -> str:
    for dist in dists:
        version = package_version(dist)
        if version:
            return f"{dist} {version}"
    return fallback


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
            from kernels.ppr_batched import build_operator

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
        from kernels.ppr_batched import ppr_batched

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


def select_ppr_backend(device: str | None = None, record: bool = True) -> tuple[str, PPRFn]:
    """``(name, fn)`` of the PPR implementation for ``device`` (see the module docstring);
    ``record`` notes the choice in ``COMPONENTS``."""
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
    if record:
        COMPONENTS.record("ppr", name)
    return name, fn


# -- Leiden -----------------------------------------------------------------------------------
_LEIDEN_LOCK = threading.Lock()


def make_capped_leiden(labels_fn: Callable[..., np.ndarray], name: str) -> LeidenFn:
    """:func:`~gpurag.graph.leiden.hierarchical_leiden` driven by a flat Leiden ``labels_fn``.

    ``labels_fn(indptr, indices, data, n, resolution, randomness, seed) -> labels`` (the host
    backends' signature); the size-capped hierarchy is built by the host code, which re-runs
    ``labels_fn`` on the oversize communities.
    """

    def capped(g: CSRGraph, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("implementation", None)
        # hierarchical_leiden looks its flat backend up by name; substitute ours for the call.
        with _LEIDEN_LOCK:
            original = host_leiden._backend
            host_leiden._backend = lambda implementation: (name, labels_fn)
            try:
                return host_leiden.hierarchical_leiden(g, *args, **kwargs)
            finally:
                host_leiden._backend = original

    return capped


def select_leiden_backend(device: str | None = None, record: bool = True) -> tuple[str, LeidenFn]:
    """``(name, fn)``: cuGraph Leiden (flat, hierarchy by re-running) on cuda when importable,
    else the host :func:`~gpurag.graph.leiden.hierarchical_leiden`."""
    dev = resolve_device(device)
    if dev == "cuda" and _cugraph_available():
        name = _version_label(_CUGRAPH_DISTS, "pylibcugraph") + " leiden"
        fn = make_capped_leiden(ppr_cugraph.leiden_labels, name)
    else:
        name = _version_label(("graspologic-native", "igraph"), "host leiden (missing)")
        fn = host_leiden.hierarchical_leiden
    if record:
        COMPONENTS.record("leiden", name)
    return name, fn


# -- kNN --------------------------------------------------------------------------------------
def make_kernels_knn(device: str) -> KnnFn:
    """Build a :class:`kernels.knn.ExactIndex` on ``device`` over the given vectors."""

    def build(vectors: np.ndarray) -> Any:
        from kernels.knn import ExactIndex

        vectors = np.asarray(vectors, dtype=np.float32)
        index = ExactIndex(vectors.shape[1], device)
        index.add(vectors)
        return index

    return build


_FAISS_GPU_RES: list[Any] = []


def _build_faiss_gpu(vectors: np.ndarray) -> Any:
    import faiss

    if not _FAISS_GPU_RES:
        _FAISS_GPU_RES.append(faiss.StandardGpuResources())
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    index = faiss.GpuIndexFlatIP(_FAISS_GPU_RES[0], vectors.shape[1])
    index.add(vectors)
    return index


def _build_faiss_cpu(vectors: np.ndarray) -> Any:
    from gpurag.vectors.faiss_index import build_index

    return build_index(vectors)


def select_knn_backend(device: str | None = None, record: bool = True) -> tuple[str, KnnFn]:
    """``(name, build)``: FAISS-GPU on cuda when present, else ``kernels.knn`` (torch exact
    fp16 matmul + fp32 re-rank) on cuda, else faiss-cpu."""
    dev = resolve_device(device)
    if dev == "cuda" and _faiss_gpu_available():
        name = _version_label(_FAISS_GPU_DISTS, "faiss (GPU)") + " GpuIndexFlatIP"
        fn = _build_faiss_gpu
    elif dev == "cuda":
        name = "kernels.knn (torch " + (package_version("torch") or "?") + " fp16 matmul top-k)"
        fn = make_kernels_knn("cuda")
    else:
        name, fn = _version_label(("faiss-cpu",), "faiss-cpu (missing)"), _build_faiss_cpu
    if record:
        COMPONENTS.record("knn", name)
    return name, fn


def plan(device: str | None = None) -> dict[str, str]:
    """The implementation name of each component on ``device`` (what ``gpurag info`` shows)."""
    return {
        "ppr": select_ppr_backend(device, record=False)[0],
        "leiden": select_leiden_backend(device, record=False)[0],
        "knn": select_knn_backend(device, record=False)[0],
    }
