"""Embedding backends. ``load_embedder(spec, device)`` picks one by a short spec string.

Specs: ``None`` or ``"minilm"`` -- the bundled all-MiniLM-L6-v2 (default): the int8 ONNX file
through onnxruntime on the CPU, the same weights as a torch model in float16 on ``cuda``
(:mod:`gpurag.embed.torch_minilm`; ONNX on the CPU when torch sees no GPU);
``"onnx-minilm"`` / ``"torch-minilm"`` -- that model through one implementation on any device;
``"onnx:/path/model.onnx"`` -- another MiniLM-compatible ONNX export with the bundled tokenizer;
``"st:/path/to/model"`` -- a local sentence-transformers model directory.

Every embedder has ``name`` (the model identity) and ``implementation`` (what computes it,
e.g. ``"torch-cuda float16 minilm-l6-v2 (...)"``), for ``gpurag info`` and the manifest.
"""

from __future__ import annotations

from functools import lru_cache

from gpurag.embed.base import Embedder
from gpurag.errors import ConfigError

DEFAULT_EMBEDDER = "minilm"
SPECS = "'minilm', 'onnx-minilm', 'torch-minilm', 'onnx:PATH' or 'st:PATH'"


def _normalize_device(device: str | None) -> str:
    """``"cpu"`` or ``"cuda[:N]"`` (``None``/``"auto"`` resolved by :mod:`gpurag.device`)."""
    if not device or device == "auto":
        from gpurag.device import resolve_device

        return resolve_device(None)
    return device


def _torch_cuda_usable() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def load_embedder(spec: str | None = None, device: str | None = "cpu") -> Embedder:
    """Load (once per process) the embedder named by ``spec`` for ``device``; nothing is ever
    downloaded."""
    spec = spec or DEFAULT_EMBEDDER
    dev = _normalize_device(device)
    if spec == "minilm":
        spec = "torch-minilm" if dev.startswith("cuda") and _torch_cuda_usable() else "onnx-minilm"
    if spec in ("onnx-minilm",) or spec.startswith("onnx:"):
        dev = "cpu"  # onnxruntime's CPU provider
    return _load(spec, dev)


@lru_cache(maxsize=4)
def _load(spec: str, device: str) -> Embedder:
    if spec == "onnx-minilm":
        from gpurag.embed.onnx_minilm import OnnxMiniLMEmbedder

        return OnnxMiniLMEmbedder()
    if spec == "torch-minilm":
        from gpurag.embed.torch_minilm import TorchMiniLMEmbedder

        return TorchMiniLMEmbedder(device=device)
    if spec.startswith("onnx:"):
        from gpurag.embed.onnx_minilm import OnnxMiniLMEmbedder

        return OnnxMiniLMEmbedder(model_path=spec[5:])
    if spec.startswith("st:"):
        from gpurag.embed.sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(spec[3:], device=device)
    raise ConfigError(f"unknown embedder spec {spec!r}: use {SPECS}")


__all__ = ["DEFAULT_EMBEDDER", "Embedder", "load_embedder"]
