"""Embedding backends. ``load_embedder(spec)`` picks one by a short spec string.

Specs: ``None`` or ``"minilm"`` -- the bundled int8 ONNX all-MiniLM-L6-v2 (default);
``"onnx:/path/model.onnx"`` -- another MiniLM-compatible ONNX export with the bundled tokenizer;
``"st:/path/to/model"`` -- a local sentence-transformers model directory.
"""

from __future__ import annotations

from functools import lru_cache

from gpurag.embed.base import Embedder
from gpurag.errors import ConfigError

DEFAULT_EMBEDDER = "minilm"


def load_embedder(spec: str | None = None, device: str = "cpu") -> Embedder:
    """Load (once per process) the embedder named by ``spec``; nothing is ever downloaded."""
    return _load(spec or DEFAULT_EMBEDDER, device if spec and spec.startswith("st:") else "cpu")


@lru_cache(maxsize=4)
def _load(spec: str, device: str) -> Embedder:
    if spec == "minilm":
        from gpurag.embed.onnx_minilm import OnnxMiniLMEmbedder

        return OnnxMiniLMEmbedder()
    if spec.startswith("onnx:"):
        from gpurag.embed.onnx_minilm import OnnxMiniLMEmbedder

        return OnnxMiniLMEmbedder(model_path=spec[5:])
    if spec.startswith("st:"):
        from gpurag.embed.sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(spec[3:], device=device)
    raise ConfigError(f"unknown embedder spec {spec!r}: use 'minilm', 'onnx:PATH' or 'st:PATH'")


__all__ = ["DEFAULT_EMBEDDER", "Embedder", "load_embedder"]
