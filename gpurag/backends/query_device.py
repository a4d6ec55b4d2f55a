"""The walk segment of graph queries on a torch device: the runtime's ``query_walk`` part.

For a batch's ``(q, n)`` reset matrix (built on the host by
:func:`gpurag.query.seeds.reset_matrix`, a few dozen nonzeros per question, and row-normalized
as the host PPR does it, :func:`gpurag.graph.ppr.normalized_reset`), its dense hits and its
head rankings, :class:`DeviceWalk` uploads the reset's COO triples, runs the batched power
iteration of :mod:`gpurag.kernels.ppr_batched` over the index's transition operator, takes each
question's top passages (ties to the lower row, as the host does) and the scores at the
gathered rows, fuses them with the rankings and takes the best candidates
(:mod:`gpurag.kernels.fusion`); only :class:`FusedWalk`'s ``(q, c)`` arrays (``c`` the
candidates, about a hundred, never ``(q, n)``) are copied back.

The transition operator is uploaded once per opened index (per retriever, held weakly) and
reused by every batch. The PPR is the power iteration, checked every iteration as on the host
(``method="auto"`` on the host pushes on graphs of 500k+ edges instead). On the CPU the part
is None: the NumPy stages are faster there; tests run this one on CPU tensors.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpurag.device import package_version

# Bytes per node and question the walk's column chunk may use: two iterates, the passage
# scores' copy and the top-k's masks.
_BYTES_PER_ENTRY = 24


@dataclass
class FusedWalk:
    """The walk segment's result for a batch, on the host: the candidates ``cand`` (``(q, c)``
    passage rows, -1 where padded or repeated), their fused ``score`` (head lifted) and
    ``relevance`` (before the head was lifted; float64, ``-inf`` at -1), the ``head`` rows
    (``(q, h)`` or None) and ``best`` (the ``(rows, scores)`` of the best candidates, at the
    depth asked for)."""

    cand: np.ndarray
    score: np.ndarray
    relevance: np.ndarray
    head: np.ndarray | None
    best: tuple[np.ndarray, np.ndarray]


class DeviceIndex:
    """One opened index's transition operator on the device, uploaded once (shared with the
    PPR part through :class:`~gpurag.backends.ppr.DeviceGraph`)."""

    def __init__(self, retriever: Any, device: str) -> None:
        from gpurag.backends.ppr import DeviceGraph

        self.n_ent, self.n_psg = int(retriever.n_ent), int(retriever.n_psg)
        self.op = DeviceGraph.of(retriever.graph, device).transition_operator()


class DeviceWalk:
    """The walk segment on ``device`` (see the module docstring): ``walk(retriever, reset,
    dense, rankings, cfg, *, want, depth, sources, best) -> FusedWalk``. ``uploads`` counts the
    indexes uploaded (one per opened index, whatever the number of batches), ``batches`` the
    batches walked."""

    def __init__(self, device: str = "cuda", check_every: int = 1) -> None:
        from gpurag.kernels.ppr_batched import check_settings

        check_settings(0.5, 1, check_every)  # a bad check_every fails here, not mid-query
        self.device = str(device)
        self.check_every = check_every
        self.implementation = (f"gpurag.backends.query_device (torch "
                               f"{package_version('torch') or '?'}, {self.device})")
        self.uploads = 0
        self.batches = 0
        self._indexes: weakref.WeakKeyDictionary[Any, DeviceIndex] = (
            weakref.WeakKeyDictionary())
        self._lock = threading.Lock()

    def index_for(self, retriever: Any) -> DeviceIndex:
        """The retriever's arrays on the device (uploaded on its first batch)."""
        with self._lock:
            ix = self._indexes.get(retriever)
            if ix is None:
                ix = DeviceIndex(retriever, self.device)
                self._indexes[retriever] = ix
                self.uploads += 1
            return ix

    def __call__(self, retriever: Any, reset: Any, dense: tuple[np.ndarray, np.ndarray],
                 rankings: dict[str, np.ndarray], cfg, *, want: int, depth: int,
                 sources: list[str], best: int) -> FusedWalk:
        """The batch's candidates, fused scores, head and best ``best`` candidates from its
        ``(q, n)`` SciPy ``reset`` and ``dense`` hits: what :func:`gpurag.query.walk.walk`,
        :func:`~gpurag.query.walk.candidate_scores` and the head stage of
        :mod:`gpurag.query.fusion` give on the host."""
        import torch

        from gpurag.kernels import fusion
        from gpurag.kernels.ppr_batched import power_chunks
        from gpurag.kernels.topk import topk_dense_stable

        ix = self.index_for(retriever)
        self.batches += 1
        dev = self.device
        q = len(dense[1])
        qi, node, val = reset_triples(reset, ix.op.n_nodes, dev, ix.op.dtype)
        ranks = {name: _up(r, dev, np.int64) for name, r in rankings.items()}
        gather = torch.cat(list(ranks.values()), dim=1)
        k = min(want, ix.n_psg)
        lo, hi = ix.n_ent, ix.n_ent + ix.n_psg
        values, ids, gathered = [], [], []
        for c0, c1, x in power_chunks(ix.op, qi, node, val, q, damping=cfg.damping,
                                      tol=cfg.ppr_tol, check_every=self.check_every,
                                      batch_size=self._columns(ix.op.n_nodes, q)):
            part = x[lo:hi].T.contiguous()
            del x
            v, i = topk_dense_stable(part, k)
            g = gather[c0:c1]
            values.append(v)
            ids.append(i)
            gathered.append(part.gather(1, g.clamp(min=0)) * (g >= 0))
            del part
        ds, di = _up(dense[0], dev), _up(dense[1], dev, np.int64)
        cand, score = fusion.candidate_scores(torch.cat(values), torch.cat(ids),
                                              torch.cat(gathered), gather, ds, di,
                                              cfg.dense_blend)
        relevance = score
        head = None
        if cfg.dense_head:
            ppr_rank = fusion.best_candidates(cand, score, depth)[0]
            head = fusion.head_rows(ranks, ppr_rank, sources=sources, mode=cfg.head_mode,
                                    head=cfg.dense_head, n=ix.n_psg)
            score = fusion.lift_head(cand, score, head, head.shape[1])
        rows, scores = fusion.best_candidates(cand, score, best)
        host = lambda t: t.cpu().numpy()  # noqa: E731
        return FusedWalk(host(cand), host(score), host(relevance),
                         None if head is None else host(head), (host(rows), host(scores)))

    def _columns(self, n: int, q: int) -> int | None:
        """Questions per walk chunk: what fits in about 60% of the free device memory, the
        allocator's reserved-but-unused cache included (None on the CPU: one chunk)."""
        from gpurag.kernels.ppr_batched import auto_columns

        if not self.device.startswith("cuda") or n == 0:
            return None
        return auto_columns(n, q, self.device, _BYTES_PER_ENTRY, share=0.6)


def _up(a: np.ndarray, device: str, dtype: Any = None) -> Any:
    import torch

    arr = np.ascontiguousarray(a if dtype is None else np.asarray(a, dtype))
    return torch.as_tensor(arr, device=device)


def reset_triples(reset: Any, n: int, device: str, dtype: Any) -> tuple[Any, Any, Any]:
    """The ``(q, n)`` reset (SciPy sparse, built on the host) validated and row-normalized on
    the host exactly as the host PPR does (:func:`gpurag.graph.ppr.normalized_reset`, float64),
    uploaded as its nonzero triples ``(query, node, value)`` sorted by query, values in
    ``dtype``: what :func:`gpurag.kernels.ppr_batched.power_chunks` takes. Only these few
    entries per question cross to the device; no sum is taken there."""
    from gpurag.graph.ppr import normalized_reset

    coo = normalized_reset(reset, n).tocoo()  # CSR order: by row, then column
    return (_up(coo.row, device, np.int64), _up(coo.col, device, np.int64),
            _up(coo.data, device, np.float64).to(dtype))


def query_walk_part(device: str) -> DeviceWalk | None:
    """The walk segment on ``device``: :class:`DeviceWalk` on cuda when torch is there, None on
    the CPU (the retriever runs the NumPy stages)."""
    from gpurag.backends import probe

    if device == "cuda" and probe.torch_cuda_available():
        return DeviceWalk("cuda")
    return None


__all__ = ["DeviceIndex", "DeviceWalk", "FusedWalk", "query_walk_part", "reset_triples"]
