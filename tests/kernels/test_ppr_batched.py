"""Batched torch PPR against the NumPy float64 reference and the CPU backend's power iteration."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

from gpurag.graph.csr import CSRGraph, build_csr  # noqa: E402
from gpurag.graph.ppr import ppr_power  # noqa: E402
from gpurag.kernels.ppr_batched import build_operator, ppr_batched  # noqa: E402
from gpurag.kernels.ppr_reference import ppr_reference  # noqa: E402
from tests.kernels import device_params  # noqa: E402

DEVICES = device_params()


def random_graph(rng: np.random.Generator, n: int, m: int, symmetric: bool) -> CSRGraph:
    """Power-law-ish weighted graph; the last 2 nodes are isolated, and directed graphs have
    dangling sinks (nodes 0..2 get no out-edges)."""
    p = 1.0 / np.arange(1, n - 1) ** 0.8
    p /= p.sum()
    src = rng.choice(n - 2, size=m, p=p)
    dst = rng.choice(n - 2, size=m, p=p[::-1])
    if not symmetric:
        src = np.where(src < 3, 3 + src, src)
    return build_csr(src, dst, rng.random(m) * 2 + 0.05, n, symmetric=symmetric)


def random_reset(rng: np.random.Generator, n: int, q: int) -> np.ndarray:
    r = np.zeros((q, n))
    for i in range(q):
        seeds = rng.choice(n, size=1 + rng.integers(0, 5), replace=False)
        r[i, seeds] = rng.random(seeds.size) + 0.1
    r[0, :] = 0
    r[0, n - 1] = 3.0  # an isolated seed: its PPR is the seed itself
    return r


def l1_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).sum(axis=1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("damping", [0.5, 0.85])
def test_matches_reference_float32(device, symmetric, damping):
    rng = np.random.default_rng(0)
    g = random_graph(rng, n=int(rng.integers(60, 300)), m=900, symmetric=symmetric)
    r = random_reset(rng, g.n_nodes, q=9)
    ref = ppr_reference(g.indptr, g.indices, g.weights, r, damping)
    x = ppr_batched(build_operator(g.indptr, g.indices, g.weights, device), r, damping=damping,
                    max_iter=300)
    assert x.shape == r.shape and x.dtype == torch.float32 and x.device.type == device
    x = x.cpu().numpy()
    assert (l1_rows(x, ref) < 1e-5).all()
    np.testing.assert_allclose(x.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(x[0], np.eye(g.n_nodes)[-1], atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_no_false_stall_when_the_change_shrinks_by_exactly_damping(device):
    # Regression: here the L1 change contracts at exactly d per step; a stall test comparing
    # against d**k (instead of a margin above it) stopped at a change of 1.2e-4, L1 error 8e-5.
    rng = np.random.default_rng(208)
    g = random_graph(rng, n=int(rng.integers(60, 300)), m=900, symmetric=False)
    r = random_reset(rng, g.n_nodes, q=9)
    ref = ppr_reference(g.indptr, g.indices, g.weights, r, 0.85)
    stats: dict = {}
    x = ppr_batched(g, r, damping=0.85, max_iter=300, device=device, stats=stats).cpu().numpy()
    assert (l1_rows(x, ref) < 1e-6).all()
    assert stats["max_l1_change"][0] < 1e-6


@pytest.mark.parametrize("device", DEVICES)
def test_matches_reference_float64_tightly(device):
    rng = np.random.default_rng(0)
    g = random_graph(rng, n=150, m=600, symmetric=False)
    r = random_reset(rng, g.n_nodes, q=5)
    op = build_operator(g.indptr, g.indices, g.weights, device, dtype=torch.float64)
    x = ppr_batched(op, r, damping=0.7, tol=1e-14, max_iter=1000).cpu().numpy()
    assert (l1_rows(x, ppr_reference(g.indptr, g.indices, g.weights, r, 0.7)) < 1e-11).all()


@pytest.mark.parametrize("device", DEVICES)
def test_matches_cpu_ppr_power(device):
    rng = np.random.default_rng(0)
    g = random_graph(rng, n=3000, m=20000, symmetric=False)
    r = random_reset(rng, g.n_nodes, q=33)
    cpu = ppr_power(g, r, damping=0.5, dtype=np.float64)  # (float32 output)
    x = ppr_batched(g, r, damping=0.5, device=device).cpu().numpy()
    assert (l1_rows(x, cpu) < 1e-5).all()


@pytest.mark.parametrize("device", DEVICES)
def test_batching_chunking_and_check_interval_do_not_change_results(device):
    rng = np.random.default_rng(0)
    g = random_graph(rng, n=400, m=2500, symmetric=False)
    r = random_reset(rng, g.n_nodes, q=10)
    op = build_operator(g.indptr, g.indices, g.weights, device)
    full = ppr_batched(op, r).cpu().numpy()
    singles = np.stack([ppr_batched(op, r[i]).cpu().numpy()[0] for i in range(len(r))])
    chunked = ppr_batched(op, r, batch_size=3, check_every=1).cpu().numpy()
    late = ppr_batched(op, r, check_every=7).cpu().numpy()
    for other in (singles, chunked, late):
        assert (l1_rows(full, other) < 2e-6).all()


@pytest.mark.parametrize("device", DEVICES)
def test_reset_input_forms_agree(device):
    rng = np.random.default_rng(0)
    g = random_graph(rng, n=120, m=500, symmetric=False)
    r = random_reset(rng, g.n_nodes, q=4)
    op = build_operator(g.indptr, g.indices, g.weights, device)
    base = ppr_batched(op, r).cpu().numpy()
    forms = [
        sp.csr_array(r),
        sp.coo_matrix(r * 5.0),  # scaling is normalized away
        torch.as_tensor(r, device=device),
        torch.as_tensor(r).to_sparse(),
    ]
    for form in forms:
        np.testing.assert_allclose(ppr_batched(op, form).cpu().numpy(), base, atol=1e-6)
    one = ppr_batched(op, r[2]).cpu().numpy()
    assert one.shape == (1, g.n_nodes)
    np.testing.assert_allclose(one[0], base[2], atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_topk_output(device):
    rng = np.random.default_rng(0)
    g = random_graph(rng, n=500, m=3000, symmetric=True)
    r = random_reset(rng, g.n_nodes, q=6)
    op = build_operator(g.indptr, g.indices, g.weights, device)
    dense = ppr_batched(op, r).cpu().numpy()
    vals, ids = ppr_batched(op, r, k=10, batch_size=4)
    vals, ids = vals.cpu().numpy(), ids.cpu().numpy()
    assert vals.shape == ids.shape == (6, 10)
    np.testing.assert_allclose(vals, np.take_along_axis(dense, ids, axis=1), atol=1e-7)
    np.testing.assert_allclose(vals, -np.sort(-dense, axis=1)[:, :10], atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_operator_is_column_stochastic_with_dangling_columns_empty(device):
    rng = np.random.default_rng(0)
    g = random_graph(rng, n=200, m=800, symmetric=False)
    op = build_operator(g.indptr, g.indices, g.weights, device)
    pt = op.pt.to_dense().cpu().numpy().astype(np.float64)
    col = pt.sum(axis=0)
    dangling = op.dangling.cpu().numpy()
    expected_dangling = np.flatnonzero(np.diff(g.indptr) == 0)
    np.testing.assert_array_equal(np.sort(dangling), expected_dangling)
    np.testing.assert_allclose(np.delete(col, dangling), 1.0, atol=1e-6)
    assert np.all(col[dangling] == 0)
    assert op.pt.crow_indices().dtype == torch.int32
    assert op.nbytes() == (g.n_nodes + 1) * 4 + g.n_edges * 8


def test_rejects_bad_input():
    rng = np.random.default_rng(0)
    g = random_graph(rng, n=30, m=80, symmetric=True)
    op = build_operator(g.indptr, g.indices, g.weights)
    r = random_reset(rng, g.n_nodes, q=2)
    with pytest.raises(ValueError, match="damping"):
        ppr_batched(op, r, damping=1.0)
    with pytest.raises(ValueError, match="columns"):
        ppr_batched(op, r[:, :-1])
    bad = r.copy()
    bad[1, 0] = -1.0
    with pytest.raises(ValueError, match="nonnegative"):
        ppr_batched(op, bad)
    bad = r.copy()
    bad[1] = 0.0
    with pytest.raises(ValueError, match="row 1"):
        ppr_batched(op, bad)


def test_warns_when_not_converged():
    rng = np.random.default_rng(0)
    g = random_graph(rng, n=100, m=500, symmetric=True)
    r = random_reset(rng, g.n_nodes, q=2)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        x = ppr_batched(g, r, max_iter=2)
    np.testing.assert_allclose(x.sum(dim=1).numpy(), 1.0, atol=1e-6)


def test_empty_batch_and_graph_without_edges():
    g = build_csr(np.zeros(0, np.int64), np.zeros(0, np.int64), None, 5)
    r = np.eye(5)[[1, 3]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = ppr_batched(g, r).numpy()
    np.testing.assert_allclose(x, r, atol=1e-7)  # every node dangling: PPR is the reset
    assert ppr_batched(g, np.zeros((0, 5))).shape == (0, 5)


def test_reference_solvers_agree():
    rng = np.random.default_rng(0)
    g = random_graph(rng, n=80, m=300, symmetric=False)
    r = random_reset(rng, g.n_nodes, q=4)
    a = ppr_reference(g.indptr, g.indices, g.weights, r, 0.6, method="solve")
    b = ppr_reference(g.indptr, g.indices, g.weights, r, 0.6, method="power")
    assert (l1_rows(a, b) < 1e-11).all()
    np.testing.assert_allclose(a.sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_a_question_gets_the_same_result_alone_and_in_any_batch(device):
    """Converged columns are frozen: a fast-converging question alone equals the same question
    in a batch of slow ones (which would otherwise keep iterating it), top-k and scores."""
    rng = np.random.default_rng(5)
    # nodes 0..1999: a cycle (the L1 change shrinks by ~d per step); 2000..2011: a clique
    # (it collapses at once)
    ring = np.arange(2000)
    a, b = np.triu_indices(12, 1)
    g = build_csr(np.r_[ring, a + 2000], np.r_[(ring + 1) % 2000, b + 2000],
                  np.r_[rng.random(2000) + 0.5, rng.random(a.size) + 0.5], 2012, symmetric=True)
    fast = np.zeros(g.n_nodes)
    fast[[2003, 2007]] = [1.0, 0.5]
    slow = np.zeros((6, g.n_nodes))
    for i in range(6):
        slow[i, rng.choice(2000, size=3, replace=False)] = rng.random(3) + 0.1
    op = build_operator(g.indptr, g.indices, g.weights, device)
    stats_alone: dict = {}
    alone = ppr_batched(op, fast, damping=0.85, tol=1e-4, stats=stats_alone).cpu().numpy()[0]
    batch = np.vstack([slow[:3], fast, slow[3:]])
    stats_batch: dict = {}
    together = ppr_batched(op, batch, damping=0.85, tol=1e-4, stats=stats_batch).cpu().numpy()
    assert stats_batch["iterations"][0] > stats_alone["iterations"][0]  # the batch ran longer
    np.testing.assert_allclose(together[3], alone, rtol=0, atol=1e-7)
    for k in (3, 8):
        v1, i1 = ppr_batched(op, fast, damping=0.85, tol=1e-4, k=k)
        v2, i2 = ppr_batched(op, batch, damping=0.85, tol=1e-4, k=k)
        np.testing.assert_array_equal(i2[3].cpu().numpy(), i1[0].cpu().numpy())
        np.testing.assert_allclose(v2[3].cpu().numpy(), v1[0].cpu().numpy(), atol=1e-7)
    # the slow ones are unchanged by the fast one's presence, and still correct
    without = ppr_batched(op, slow, damping=0.85, tol=1e-4).cpu().numpy()
    np.testing.assert_allclose(np.delete(together, 3, axis=0), without, atol=1e-7)
    ref = ppr_reference(g.indptr, g.indices, g.weights, batch, 0.85)
    assert (l1_rows(together, ref) < 1e-3).all()


def test_one_host_sync_per_convergence_check(monkeypatch):
    """Each check reads its flags and errors back in one transfer (``tolist``), not one per
    flag (``float``/``bool``): on a GPU each is a device sync. Counted on CPU tensors through
    the Tensor methods that copy to the host; the iterations and results are unchanged."""
    from gpurag.kernels import ppr_batched as pb

    rng = np.random.default_rng(3)
    g = random_graph(rng, n=200, m=900, symmetric=False)
    r = random_reset(rng, g.n_nodes, q=6)
    op = build_operator(g.indptr, g.indices, g.weights, "cpu")
    qi, node, val, q = pb._reset_triples(r, op.n_nodes, op.device, op.dtype)
    want, want_it, want_err = pb._power_chunk(op, qi, node, val, q, 0.85, 1e-8, 300, 2)
    syncs = []
    for name in ("__bool__", "__float__", "__int__", "__index__", "item", "tolist"):
        real = getattr(torch.Tensor, name)

        def counted(self, *args, _real=real, _name=name):
            syncs.append(_name)
            return _real(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    x, it, err = pb._power_chunk(op, qi, node, val, q, 0.85, 1e-8, 300, 2)
    monkeypatch.undo()
    checks = it // 2 + (it % 2 != 0)
    assert len(syncs) == checks, syncs
    assert (it, err) == (want_it, want_err)
    torch.testing.assert_close(x, want, rtol=0, atol=0)


@pytest.mark.parametrize("bad", [{"check_every": 0}, {"max_iter": 0}, {"check_every": 1.5},
                                 {"damping": 1.0}])
def test_power_chunks_rejects_bad_settings_before_the_first_chunk(bad):
    """``check_every=0`` (the bench's ``cuda:0``) was a bare ZeroDivisionError mid-walk."""
    from gpurag.backends.query_device import DeviceWalk
    from gpurag.kernels.ppr_batched import _reset_triples, power_chunks

    rng = np.random.default_rng(0)
    g = random_graph(rng, n=50, m=200, symmetric=True)
    op = build_operator(g.indptr, g.indices, g.weights, "cpu")
    qi, node, val, q = _reset_triples(random_reset(rng, g.n_nodes, q=2), op.n_nodes,
                                      op.device, op.dtype)
    kwargs = {"damping": 0.5, "tol": 1e-8, "max_iter": 100, "check_every": 1} | bad
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        power_chunks(op, qi, node, val, q, **kwargs)  # raised at the call, not when iterated
    if name == "check_every":
        with pytest.raises(ValueError, match="check_every must be an integer >= 1"):
            DeviceWalk("cpu", check_every=bad[name])


@pytest.mark.parametrize("damping", [1.0, -0.1, 2.0])
def test_check_settings_uses_the_host_damping_check(damping):
    """One damping check (graph/ppr.py's): the same message from the kernel's settings."""
    from gpurag.graph.ppr import _check_damping
    from gpurag.kernels.ppr_batched import check_settings

    with pytest.raises(ValueError) as host:
        _check_damping(damping)
    with pytest.raises(ValueError) as kernel:
        check_settings(damping, 10, 1)
    assert str(kernel.value) == str(host.value)
