"""The default embedder: deterministic, unit norm, 384-d, semantically sane; clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from gpurag.backends.embed import load_embedder
from gpurag.embed.base import Embedder
from gpurag.errors import ConfigError

TEXTS = [
    "The cat sat on the mat.",
    "Quantum mechanics describes nature at the smallest scales of energy.",
    "hello",
    "A much longer sentence about the history of the Roman empire, its emperors, its roads, "
    "its aqueducts and the slow decline of its western half over several centuries.",
    "Café naïve 東京 😀",
    "",
]


def test_protocol_and_shape(embedder):
    assert isinstance(embedder, Embedder)
    assert embedder.dim == 384
    vecs = embedder.encode(TEXTS)
    assert vecs.shape == (len(TEXTS), 384) and vecs.dtype == np.float32
    assert np.isfinite(vecs).all()
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


def test_empty_list(embedder):
    out = embedder.encode([])
    assert out.shape == (0, 384) and out.dtype == np.float32


def test_deterministic_across_calls_batch_sizes_and_orders(embedder):
    ref = embedder.encode(TEXTS)
    np.testing.assert_array_equal(embedder.encode(TEXTS), ref)
    for bs in (1, 2, 4):
        np.testing.assert_allclose(embedder.encode(TEXTS, batch_size=bs), ref, atol=1e-5)
    perm = [3, 0, 5, 2, 4, 1]
    np.testing.assert_allclose(embedder.encode([TEXTS[i] for i in perm]), ref[perm], atol=1e-5)
    singles = np.vstack([embedder.encode([t]) for t in TEXTS])
    np.testing.assert_allclose(singles, ref, atol=1e-5)
    # distinct texts get distinct vectors
    assert len({v.tobytes() for v in ref}) == len(TEXTS)


def test_semantic_sanity(embedder):
    a, para, other = embedder.encode([
        "The company's headquarters are located in the city of Varnholt.",
        "The firm is based in Varnholt, where its head office stands.",
        "Bananas are rich in potassium and grow in tropical climates.",
    ])
    assert float(a @ para) > float(a @ other) + 0.2


def test_count_tokens_and_offsets(embedder):
    counts = embedder.count_tokens(["hello world", "", "a " * 600])
    assert counts[0] == 2 and counts[1] == 0
    assert counts[2] == 600, "count_tokens must not truncate"
    offs = embedder.token_offsets("hello world")
    assert offs.tolist() == [[0, 5], [6, 11]]
    batch = embedder.token_offsets_batch(["hello world", "a " * 600])
    assert batch[0].tolist() == offs.tolist() and batch[1].shape == (600, 2)


def test_long_text_is_truncated_not_failing(embedder):
    long = "word " * 2000
    vec = embedder.encode([long])
    assert vec.shape == (1, 384)
    np.testing.assert_allclose(np.linalg.norm(vec), 1.0, atol=1e-5)


def test_load_embedder_is_cached(embedder):
    from gpurag.device import resolve_device

    assert load_embedder("minilm", device=resolve_device()) is embedder


def test_missing_onnx_path_is_config_error(tmp_path):
    missing = tmp_path / "nowhere" / "model.onnx"
    with pytest.raises(ConfigError, match="ONNX model not found") as info:
        load_embedder(f"onnx:{missing}")
    assert str(missing) in str(info.value)


@pytest.mark.parametrize("spec", ["bert", "onnx", "sentence-transformers:/x", "MINILM"])
def test_unknown_spec_is_config_error(spec):
    with pytest.raises(ConfigError, match="unknown embedder spec") as info:
        load_embedder(spec)
    assert repr(spec) in str(info.value)
