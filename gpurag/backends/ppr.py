"""The PPR component per device (one call shape whatever runs it; see :mod:`gpurag.backends`).

* cuda with pylibcugraph: its ``personalized_pagerank`` (one call per question);
* cuda without it: ``kernels.ppr_batched`` (torch sparse x dense power iteration);
* cpu: :func:`gpurag.graph.ppr_top.host_ppr_topk` (SciPy power iteration / frontier push).

On a device only each question's top-``k`` (and the gathered scores, and the local scores a
reranker reads) come back to the host. :class:`DeviceGraph` uploads a ``CSRGraph``'s arrays
to the GPU once (cached per graph and device) and caches what is derived from them.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from gpurag.backends import probe
from gpurag.backends.part import Part
from gpurag.backends.topk import torch_topk
from gpurag.device import package_version
from gpurag.graph import ppr as host_ppr
from gpurag.graph import ppr_cugraph
from gpurag.graph.csr import CSRGraph
from gpurag.graph.ppr_local import LocalScores, local_from_device
from gpurag.graph.ppr_top import PPRTop, gather_at, host_ppr_topk, local_roots

PPRFn = Any


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


def scores_part(device: str) -> Part:
    """The full-output PPR on ``device``: ``fn(g, reset, damping=..., tol=..., max_iter=...,
    output="dense"|"sparse"|"device")``: pylibcugraph on cuda when importable, else the torch
    kernels on cuda, else SciPy."""
    if device == "cuda" and probe.cugraph_available():
        name = probe.label(probe.CUGRAPH_DISTS, "pylibcugraph") + " personalized_pagerank"
        return Part(make_cugraph_ppr("cuda"), name)
    if device == "cuda":
        name = "kernels.ppr_batched (torch " + (package_version("torch") or "?") + " SpMM)"
        return Part(make_kernels_ppr("cuda"), name)
    return Part(host_ppr.ppr, "scipy " + (package_version("scipy") or "?")
                + " (gpurag.graph.ppr)")


# Device memory one chunk of full (rows, n) PPR scores may take before its top-k is taken.
DEVICE_CHUNK_BYTES = 1 << 30


def make_device_ppr_topk(score_fn: PPRFn, device: str) -> PPRFn:
    """The PPR component over a device ``score_fn`` (``output="device"``): questions run in
    chunks whose ``(rows, n)`` scores fit :data:`DEVICE_CHUNK_BYTES`; only each chunk's top-k
    and gathered scores are copied to the host."""

    def ppr_topk(g: CSRGraph, reset: Any, *, k: int, lo: int = 0, hi: int | None = None,
                 gather: np.ndarray | None = None, damping: float, tol: float,
                 max_iter: int = 100, method: str = "auto", eps: float = 1e-6,
                 full: bool = False, local_fanout: Sequence[int] | None = None,
                 push_min_edges: int | None = None, push_max_seeds: int | None = None
                 ) -> PPRTop:
        """``method``, ``eps`` and the push size rule (``push_min_edges``,
        ``push_max_seeds``) are accepted for the host call shape and ignored (the device
        runs power iteration)."""
        import torch

        r = sp.csr_array(reset) if sp.issparse(reset) else sp.csr_array(np.atleast_2d(reset))
        q, n = r.shape
        rows = max(1, DEVICE_CHUNK_BYTES // max(4 * n, 1))
        values, ids, gathered, fulls, locals_ = [], [], [], [], []
        gather_t = (torch.as_tensor(np.asarray(gather, np.int64), device=device)
                    if gather is not None else None)
        dg = DeviceGraph.of(g, device) if local_fanout is not None else None  # once per call
        for c0 in range(0, q, rows):
            x = score_fn(g, r[c0:c0 + rows], damping=damping, tol=tol, max_iter=max_iter,
                         output="device")
            part = x[:, lo:hi]
            v, i = torch_topk(part, k)
            values.append(v.float().cpu().numpy())
            ids.append(i.cpu().numpy().astype(np.int64))
            if gather_t is not None:
                gathered.append(gather_at(part, gather_t[c0:c0 + rows]).float().cpu().numpy())
            if full:
                fulls.append(x.float().cpu().numpy())
            if dg is not None:  # lists chosen on the device: no (rows, n) copy
                roots = local_roots(ids[-1], None if gather is None else
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


def ppr_part(device: str) -> Part:
    """The PPR component (top-``k`` to the host) on ``device``."""
    if device == "cpu":
        return Part(host_ppr_topk, scores_part("cpu").implementation)
    scores = scores_part(device)
    return Part(make_device_ppr_topk(scores, device), scores.implementation)
