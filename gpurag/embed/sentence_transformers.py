"""Embedder backed by sentence-transformers for any local model directory (usual on a GPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpurag.errors import ConfigError


class SentenceTransformerEmbedder:
    """Wraps ``sentence_transformers.SentenceTransformer`` loaded from a local path only."""

    def __init__(self, model_path: str, device: str = "cpu", max_tokens: int | None = None) -> None:
        path = Path(model_path)
        if not path.is_dir():
            raise ConfigError(f"sentence-transformers model directory not found: {path}")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigError(
                "the 'st:' embedder needs sentence-transformers (pip install 'gpurag[gnn]' "
                "sentence-transformers)"
            ) from exc
        self._model = SentenceTransformer(str(path), device=device, local_files_only=True)
        if max_tokens:
            self._model.max_seq_length = max_tokens
        self.max_tokens = int(self._model.max_seq_length)
        self.dim = int(self._model.get_sentence_embedding_dimension())
        self.name = f"st:{path.name}"
        import sentence_transformers

        self.implementation = (f"sentence-transformers {sentence_transformers.__version__} "
                               f"{self._model.device} ({path.name})")

    def count_tokens(self, texts: list[str]) -> list[int]:
        tok = self._model.tokenizer
        return [len(ids) for ids in tok(list(texts), add_special_tokens=False)["input_ids"]]

    def token_offsets(self, text: str) -> np.ndarray:
        enc = self._model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)

    def token_offsets_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self.token_offsets(t) for t in texts]

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        vecs = self._model.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(vecs, dtype=np.float32)
