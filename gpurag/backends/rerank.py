"""The reranker loader of the runtime: ``rerankers(name, retriever, checkpoint=None)``.

``"gat"`` (or ``"gat:PATH"``) loads :class:`gpurag.rerank.GATReranker` for an opened graph
retriever on the runtime's torch device (cpu when torch sees no GPU), once per retriever and
checkpoint. The checkpoint is, in order: the path after the name, ``checkpoint``
(``QueryConfig.gat_checkpoint``), the runtime's ``GPURAG_GAT_CHECKPOINT``, or the one
shipped in ``gpurag/rerank/weights/``.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from gpurag.backends import probe
from gpurag.device import package_version
from gpurag.errors import ConfigError
from gpurag.rerank import RERANKERS, GATReranker, Reranker, checkpoint_path, require_gnn


def torch_device(device: str) -> str:
    """torch's device for the runtime's ``device`` (cpu when torch sees no GPU)."""
    return "cuda" if device == "cuda" and probe.torch_cuda_available() else "cpu"


class RerankerLoader:
    """Loads the reranker a query names, once per retriever and checkpoint."""

    def __init__(self, device: str, gat_checkpoint: str | os.PathLike | None = None) -> None:
        self.device = device
        self.gat_checkpoint = gat_checkpoint
        self.implementation = (f"gat (torch {package_version('torch') or 'missing'}, "
                               f"torch-geometric {package_version('torch-geometric') or 'missing'}"
                               f", {'cuda' if device == 'cuda' else 'cpu'})")
        self._loaded: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], Reranker]] = (
            weakref.WeakKeyDictionary())
        self._lock = threading.Lock()

    def __call__(self, name: str, retriever: Any,
                 checkpoint: str | os.PathLike | None = None) -> Reranker:
        kind, _, path = str(name).partition(":")
        kind = kind.strip().lower()
        if kind not in RERANKERS:
            raise ConfigError(f"unknown reranker {name!r}: use one of {', '.join(RERANKERS)}")
        require_gnn()
        resolved = checkpoint_path(path or checkpoint or self.gat_checkpoint)
        key = (kind, str(resolved))
        with self._lock:
            per = self._loaded.setdefault(retriever, {})
            if key not in per:
                per[key] = GATReranker.from_checkpoint(retriever, resolved,
                                                       device=torch_device(self.device))
            return per[key]


def rerankers_part(device: str, gat_checkpoint: str | os.PathLike | None = None
                   ) -> RerankerLoader:
    """The reranker loader on ``device``."""
    return RerankerLoader(device, gat_checkpoint)
