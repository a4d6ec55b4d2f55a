"""The runtime: built once, passed down; each build records what it ran and nothing else."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpurag import Index
from gpurag.backends import parts_for
from gpurag.backends.part import Part
from gpurag.runtime import Runtime, Settings, read_settings
from tests.conftest import SAMPLE

# Builds of texts embedded before in the session read their vectors back.
pytestmark = pytest.mark.usefixtures("shared_embeddings")

CPU_GRAPH_COMPONENTS = {"device", "embed", "vectors", "extract", "knn", "leiden", "lexical"}


def test_settings_are_read_in_one_place():
    s = read_settings({"GPURAG_DEVICE": "cpu", "GPURAG_PROGRESS": "0",
                       "GPURAG_EMBED_CACHE": "/x", "GPURAG_GAT_CHECKPOINT": "/w"})
    assert s == Settings(device="cpu", progress=False, embed_cache="/x", gat_checkpoint="/w")
    assert read_settings({}).progress is None and read_settings({}).device is None
    rt = Runtime.create(Settings(device="cpu"), progress=False)
    assert rt.device == "cpu" and rt.ppr is parts_for("cpu")["ppr"]  # resolved once
    assert rt.show_progress(True) is False


def test_a_cpu_build_records_what_it_used_and_nothing_else(graph_index, sample_questions):
    graph_index.query_batch([q["question"] for q in sample_questions[:2]], mode="graph")
    built = graph_index.manifest.components
    assert set(built) == CPU_GRAPH_COMPONENTS
    assert built["device"] == "cpu"
    assert built["knn"].startswith("faiss-cpu") and built["vectors"].startswith("faiss-cpu")
    assert built["leiden"].split()[0] in ("graspologic-native", "igraph")
    assert built["extract"].startswith("fast")
    # only CPU implementations are named on a CPU machine
    assert not any(w in v for v in built.values() for w in ("cuda", "torch", "cugraph"))


def test_two_builds_in_one_process_record_only_their_own(graph_index, sample_questions,
                                                           tmp_path):
    # The first build ran the graph stage and was queried (PPR ran); the second runs neither.
    graph_index.query_batch([sample_questions[0]["question"]], mode="graph")
    dense = Index.build(SAMPLE / "corpus.jsonl", tmp_path / "dense", graph=False,
                        show_progress=False)
    assert set(dense.manifest.components) == {"device", "embed", "vectors"}
    assert set(graph_index.manifest.components) == CPU_GRAPH_COMPONENTS


def test_graph_stage_and_queries_run_the_runtime_backends(tmp_path, sample_questions):
    cpu = Runtime(device="cpu")
    calls: dict[str, list] = {"knn": [], "leiden": [], "ppr": []}

    def knn(vectors, **kw):
        calls["knn"].append(len(vectors))
        return cpu.knn(vectors, **kw)

    def leiden(g, **kw):
        calls["leiden"].append(g.n_nodes)
        df = cpu.leiden(g, **kw)
        df.attrs["implementation"] = "test-leiden"
        return df

    def ppr(g, reset, **kw):
        top = cpu.ppr(g, reset, **kw)
        calls["ppr"].append((reset.shape, kw["k"], top.values.shape, top.full))
        return top

    rt = dataclasses.replace(cpu, knn=Part(knn, "test-knn"), leiden=leiden, ppr=ppr,
                             progress=False)
    index = Index.build(SAMPLE / "corpus.jsonl", tmp_path / "idx", show_progress=False,
                        runtime=rt)
    assert calls["knn"] and calls["leiden"]
    assert index.manifest.components["knn"] == "test-knn"
    assert index.manifest.components["leiden"] == "test-leiden"
    qs = [q["question"] for q in sample_questions[:3]]
    index.query_batch(qs, k=4, mode="graph")
    (shape, k, got, full), = calls["ppr"]
    assert shape[0] == 3 and got == (3, k) and k <= index.retriever.n_psg
    assert full is None, "no dense (q, n) result comes back without a reranker"


def test_llm_model_and_endpoint_are_index_settings():
    from gpurag.config import IndexConfig
    from gpurag.llm.config import LLMConfig
    from gpurag.pipeline.build import build_stage_inputs, pin_llm
    from gpurag.pipeline.graph_stage import index_llm_config

    rt = Runtime(device="cpu", llm_config=LLMConfig(url="http://a:1/v1", model="m1"))
    cfg = pin_llm(IndexConfig(extractor="llm"), rt)
    assert (cfg.llm_model, cfg.llm_url) == ("m1", "http://a:1/v1")
    other = pin_llm(IndexConfig(extractor="llm"), dataclasses.replace(
        rt, llm_config=LLMConfig(url="http://a:1/v1", model="m2")))
    a, b = build_stage_inputs(SAMPLE, cfg), build_stage_inputs(SAMPLE, other)
    assert a["chunk_embed"] == b["chunk_embed"]  # the embeddings do not depend on the LLM
    assert a["extract"] != b["extract"]
    assert pin_llm(IndexConfig(), rt).llm_model is None  # not an LLM build
    assert index_llm_config(cfg, LLMConfig(url="http://b:2/v1")).model == "m1"


@pytest.mark.parametrize("env", [{"GPURAG_PROGRESS": "0"}, {"GPURAG_PROGRESS": "1"}, {}])
def test_progress_setting(env):
    rt = Runtime.create(read_settings({**env, "GPURAG_DEVICE": "cpu"}))
    assert rt.show_progress(False) is False
    want = {"0": False, "1": True}.get(env.get("GPURAG_PROGRESS", ""))
    assert rt.show_progress(True) is want


def test_index_graph_is_a_deprecated_alias(graph_index):
    with pytest.warns(DeprecationWarning):
        assert graph_index.graph is graph_index.retriever
    assert np.asarray(graph_index.retriever.graph.indptr).ndim == 1


def test_llm_extractor_gets_the_runtime_settings_not_the_environment(monkeypatch):
    from gpurag.config import IndexConfig
    from gpurag.llm.config import LLMConfig
    from gpurag.pipeline.graph_stage import make_stage_extractor

    monkeypatch.setenv("GPURAG_LLM_URL", "http://from-env:9/v1")
    monkeypatch.setenv("GPURAG_LLM_MODEL", "env-model")
    cfg = IndexConfig(extractor="llm", llm_model="cfg-model", llm_url="http://cfg:1/v1")
    ex = make_stage_extractor(cfg, LLMConfig(url="http://runtime:2/v1", concurrency=3),
                              progress=False)
    llm = ex.primary  # the LLM's output goes on top of the rule-based extraction
    assert llm.config.model == "cfg-model" and llm.config.url.startswith("http://cfg:1")
    assert llm.config.concurrency == 3 and llm.progress is False
    assert ex.base.name.startswith("fast") and ex.name == f"{llm.name}+{ex.base.name}"


@pytest.fixture
def walk_resolved(monkeypatch):
    """The runtime's resolution as on a GPU machine: a device walk (on CPU tensors here)."""
    pytest.importorskip("torch")
    import gpurag.backends as backends
    from gpurag.backends.query_device import DeviceWalk

    walk, real = DeviceWalk("cpu"), backends.parts_for
    monkeypatch.setattr(backends, "parts_for",
                        lambda device, ckpt=None: {**real(device, ckpt), "query_walk": walk})
    return walk


def test_a_replaced_ppr_is_the_one_a_query_walks_with(walk_resolved, graph_index,
                                                       sample_questions):
    rt = Runtime(device="cpu")
    assert rt.query_walk is walk_resolved
    calls = []

    def ppr(g, reset, **kw):
        calls.append(reset.shape[0])
        return rt.ppr(g, reset, **kw)

    mine = dataclasses.replace(rt, ppr=ppr)
    assert mine.query_walk is None and mine.ppr is ppr  # the resolved device walk is dropped
    assert mine.searcher is rt.searcher and mine.rerankers is rt.rerankers  # the rest kept
    qs = [q["question"] for q in sample_questions[:3]]
    index = Index.open(graph_index.path, runtime=mine)
    got = index.query_batch(qs, k=4, mode="graph")
    assert calls == [3] and walk_resolved.batches == 0
    want = Index.open(graph_index.path, runtime=rt).query_batch(qs, k=4, mode="graph")
    assert walk_resolved.batches == 1  # the original still walks on the device
    assert [[p.chunk_id for p in r.passages] for r in got] == [
        [p.chunk_id for p in r.passages] for r in want]
    # replacing another part keeps the walk; a walk turned off stays off; the ppr back walks
    assert dataclasses.replace(rt, progress=False).query_walk is walk_resolved
    assert dataclasses.replace(mine, ppr=None).query_walk is walk_resolved
    off = Runtime(device="cpu", query_walk=False)
    assert off.query_walk is None
    assert dataclasses.replace(off, progress=False).query_walk is None
    # a new checkpoint resolves the reranker loader again (it loads that checkpoint)
    assert dataclasses.replace(rt, gat_checkpoint="/w").rerankers is not rt.rerankers
