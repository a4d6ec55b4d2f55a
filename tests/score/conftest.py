"""Fixtures of the GAT scorer tests: a synthetic graph (no index) and the sample index."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("safetensors")

from gpurag.graph.csr import build_csr
from gpurag.score.features import CandidateInputs, GraphArrays

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample"


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def make_toy(seed: int = 0, n_ent: int = 40, n_psg: int = 60, dim: int = 16, q: int = 12,
             c: int = 10) -> tuple[GraphArrays, CandidateInputs, list[np.ndarray]]:
    """A random entity-passage graph, questions, candidates and gold rows.

    Gold: the two candidates most similar to the question, so the task is learnable.
    """
    rng = np.random.default_rng(seed)
    psg = np.repeat(np.arange(n_psg), 3) + n_ent
    ent = rng.integers(0, n_ent, psg.size)
    ea, eb = rng.integers(0, n_ent, 30), rng.integers(0, n_ent, 30)
    graph = build_csr(np.r_[psg, ea], np.r_[ent, eb], rng.uniform(0.5, 2, psg.size + 30),
                      n_ent + n_psg)
    arrays = GraphArrays(graph, n_ent, n_psg, _unit(rng.normal(size=(n_ent, dim))),
                         _unit(rng.normal(size=(n_psg, dim))),
                         rng.uniform(0.2, 1, n_ent).astype(np.float32))
    qvecs = _unit(rng.normal(size=(q, dim)))
    cand = np.stack([rng.choice(n_psg, c, replace=False) for _ in range(q)])
    ppr = rng.random((q, n_ent + n_psg)).astype(np.float32) ** 4
    sims = qvecs @ arrays.passage_emb.T
    dense_rows = np.argsort(-sims, axis=1)[:, :8]
    dense_scores = np.take_along_axis(sims, dense_rows, axis=1)
    inputs = CandidateInputs(qvecs, cand, ppr, dense_scores, dense_rows)
    cs = np.take_along_axis(sims, cand, axis=1)
    gold = [cand[i, np.argsort(-cs[i])[:2]] for i in range(q)]
    return arrays, inputs, gold


@pytest.fixture
def toy():
    return make_toy()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.setenv("GPURAG_PROGRESS", "0")
    for name in list(os.environ):
        if name.startswith(("GPURAG_INDEX_", "GPURAG_QUERY_", "GPURAG_GAT_")):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory):
    """The bundled sample corpus (57 passages) indexed with its graph, once per session."""
    from gpurag.eval.datasets import load_dataset
    from gpurag.eval.runner import open_or_build_index

    os.environ.setdefault("GPURAG_PROGRESS", "0")
    index, _, _ = open_or_build_index(load_dataset(SAMPLE),
                                      str(tmp_path_factory.mktemp("gat") / "sample"), None,
                                      show_progress=False)
    return index
