"""A deterministic, cheap stand-in for the MiniLM embedder, so a build's host stages can be
measured on any CPU (``bench/scale.py --host-only``).

It tokenizes exactly as the MiniLM embedders do (the bundled WordPiece tokenizer, [CLS]/[SEP],
truncation to 512 tokens) and maps each text to the L2-normalized sum of a fixed random
384-d float32 vector per token id (seeded, so every run and every checkout gets the same
vectors): a hash projection of the token ids whose cost is one sparse-by-dense product, so
the tokenization and every stage after the embedder do their real work while the model's
matmuls are gone. Near-duplicate names still land near each other (they share tokens), so
alias resolution finds real candidate pairs.

It implements only what ``gpurag.embed.tokens.MiniLMTokens`` and ``Embedder`` give, plus
``encode_tokens`` (ids already made by the chunker) when the checkout's build uses it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from gpurag.embed.tokens import MiniLMTokens

DIM = 384
SEED = 20261201
BLOCK = 8192  # texts per sparse product: bounds the (block, dim) float32 output


class HashProjectionEmbedder(MiniLMTokens):
    """Unit ``(n, 384)`` float32 rows: the normalized sum of a seeded vector per token id."""

    dim = DIM

    def __init__(self, max_tokens: int = 512, seed: int = SEED) -> None:
        self._init_tokenizer(None, max_tokens)
        vocab = self._plain_tokenizer.get_vocab_size(with_added_tokens=True)
        self.table = np.random.default_rng(seed).standard_normal((vocab, DIM), dtype=np.float32)
        self.name = f"hash-projection-{DIM}:seed{seed}"
        self.implementation = f"bench stand-in: seeded hash projection of token ids ({DIM}-d)"

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Tokenize (as the real embedder does) and project."""
        texts = list(texts)
        if not texts:
            return np.empty((0, DIM), dtype=np.float32)
        flat, lengths = self.model_inputs(texts)
        return self.project(flat, lengths)

    def encode_tokens(self, flat: np.ndarray, lengths: np.ndarray,
                      batch_size: int = 64) -> np.ndarray:
        """The same vectors from model inputs made elsewhere (``model_inputs``' layout)."""
        return self.project(flat, lengths)

    def project(self, flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Rows of ``lengths`` consecutive ids of ``flat``: summed table rows, normalized."""
        lengths = np.asarray(lengths, dtype=np.int64)
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        out = np.empty((len(lengths), DIM), dtype=np.float32)
        for lo in range(0, len(lengths), BLOCK):
            hi = min(lo + BLOCK, len(lengths))
            a, b = indptr[lo], indptr[hi]
            rows = sp.csr_matrix((np.ones(b - a, dtype=np.float32), flat[a:b],
                                  indptr[lo:hi + 1] - a), shape=(hi - lo, len(self.table)))
            block = rows @ self.table
            block /= np.maximum(np.linalg.norm(block, axis=1, keepdims=True), 1e-12)
            out[lo:hi] = block
        return out
