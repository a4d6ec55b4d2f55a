"""bench/standin.py: the host-only bench's stand-in embedder is deterministic, has the real
embedder's shape, tokenizer and dtype, and its token-id path gives the same vectors."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


standin = _load("standin")
TEXTS = ["Barack Obama", "Barack H. Obama", "The Beatles", "Jarred Shaw\nJarred Shaw (born "
         "September 28, 1990) is an American professional basketball player.", ""]


def test_deterministic_unit_rows_of_the_real_shape():
    a = standin.HashProjectionEmbedder().encode(TEXTS)
    b = standin.HashProjectionEmbedder().encode(TEXTS)
    assert a.shape == (len(TEXTS), 384) and a.dtype == np.float32
    assert np.array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-5)
    assert a[0] @ a[1] > a[0] @ a[2]  # shared tokens: near-duplicate names land near


def test_token_ids_give_the_same_vectors_and_tokenizer_is_minilms():
    from gpurag.embed.tokens import MiniLMTokens

    emb = standin.HashProjectionEmbedder()
    assert isinstance(emb, MiniLMTokens) and emb.max_tokens == 512
    flat, lengths = emb.model_inputs(TEXTS)
    assert np.array_equal(emb.encode_tokens(flat, lengths), emb.encode(TEXTS))
    assert emb.count_tokens(["Barack Obama"]) == [len(emb.tokenizer.encode(
        "Barack Obama", add_special_tokens=False).ids)]


def test_index_digest_covers_every_file_but_the_manifest(tmp_path):
    scale = _load("scale")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "a.parquet").write_bytes(b"x")
    (tmp_path / "manifest.json").write_text("{}")
    first = scale.index_digest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"timings": 1}')
    assert scale.index_digest(tmp_path) == first
    (tmp_path / "tables" / "a.parquet").write_bytes(b"y")
    assert scale.index_digest(tmp_path) != first
