"""Rerankers for graph retrieval: a query-conditioned GAT over candidate subgraphs.

``get_reranker("gat", retriever)`` returns the reranker the graph retriever calls after
personalized PageRank (``query_batch(..., mode="graph", rerank="gat")``). The checkpoint is,
in order: a path after the name (``"gat:/path/to/model.safetensors"``), the ``checkpoint``
argument (``QueryConfig.gat_checkpoint``), ``$GPURAG_GAT_CHECKPOINT``, or the one
shipped in ``gpurag/rerank/weights/``. torch, torch_geometric and safetensors are needed
(``pip install "gpurag[gnn]"``); nothing here imports them until a reranker is made.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gpurag.errors import ConfigError

if TYPE_CHECKING:
    from gpurag.graph.ppr_local import NodeScores

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
DEFAULT_CHECKPOINT = WEIGHTS_DIR / "gat-default.safetensors"
RERANKERS = ("gat",)
DEFAULT_FANOUT = (5, 2)
_CACHE: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], Reranker]] = (
    weakref.WeakKeyDictionary())


class Reranker(Protocol):
    """Scores each question's candidate passages; higher is better.

    ``ppr_scores`` is a :class:`~gpurag.graph.ppr_local.NodeScores`: the query path hands over
    the PPR scores recorded around the candidates for the reranker's ``fanout`` (an optional
    attribute, default :data:`DEFAULT_FANOUT`), never the ``(q, n)`` rows.
    """

    def score(self, qvecs: np.ndarray, cand: np.ndarray, ppr_scores: NodeScores,
              dense: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """``(q, c)`` float scores for candidate passage rows ``cand`` (q, c)."""
        ...


def require_gnn() -> None:
    missing = []
    for mod in ("torch", "torch_geometric", "safetensors"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise ConfigError(f"the GAT reranker needs {', '.join(missing)}: "
                          'pip install "gpurag[gnn]"')


def checkpoint_path(spec: str | os.PathLike | None = None) -> Path:
    """The checkpoint to load: ``spec``, else the shipped one (``$GPURAG_GAT_CHECKPOINT`` is
    read once by the runtime and reaches here through the retriever)."""
    path = Path(spec or DEFAULT_CHECKPOINT)
    if not path.is_file():
        raise ConfigError(f"GAT checkpoint {path} does not exist")
    return path


class GATReranker:
    """Scores candidate passages with :class:`gpurag.rerank.model.QueryGAT`, batched.

    All questions' candidate subgraphs go through the network together, ``max_questions``
    questions per forward pass (to bound memory), on ``device`` (``cpu`` or ``cuda``).
    ``cpu_threads``: torch threads for a forward pass on the CPU; None picks them by batch
    size (one thread for a few questions, see :mod:`gpurag.rerank.threads`), 0 leaves torch's
    setting alone.
    """

    def __init__(self, arrays, model, settings, device: str = "cpu",
                 max_questions: int = 64, cpu_threads: int | None = None) -> None:
        self.arrays = arrays
        self.model = model
        self.settings = settings
        self.device = device
        self.max_questions = max_questions
        self.cpu_threads = cpu_threads

    @classmethod
    def from_checkpoint(cls, retriever, path: str | os.PathLike | None = None,
                        device: str | None = None) -> GATReranker:
        """Load a checkpoint for an opened graph retriever."""
        require_gnn()
        from gpurag.rerank.features import GraphArrays
        from gpurag.rerank.model import load_checkpoint

        device = device or _torch_device(getattr(getattr(retriever, "backends", None),
                                                 "device", "cpu"))
        path = checkpoint_path(path)
        try:
            model, settings = load_checkpoint(path, device=device)
        except Exception as exc:  # corrupt file, wrong format, wrong shapes
            raise ConfigError(f"cannot load GAT checkpoint {path}: {exc}") from exc
        arrays = GraphArrays.from_retriever(retriever)
        if arrays.dim != model.cfg.emb_dim:
            raise ConfigError(f"GAT checkpoint {path} expects {model.cfg.emb_dim}-d embeddings "
                              f"but the index has {arrays.dim}-d ones; train one for this "
                              "embedder with `gpurag train-scorer`")
        return cls(arrays, model, settings, device)

    @property
    def fanout(self) -> tuple[int, ...]:
        """Neighbours kept per hop in each candidate subgraph (what the PPR scores are
        recorded for)."""
        return tuple(int(f) for f in self.settings.fanout)

    def score(self, qvecs: np.ndarray, cand: np.ndarray, ppr_scores: NodeScores | np.ndarray,
              dense: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """``(q, c)`` subgraph logits of the candidates (see :class:`Reranker`)."""
        from gpurag.rerank.features import CandidateInputs

        ds, di = dense
        inp = CandidateInputs(np.asarray(qvecs, np.float32), np.asarray(cand, np.int64),
                              ppr_scores, np.asarray(ds, np.float32),
                              np.asarray(di, np.int64))
        return self.score_inputs(inp)

    def score_inputs(self, inp) -> np.ndarray:
        """Scores for :class:`gpurag.rerank.features.CandidateInputs`."""
        import torch

        from gpurag.rerank.features import build_batch
        from gpurag.rerank.threads import torch_threads

        q, c = inp.cand.shape
        out = np.empty((q, c), dtype=np.float32)
        s = self.settings
        self.model.eval()
        for start in range(0, q, self.max_questions):
            part = inp.take(np.arange(start, min(q, start + self.max_questions)))
            batch = build_batch(self.arrays, part, s.fanout, s.max_nodes)
            with torch_threads(self._threads(batch.num_nodes)), torch.inference_mode():
                _, logits = self.model(batch.to(self.device))
            out[start:start + len(part)] = logits.float().view(len(part), c).cpu().numpy()
        return out

    def _threads(self, nodes: int) -> int | None:
        """torch threads for a forward pass over ``nodes`` nodes (None: torch's setting)."""
        if self.device != "cpu":
            return None
        if self.cpu_threads is not None:
            return self.cpu_threads or None
        import torch

        from gpurag.rerank.threads import threads_for

        return threads_for(nodes, torch.get_num_threads())


def _torch_device(device: str) -> str:
    """torch's device for the runtime's ``device`` (cpu when torch sees no GPU)."""
    if device == "cuda":
        import torch

        if torch.cuda.is_available():
            return "cuda"
    return "cpu"


def get_reranker(name: str, retriever, checkpoint: str | os.PathLike | None = None) -> Reranker:
    """The reranker ``name`` (``"gat"`` or ``"gat:PATH"``) for ``retriever``, cached per
    retriever and checkpoint; a reranker registered with :func:`set_reranker` comes first."""
    per = _CACHE.setdefault(retriever, {})
    if (name, "") in per:
        return per[(name, "")]
    kind, _, path = str(name).partition(":")
    kind = kind.strip().lower()
    if kind not in RERANKERS:
        raise ConfigError(f"unknown reranker {name!r}: use one of {', '.join(RERANKERS)}")
    require_gnn()
    resolved = checkpoint_path(path or checkpoint or getattr(retriever, "gat_checkpoint", None))
    key = (kind, str(resolved))
    if key not in per:
        per[key] = GATReranker.from_checkpoint(retriever, resolved)
    return per[key]


def set_reranker(retriever, name: str, reranker: Reranker | None) -> None:
    """Make ``get_reranker(name, retriever)`` return ``reranker`` (None: forget it)."""
    per = _CACHE.setdefault(retriever, {})
    if reranker is None:
        per.pop((name, ""), None)
    else:
        per[(name, "")] = reranker


__all__ = ["DEFAULT_CHECKPOINT", "DEFAULT_FANOUT", "GATReranker", "Reranker", "checkpoint_path",
           "get_reranker", "require_gnn", "set_reranker"]
