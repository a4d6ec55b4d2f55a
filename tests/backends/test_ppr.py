"""backends/ppr.py: the device PPR component on CPU tensors (the call shape the GPU uses)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gpurag.backends.ppr as backend  # noqa: E402
from gpurag.graph.csr import build_csr  # noqa: E402
from gpurag.graph.ppr_top import host_ppr_topk  # noqa: E402


def test_device_graph_looked_up_once_per_call_not_per_chunk(monkeypatch):
    """With the local scores asked for and the questions in several chunks, the component
    itself looks its DeviceGraph up once (the score function, once per chunk, is its own);
    the top-k matches the host's."""
    rng = np.random.default_rng(1)
    n = 60
    g = build_csr(rng.integers(0, n, 400), rng.integers(0, n, 400), rng.random(400) + 0.1, n)
    reset = np.zeros((7, n))
    for i in range(7):
        reset[i, rng.choice(n, 3, replace=False)] = 1.0
    monkeypatch.setattr(backend, "DEVICE_CHUNK_BYTES", 3 * 4 * n)  # 3 rows per chunk: 3 chunks
    calls = []
    real = backend.DeviceGraph.of.__func__

    def counted(cls, graph, device="cuda"):
        calls.append(device)
        return real(cls, graph, device)

    monkeypatch.setattr(backend.DeviceGraph, "of", classmethod(counted))
    fn = backend.make_device_ppr_topk(backend.make_kernels_ppr("cpu"), "cpu")
    top = fn(g, reset, k=5, lo=0, hi=n, damping=0.8, tol=1e-8, local_fanout=(2,))
    assert len(calls) == 3 + 1  # 3 chunks of the score function, 1 for the local scores
    host = host_ppr_topk(g, reset, k=5, lo=0, hi=n, damping=0.8, tol=1e-8, method="power")
    np.testing.assert_array_equal(top.ids, host.ids)
    assert top.local is not None
