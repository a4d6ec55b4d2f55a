"""Embedders: the bundled MiniLM (ONNX on the CPU, torch on a GPU), other ONNX exports,
sentence-transformers models. Which one runs on a device is chosen by
:mod:`gpurag.backends.embed` (``embedders(spec)`` of the runtime), by a short spec string:
``None``/``"minilm"``, ``"onnx-minilm"``, ``"torch-minilm"``, ``"onnx:PATH"``, ``"st:PATH"``.

Every embedder has ``name`` (the model identity) and ``implementation`` (what computes it,
e.g. ``"torch-cuda float16 minilm-l6-v2 (...)"``), for ``gpurag info`` and the manifest.
"""

from __future__ import annotations

from gpurag.embed.base import Embedder

DEFAULT_EMBEDDER = "minilm"
SPECS = "'minilm', 'onnx-minilm', 'torch-minilm', 'onnx:PATH' or 'st:PATH'"

__all__ = ["DEFAULT_EMBEDDER", "SPECS", "Embedder"]
