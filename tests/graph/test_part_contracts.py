"""The searcher, PPR, top-k and Leiden contracts (:mod:`gpurag.contracts`) over every
implementation that runs on the CPU: faiss-cpu and the torch kernel searchers, the host and
the torch-kernel PPR, NumPy and torch top-k, graspologic-native and igraph Leiden (each torch
or optional-library path skips cleanly where it is not installed)."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest

from gpurag.backends import ppr as device_ppr
from gpurag.backends.topk import torch_topk
from gpurag.contracts import check_leiden, check_ppr, check_searcher, check_topk
from gpurag.graph import ppr_top
from gpurag.runtime import Runtime

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch (the gnn extra)")


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


DB, QUERIES = _unit(400, 24, 0), _unit(7, 24, 1)


@pytest.mark.parametrize("metric", ["ip", "l2"])
@pytest.mark.parametrize("impl", ["faiss", pytest.param("torch", marks=needs_torch)])
def test_searcher_contract(impl, metric):
    from gpurag.backends.searcher import make_searcher

    check_searcher(make_searcher(DB, "cpu", metric=metric, backend=impl), DB, QUERIES,
                   metric=metric)


def test_searcher_contract_over_a_stored_index():
    from gpurag.backends.searcher import searcher_for_index
    from gpurag.vectors import build_index

    check_searcher(searcher_for_index(build_index(DB), "cpu"), DB, QUERIES)


def _torch_ppr():
    return device_ppr.make_device_ppr_topk(device_ppr.make_kernels_ppr("cpu"), "cpu")


@pytest.mark.parametrize("make", [lambda: ppr_top.host_ppr_topk,
                                  pytest.param(_torch_ppr, marks=needs_torch)],
                         ids=["host", "torch-kernels"])
def test_ppr_contract(make):
    check_ppr(make())


def test_ppr_contract_for_the_cpu_backends():
    check_ppr(Runtime(device="cpu").ppr)


SCORES = np.random.default_rng(2).random((6, 40)).astype(np.float32)


def test_topk_contract_numpy():
    check_topk(ppr_top.numpy_topk, SCORES)
    values, ids = ppr_top.numpy_topk(SCORES[:, :3], 5)  # fewer entries than k: padded
    assert (ids[:, 3:] == -1).all() and np.isneginf(values[:, 3:]).all()


@needs_torch
def test_topk_contract_torch():
    import torch

    check_topk(torch_topk, SCORES, to_input=torch.from_numpy,
               to_numpy=lambda t: t.cpu().numpy())


@pytest.mark.parametrize("impl", ["graspologic-native", "igraph"])
def test_leiden_contract(impl):
    from gpurag.graph.leiden import hierarchical_leiden

    module = {"graspologic-native": "graspologic_native", "igraph": "igraph"}[impl]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{impl} is not installed")

    def leiden(g, *, max_cluster_size, seed):
        return hierarchical_leiden(g, max_cluster_size=max_cluster_size, seed=seed,
                                   implementation=impl)

    check_leiden(leiden)


def test_leiden_contract_for_the_cpu_backends():
    check_leiden(Runtime(device="cpu").leiden)


def _ppr_of_the_old_shape(g, reset, *, k, lo=0, hi=None, gather=None, damping, tol,
                          max_iter=100, method="auto", eps=1e-6, full=False, local_fanout=None):
    """The PPR part's documented call shape before the walk passed the push's size rule."""
    return ppr_top.host_ppr_topk(g, reset, k=k, lo=lo, hi=hi, gather=gather, damping=damping,
                                 tol=tol, max_iter=max_iter, method=method, eps=eps, full=full,
                                 local_fanout=local_fanout)


def test_a_ppr_that_does_not_take_the_walks_keywords_is_refused_before_a_query():
    with pytest.raises(AssertionError, match="push_min_edges"):
        check_ppr(_ppr_of_the_old_shape)
    with pytest.raises(TypeError, match="push_min_edges, push_max_seeds"):
        Runtime(device="cpu", ppr=_ppr_of_the_old_shape)
    mine = Runtime(device="cpu", ppr=lambda g, reset, **kw: ppr_top.host_ppr_topk(g, reset, **kw))
    with pytest.raises(TypeError, match="push_min_edges, push_max_seeds"):  # a copy too
        dataclasses.replace(mine, ppr=_ppr_of_the_old_shape)
