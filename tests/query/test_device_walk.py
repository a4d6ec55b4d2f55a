"""The walk segment on a torch device (gpurag/backends/query_device.py, chosen by the runtime's
``query_walk``) against the NumPy stages: the same per-question top-k passages.

Run on CPU tensors here (``DeviceWalk("cpu")``) and, with a GPU, on cuda. Tolerance: the
passage ids and their order must be identical; the shown scores agree to 1e-5 relative (the
PPR's float32 sums run in another order than SciPy's, so values differ in the last bits;
exact ties are broken the same way, by the lower row). The host's ``ppr_method="auto"`` is
power iteration on these small graphs (push only from 500k edges), as on the device.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpurag import Index  # noqa: E402
from gpurag.backends.query_device import DeviceWalk, query_walk_part  # noqa: E402
from gpurag.runtime import Runtime  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")])]
# the default profile, each head mode, every head source, the dense blend without a second hop
OPTIONS = [{}, {"head_mode": "union"},
           {"head_mode": "fused", "head_fusion": "dense+bm25+title+ppr"},
           {"dense_blend": 0.3, "second_hop_weight": 0.0, "second_hop_expansions": 0}]

REPO = Path(__file__).resolve().parents[2]
HOTPOT = next((d / "hotpotqa_train100" for d in (REPO / "shared" / "data",
                                                 REPO.parent / "shared" / "data",
                                                 REPO.parent.parent / "shared" / "data")
               if (d / "hotpotqa_train100" / "corpus.jsonl").is_file()), None)


def ranked(results) -> list[list[str]]:
    return [[p.chunk_id for p in r.passages] for r in results]


def scores(results) -> list[list[float]]:
    return [[p.score for p in r.passages] for r in results]


def assert_same(host, device, questions: list[str], k: int, **options) -> None:
    for batch in (len(questions), 1):
        want, got = [], []
        for i in range(0, len(questions), batch):
            want += host.query_batch(questions[i:i + batch], k=k, evidence=False, **options)
            got += device.query_batch(questions[i:i + batch], k=k, evidence=False, **options)
        assert ranked(got) == ranked(want), (batch, options)
        for a, b in zip(scores(got), scores(want), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
        assert [[s.entity_id for s in r.seeds] for r in got] == [
            [s.entity_id for s in r.seeds] for r in want]


@pytest.fixture(scope="module")
def host_index(graph_index):
    return Index.open(graph_index.path, runtime=Runtime(device="cpu"))


@pytest.fixture(scope="module", params=DEVICES)
def device_index(request, graph_index):
    walk = DeviceWalk(request.param)
    return Index.open(graph_index.path, runtime=Runtime(device="cpu", query_walk=walk)), walk


def test_cpu_runtime_keeps_the_numpy_stages():
    assert Runtime(device="cpu").query_walk is None
    assert query_walk_part("cpu") is None


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "union", "fused-all", "blend"])
def test_device_walk_gives_the_host_ranks(host_index, device_index, questions, options):
    index, walk = device_index
    batches = walk.batches
    assert_same(host_index, index, questions, 10, **options)
    assert walk.batches > batches  # the device segment ran, not the host stages


def test_index_arrays_uploaded_once_per_index(graph_index, questions, device_index):
    index, walk = device_index
    index.query_batch(questions[:3], k=5)
    uploads, batches = walk.uploads, walk.batches
    ix = walk.index_for(index.retriever)
    for q in questions[:4]:
        index.query(q, k=5)
    assert walk.batches == batches + 4 and walk.uploads == uploads
    assert walk.index_for(index.retriever) is ix  # the same tensors, not a new upload
    other = Index.open(graph_index.path, runtime=index.runtime)  # another opened index
    other.query(questions[0], k=5)
    assert walk.uploads == uploads + 1


def test_a_reranked_query_takes_the_host_stages(host_index, device_index, questions):
    """A reranker reads the PPR around its candidates, which the device segment does not
    return: the query runs the host stages (on cuda: the device PPR part) and ranks as the
    host does."""
    pytest.importorskip("torch_geometric")
    index, walk = device_index
    batches = walk.batches
    got = index.query_batch(questions[:4], k=5, rerank="gat", evidence=False)
    want = host_index.query_batch(questions[:4], k=5, rerank="gat", evidence=False)
    assert walk.batches == batches
    assert ranked(got) == ranked(want)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_runtime_selects_the_device_walk():
    part = Runtime(device="cuda").query_walk
    assert isinstance(part, DeviceWalk) and part.device == "cuda"


@pytest.fixture(scope="module")
def hotpot_subset(tmp_path_factory):
    """An index of the gold passages of hotpotqa_train100's first 24 questions and two
    distractors each (about 100 passages), and those questions."""
    if HOTPOT is None:
        pytest.skip("shared data not present")
    lines = lambda p: [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines()  # noqa: E731
                       if x.strip()]
    questions = lines(HOTPOT / "questions.jsonl")[:24]
    corpus = lines(HOTPOT / "corpus.jsonl")
    gold = {g for q in questions for g in q["gold_ids"]}
    pos = {r["id"]: i for i, r in enumerate(corpus)}
    picked = set(gold)
    for g in sorted(gold):  # the passages beside each gold one
        picked |= {corpus[j]["id"] for j in (pos[g] + 1, pos[g] + 2) if j < len(corpus)}
    out = tmp_path_factory.mktemp("hotpot")
    src = out / "corpus.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in corpus if r["id"] in picked),
                   encoding="utf-8")
    Index.build(src, out / "index", show_progress=False)
    return out / "index", [q["question"] for q in questions]


@pytest.mark.slow  # builds a 100-passage index: ~30 s idle, 2.5 min at a load of 14 on 2 cores
@pytest.mark.parametrize("dev", DEVICES)
def test_device_walk_on_a_shared_set(hotpot_subset, dev):
    path, questions = hotpot_subset
    host = Index.open(path, runtime=Runtime(device="cpu"))
    walk = DeviceWalk(dev)
    device = Index.open(path, runtime=Runtime(device="cpu", query_walk=walk))
    for options in OPTIONS[:2]:
        assert_same(host, device, questions, 10, **options)
    assert walk.uploads == 1


@pytest.mark.parametrize("dev", DEVICES)
def test_query_walk_contract(graph_index, questions, dev):
    from gpurag.contracts import check_query_walk

    check_query_walk(DeviceWalk(dev), graph_index.path, questions[:6],
                     options=({}, {"head_mode": "union"}))


class _OwnPPR:
    """A user's PPR part: the host one, counting its calls."""

    implementation = "test ppr"

    def __init__(self) -> None:
        from gpurag.graph.ppr_top import host_ppr_topk

        self.calls, self._ppr = 0, host_ppr_topk

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._ppr(*args, **kwargs)


def test_a_users_ppr_is_not_replaced_by_the_walk(graph_index, questions, monkeypatch):
    """Where the device walk would be resolved (patched in for cuda's), a user's own ``ppr``
    keeps it unresolved and is what the queries walk with; ``query_walk=False`` is off."""
    import gpurag.backends as backends

    resolved = dict(backends.parts_for("cpu"), query_walk=DeviceWalk("cpu"))
    monkeypatch.setattr(backends, "parts_for", lambda device, gat=None: dict(resolved))
    assert isinstance(Runtime(device="cpu").query_walk, DeviceWalk)  # resolved when not given
    mine = _OwnPPR()
    rt = Runtime.create(device="cpu", ppr=mine)
    assert rt.query_walk is None and rt.ppr is mine
    Index.open(graph_index.path, runtime=rt).query_batch(questions[:3], k=5, evidence=False)
    assert mine.calls > 0
    off = Runtime(device="cpu", query_walk=False)
    assert off.query_walk is None and off.describe()["walk"].startswith("host stages")
    host = Index.open(graph_index.path, runtime=off)
    assert ranked(host.query_batch(questions[:3], k=5, evidence=False)) == ranked(
        Index.open(graph_index.path, runtime=Runtime(device="cpu", ppr=_OwnPPR())
                   ).query_batch(questions[:3], k=5, evidence=False))


def test_the_walk_runs_from_the_hosts_reset_matrix(device_index, questions, monkeypatch):
    """The device walks from the host's reset (query/seeds.py), row-normalized as the host PPR
    does it: the triples it hands the power iteration are the host's, bit for bit (no reset
    arithmetic and no atomic sums on the device)."""
    import gpurag.kernels.ppr_batched as pb
    import gpurag.query.graph as graph_mod
    from gpurag.graph.ppr import normalized_reset

    index, _ = device_index
    resets, triples = [], []
    real_reset, real_chunks = graph_mod.seed_reset, pb.power_chunks

    def seed_reset(*args, **kwargs):
        out = real_reset(*args, **kwargs)
        resets.append(out[0])
        return out

    def power_chunks(op, qi, node, val, q, **kwargs):
        triples.append((qi.cpu().numpy(), node.cpu().numpy(), val.cpu().numpy()))
        return real_chunks(op, qi, node, val, q, **kwargs)

    monkeypatch.setattr(graph_mod, "seed_reset", seed_reset)
    monkeypatch.setattr(pb, "power_chunks", power_chunks)
    index.query_batch(questions[:6], k=5, evidence=False)
    assert len(resets) == len(triples) == 1
    host = normalized_reset(resets[0], index.retriever.n_ent + index.retriever.n_psg).tocoo()
    qi, node, val = triples[0]
    np.testing.assert_array_equal(qi, host.row)
    np.testing.assert_array_equal(node, host.col)
    np.testing.assert_array_equal(val, host.data.astype(np.float32))


def test_walk_chunks_count_the_allocators_free_cache(monkeypatch):
    """The walk's questions per chunk on cuda: 60% of the free memory, where the allocator's
    reserved-but-unused cache is free too (mem_get_info does not count it). The cuda memory
    queries are stood in for (no GPU here): 1 GB free, 3 GB reserved of which 1 GB used."""
    from gpurag.backends.query_device import _BYTES_PER_ENTRY

    gb = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (gb, 80 * gb))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 * gb)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: gb)
    n = 1_000_000
    assert DeviceWalk("cuda")._columns(n, 10**6) == int(0.6 * 3 * gb // (_BYTES_PER_ENTRY * n))
    assert DeviceWalk("cuda")._columns(n, 5) == 5
    assert DeviceWalk("cpu")._columns(n, 10**6) is None


def test_the_walks_ppr_is_named_as_the_runtime_names_its_parts(graph_index):
    """The retriever names its PPR part by ``backends.part.implementation_name`` (a plain
    function by its qualified name, a Part by its implementation)."""
    from gpurag.backends.part import implementation_name
    from gpurag.graph.ppr_top import host_ppr_topk

    index = Index.open(graph_index.path, runtime=Runtime.create(device="cpu", ppr=host_ppr_topk))
    assert index.retriever.ppr_name == "host_ppr_topk"
    cpu = Runtime(device="cpu")
    named = Index.open(graph_index.path, runtime=cpu).retriever.ppr_name
    assert named == implementation_name(cpu.ppr) and named.startswith("scipy")
