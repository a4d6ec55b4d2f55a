"""A subgraph reranker reads the PPR scores recorded around the candidates (``PPRTop.local``)
instead of the ``(q, n)`` rows, and builds exactly the same subgraphs and features from them;
on the host, and on the device path (run on CPU torch here, on CUDA when marked gpu)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gpurag.backends import ppr as device_ppr
from gpurag.graph import build_csr
from gpurag.graph import ppr_top as backend
from gpurag.graph.ppr_local import (
    DenseScores,
    LocalScores,
    list_depths,
    local_from_dense,
    top_neighbours_dense,
)
from gpurag.rerank.features import CandidateInputs, GraphArrays, node_features
from gpurag.rerank.subgraph import extract_subgraphs

N_ENT, N_PSG = 300, 700


def _graph(seed: int):
    """Entities 0..299 (a few hubs), passages 300..999 mentioning 2-6 entities each, and
    entity-entity relations."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, N_ENT + 1) ** 1.1
    p /= p.sum()
    psg = np.repeat(np.arange(N_PSG), rng.integers(2, 7, N_PSG))
    ent = rng.choice(N_ENT, psg.size, p=p)
    rel_a, rel_b = rng.choice(N_ENT, 600, p=p), rng.integers(0, N_ENT, 600)
    src = np.r_[psg + N_ENT, rel_a]
    dst = np.r_[ent, rel_b]
    return build_csr(src, dst, rng.random(src.size).astype(np.float32) + 0.1,
                     n_nodes=N_ENT + N_PSG, symmetric=True)


def _reset(seed: int, q: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    r = np.zeros((q, N_ENT + N_PSG))
    for i in range(q):
        r[i, rng.choice(N_ENT + N_PSG, 1 + i % 5, replace=False)] = rng.random(1 + i % 5) + .1
    return sp.csr_array(r)


def _arrays(g) -> GraphArrays:
    rng = np.random.default_rng(3)
    emb = rng.standard_normal((N_ENT + N_PSG, 16)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    return GraphArrays(g, N_ENT, N_PSG, emb[:N_ENT], emb[N_ENT:],
                       rng.random(N_ENT).astype(np.float32))


def _heads(top, gather: np.ndarray, n_cand: int) -> np.ndarray:
    """Some candidate passages of each question among its top-k and gathered rows."""
    cand = np.concatenate([top.ids, gather], axis=1)
    rng = np.random.default_rng(7)
    out = np.empty((cand.shape[0], n_cand), np.int64)
    for i, row in enumerate(cand):
        uniq = np.unique(row[row >= 0])
        out[i] = rng.choice(uniq, n_cand, replace=False)
    return out


def _same_subgraphs_and_features(g, local, full: np.ndarray, heads: np.ndarray,
                                 fanout, max_nodes: int) -> None:
    q, c = heads.shape
    roots = (heads + N_ENT).ravel()
    owner = np.repeat(np.arange(q), c)
    a = extract_subgraphs(g, roots, owner, local, fanout, max_nodes)
    b = extract_subgraphs(g, roots, owner, full, fanout, max_nodes)  # the former path
    for field in ("node", "hop", "ptr", "edge_index", "edge_weight"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert a.hop.max() == len([f for f in fanout if f > 0])  # the deepest hop was reached
    arrays = _arrays(g)
    qv = np.random.default_rng(4).standard_normal((q, 16)).astype(np.float32)
    ds = np.random.default_rng(5).random((q, 4)).astype(np.float32)
    di = heads[:, :4]
    fa = node_features(arrays, CandidateInputs(qv, heads, local, ds, di), a)
    fb = node_features(arrays, CandidateInputs(qv, heads, full, ds, di), b)
    for x, y in zip(fa, fb, strict=True):
        np.testing.assert_array_equal(x, y)


def _host_local(g, top, gather, fanout) -> LocalScores:
    roots = backend.local_roots(top.ids, gather, N_ENT)
    return local_from_dense(top.full, g, roots, fanout, N_ENT)


@pytest.mark.parametrize("fanout,max_nodes", [((5, 2), 16), ((3, 2, 2), 20), ((4,), 6)])
def test_local_scores_give_the_subgraphs_of_the_full_rows(fanout, max_nodes):
    g = _graph(0)
    reset = _reset(1, 12)
    gather = np.random.default_rng(2).integers(-1, N_PSG, (12, 6))
    top = backend.host_ppr_topk(g, reset, k=25, lo=N_ENT, gather=gather, damping=0.8,
                                tol=1e-7, method="power", full=True, local_fanout=fanout)
    assert isinstance(top.local, DenseScores) and top.local.scores is top.full  # a view
    local = _host_local(g, top, gather, fanout)
    assert isinstance(local, LocalScores) and local.n_rows == 12
    assert local.values.size < top.full.size / 2  # not the rows
    heads = _heads(top, gather, 10)
    _same_subgraphs_and_features(g, local, top.full, heads, fanout, max_nodes)
    # a question subset, reordered and repeated, reads as that subset of the rows
    idx = np.array([5, 0, 5, 11])
    _same_subgraphs_and_features(g, local.take(idx), top.full[idx], heads[idx], fanout,
                                 max_nodes)
    both = LocalScores.concat([local.take([1, 2]), local.take([7])])
    _same_subgraphs_and_features(g, both, top.full[[1, 2, 7]], heads[[1, 2, 7]], fanout,
                                 max_nodes)


def test_local_scores_refuse_what_they_did_not_record():
    g = _graph(0)
    top = backend.host_ppr_topk(g, _reset(1, 3), k=10, lo=N_ENT, damping=0.8, tol=1e-7,
                                method="power", full=True)
    local = _host_local(g, top, None, (2,))
    heads = top.ids[:, :3]
    with pytest.raises(KeyError, match="neighbour"):  # two hops asked, one recorded
        extract_subgraphs(g, (heads + N_ENT).ravel(), np.repeat(np.arange(3), 3), local,
                          (2, 2), 8)
    with pytest.raises(KeyError, match="score"):
        local.at(np.array([0]), np.array([int(np.setdiff1d(np.arange(N_ENT),
                                                           local.list_nbr)[0])]))
    assert list_depths((5, 2)) == [6, 8] and list_depths((3, 2, 2)) == [4, 6, 12]


def test_torch_top_neighbours_equal_numpy_with_ties():
    torch = pytest.importorskip("torch")
    from gpurag.graph.ppr_local import top_neighbours_torch

    g = _graph(1)
    rng = np.random.default_rng(8)
    scores = rng.integers(0, 3, (4, g.n_nodes)).astype(np.float32)  # many ties
    q = rng.integers(0, 4, 200)
    node = rng.integers(0, g.n_nodes, 200)
    for k in (1, 3, 8):
        want = top_neighbours_dense(g, q, node, scores, k)
        got = top_neighbours_torch(torch.from_numpy(g.indptr), torch.from_numpy(g.indices),
                                   torch.from_numpy(scores), torch.from_numpy(q),
                                   torch.from_numpy(node), k)
        np.testing.assert_array_equal(got[0].numpy(), want[0])
        np.testing.assert_array_equal(got[1].numpy(), want[1])
        np.testing.assert_array_equal(got[2].numpy(), want[2])


def _device_check(device: str, monkeypatch) -> None:
    g = _graph(2)
    reset = _reset(3, 10)
    gather = np.random.default_rng(4).integers(-1, N_PSG, (10, 5))
    monkeypatch.setattr(device_ppr, "DEVICE_CHUNK_BYTES", 4 * g.n_nodes * 4)  # 4 rows a chunk
    fn = device_ppr.make_device_ppr_topk(device_ppr.make_kernels_ppr(device), device)
    top = fn(g, reset, k=20, lo=N_ENT, gather=gather, damping=0.8, tol=1e-7, full=True,
             local_fanout=(5, 2))
    assert isinstance(top.local, LocalScores) and top.local.n_rows == 10
    heads = _heads(top, gather, 8)
    _same_subgraphs_and_features(g, top.local, top.full, heads, (5, 2), 16)
    np.testing.assert_array_equal(top.local.kind_max(N_ENT),
                                  DenseScores(top.full).kind_max(N_ENT))


def test_device_local_scores_on_cpu_torch(monkeypatch):
    pytest.importorskip("torch")
    _device_check("cpu", monkeypatch)


def _cuda() -> bool:
    from gpurag.device import cuda_available

    return cuda_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_device_local_scores_on_cuda(monkeypatch):
    _device_check("cuda", monkeypatch)
