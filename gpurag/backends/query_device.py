"""The walk segment of graph queries on a torch device: the runtime's ``query_walk`` part.

For a batch's seed hits (FAISS entity/fact hits, dense and BM25 passages, named entities, all
``(q, ·)`` arrays) and head rankings, :class:`DeviceWalk` builds the reset matrix as nonzero
triples on the device (:func:`device_reset`, the arithmetic of
:func:`gpurag.query.seeds.reset_matrix`), runs the batched power iteration of
:mod:`gpurag.kernels.ppr_batched` over the index's transition operator, takes each question's
top passages (ties to the lower row, as the host does) and the scores at the gathered rows,
fuses them with the rankings and takes the best candidates (:mod:`gpurag.kernels.fusion`);
only :class:`~gpurag.query.device_walk.FusedWalk`'s ``(q, c)`` arrays are copied back.

What the index needs on the device (the transition operator, the entities' specificity, the
fact -> entities CSR) is uploaded once per opened index (per retriever, held weakly) and
reused by every batch. The PPR is the power iteration, checked every iteration as on the host
(``method="auto"`` on the host pushes on graphs of 500k+ edges instead). On the CPU the part
is None: the NumPy stages are faster there; tests run this one on CPU tensors.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from gpurag.device import package_version
from gpurag.query.device_walk import FusedWalk
from gpurag.query.seeds import SeedHits

# Bytes per node and question the walk's column chunk may use: two iterates, the passage
# scores' copy and the top-k's masks.
_BYTES_PER_ENTRY = 24


class DeviceIndex:
    """One opened index's arrays on the device, uploaded once: the transition operator
    (shared with the PPR part through :class:`~gpurag.backends.ppr.DeviceGraph`), each entity's
    specificity (float64) and the fact -> entities CSR (int64)."""

    def __init__(self, retriever: Any, device: str) -> None:
        import torch

        from gpurag.backends.ppr import DeviceGraph

        self.n_ent, self.n_psg = int(retriever.n_ent), int(retriever.n_psg)
        self.op = DeviceGraph.of(retriever.graph, device).transition_operator()
        arrays = retriever.seed_arrays
        up = lambda a, dt: torch.as_tensor(np.ascontiguousarray(a, dt), device=device)  # noqa: E731
        self.specificity = up(arrays.specificity, np.float64)
        self.fact_indptr = up(arrays.fact_indptr, np.int64)
        self.fact_entities = up(arrays.fact_entities, np.int64)


class DeviceWalk:
    """The walk segment on ``device`` (see the module docstring): ``walk(retriever, hits,
    rankings, cfg, *, want, depth, sources, best) -> FusedWalk``. ``uploads`` counts the
    indexes uploaded (one per opened index, whatever the number of batches), ``batches`` the
    batches walked."""

    def __init__(self, device: str = "cuda", check_every: int = 1) -> None:
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

    def __call__(self, retriever: Any, hits: SeedHits, rankings: dict[str, np.ndarray], cfg,
                 *, want: int, depth: int, sources: list[str], best: int) -> FusedWalk:
        """The batch's candidates, fused scores, head and best ``best`` candidates: what
        :func:`gpurag.query.walk.walk`, :func:`~gpurag.query.walk.candidate_scores` and the
        head stage of :mod:`gpurag.query.fusion` give on the host."""
        import torch

        from gpurag.kernels import fusion
        from gpurag.kernels.ppr_batched import normalized_triples, power_chunks
        from gpurag.kernels.topk import topk_dense_stable

        ix = self.index_for(retriever)
        self.batches += 1
        dev = self.device
        q = len(hits.dense[1])
        qi, node, val = device_reset(ix, hits, cfg, dev)
        qi, node, val, _ = normalized_triples(qi, node, val, q, ix.op.dtype)
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
        ds, di = _up(hits.dense[0], dev), _up(hits.dense[1], dev, np.int64)
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
        """Questions per walk chunk: what fits in about 60% of the free device memory (None on
        the CPU: one chunk)."""
        import torch

        if not self.device.startswith("cuda") or n == 0:
            return None
        free, _ = torch.cuda.mem_get_info(torch.device(self.device))
        return int(max(1, min(q, 0.6 * free // (_BYTES_PER_ENTRY * n))))


def _up(a: np.ndarray, device: str, dtype: Any = None) -> Any:
    import torch

    arr = np.ascontiguousarray(a if dtype is None else np.asarray(a, dtype))
    return torch.as_tensor(arr, device=device)


def device_reset(ix: DeviceIndex, hits: SeedHits, cfg, device: str) -> tuple[Any, Any, Any]:
    """The batch's ``(q, n)`` reset matrix as summed nonzero triples ``(query, node, value)``
    (float64, rows not yet normalized) on the device: the weights of
    :func:`gpurag.query.seeds.reset_matrix` (entity and fact hits within their margins,
    dense and BM25 passages min-max scaled, rows scaled to sum 1 plus ``link_weight`` shared by
    the named entities, a question without seeds its top dense passage)."""
    import torch

    from gpurag.kernels.fusion import minmax

    n_ent = ix.n_ent
    ds, di = _up(hits.dense[0], device), _up(hits.dense[1], device, np.int64)
    q = di.shape[0]
    grid = lambda shape: torch.arange(q, device=device)[:, None].expand(shape)  # noqa: E731
    rows, cols, vals = [], [], []

    def add(r, c, v):  # entries of weight 0 are dropped when the rows are normalized
        rows.append(r.reshape(-1))
        cols.append(torch.where(v > 0, c, 0).reshape(-1))
        vals.append(v.reshape(-1).double())

    if hits.entities is not None:
        es, ei = _up(hits.entities[0], device), _up(hits.entities[1], device, np.int64)
        keep = (ei >= 0) & (es >= es[:, :1] - cfg.entity_margin)
        w = torch.where(keep, es.clamp(min=0) ** cfg.sim_power, 0.0)
        w = w * ix.specificity[ei.clamp(min=0)]
        add(grid(ei.shape), ei, w * cfg.entity_weight)
    if hits.facts is not None:
        fs, fi = _up(hits.facts[0], device), _up(hits.facts[1], device, np.int64)
        keep = (fi >= 0) & (fs >= fs[:, :1] - cfg.fact_margin)
        w = torch.where(keep, fs.clamp(min=0) ** cfg.sim_power, 0.0)
        r, c = torch.nonzero(w > 0, as_tuple=True)
        f = fi[r, c]
        start = ix.fact_indptr[f]
        size = ix.fact_indptr[f + 1] - start
        total = int(size.sum())
        owner = torch.repeat_interleave(torch.arange(len(f), device=device), size,
                                        output_size=total)
        first = torch.cumsum(size, 0) - size
        ends = ix.fact_entities[start[owner] + torch.arange(total, device=device)
                                - first[owner]]
        add(r[owner], ends, w[r, c][owner] * ix.specificity[ends] * cfg.fact_weight)
    if cfg.seed_passages:
        take = min(cfg.seed_passages, di.shape[1])
        ps, pi = ds[:, :take], di[:, :take]
        w = torch.where(pi >= 0, minmax(ps), 0.0) * cfg.passage_weight
        add(grid(pi.shape), pi + n_ent, w)
    if hits.lexical is not None and cfg.lexical_weight > 0:
        ls, li = _up(hits.lexical[0], device), _up(hits.lexical[1], device, np.int64)
        ok = li >= 0
        w = torch.where(ok, minmax(torch.where(ok, ls, 0.0)), 0.0) * cfg.lexical_weight
        add(grid(li.shape), li + n_ent, w)
    n = n_ent + ix.n_psg
    qi, node, val = _summed(rows, cols, vals, n, device)
    named = hits.named
    if named is not None and cfg.link_weight > 0 and n_ent and len(named.entity):
        sums = torch.zeros(q, dtype=torch.float64, device=device).index_add_(0, qi, val)
        scale = torch.where(sums > 0, 1.0 / sums.clamp(min=1e-30), 0.0)
        q_idx, ents = _up(named.q, device, np.int64), _up(named.entity, device, np.int64)
        count = torch.bincount(q_idx, minlength=named.n)[q_idx]
        share = cfg.link_weight * ix.specificity[ents] / count
        qi, node, val = _summed([qi, q_idx], [node, ents], [val * scale[qi], share], n, device)
    sums = torch.zeros(q, dtype=torch.float64, device=device).index_add_(0, qi, val)
    empty = torch.nonzero(sums <= 0).flatten()
    if empty.numel():  # no seed at all: the dense top passage
        qi = torch.cat([qi, empty])
        node = torch.cat([node, di[empty, 0] + n_ent])
        val = torch.cat([val, torch.ones(len(empty), dtype=torch.float64, device=device)])
    return qi, node, val


def _summed(rows: list, cols: list, vals: list, n: int, device: str) -> tuple[Any, Any, Any]:
    """Triples with the values of repeated ``(row, col)`` summed (in the order given), zeros
    dropped: ``(row, col, value)`` sorted by row then column."""
    import torch

    if not rows:
        empty = torch.zeros(0, dtype=torch.int64, device=device)
        return empty, empty, torch.zeros(0, dtype=torch.float64, device=device)
    r, c, v = torch.cat(rows), torch.cat(cols), torch.cat(vals)
    key, inv = torch.unique(r * n + c, return_inverse=True)
    total = torch.zeros(len(key), dtype=torch.float64, device=device).index_add_(0, inv, v)
    keep = total > 0
    key, total = key[keep], total[keep]
    return key // n, key % n, total


def query_walk_part(device: str) -> DeviceWalk | None:
    """The walk segment on ``device``: :class:`DeviceWalk` on cuda when torch is there, None on
    the CPU (the retriever runs the NumPy stages)."""
    from gpurag.backends import probe

    if device == "cuda" and probe.torch_cuda_available():
        return DeviceWalk("cuda")
    return None


__all__ = ["DeviceIndex", "DeviceWalk", "device_reset", "query_walk_part"]
