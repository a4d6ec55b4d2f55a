"""The bundled MiniLM (all-MiniLM-L6-v2) as a plain-torch BERT encoder, for the GPU.

Weights: the bundled int8 ONNX file's, dequantized once to float32 (see
:mod:`gpurag.embed.onnx_weights`; cached as safetensors under the user cache directory), then
cast to float16 on CUDA (``bfloat16`` or ``float32`` on request: ``dtype=`` or
``$GPURAG_EMBED_DTYPE``) and kept float32 on the CPU.
Nothing is downloaded and ``transformers`` is not needed.

Forward pass, as the ONNX graph's: word + position + token-type embeddings, LayerNorm (eps
1e-12), 6 post-LN layers (12-head attention with the padding mask, erf-GELU MLP), then the
same pooling as :class:`~gpurag.embed.onnx_minilm.OnnxMiniLMEmbedder`: mask-weighted mean of
the last hidden states (in float32) and L2 normalization.

Batches are length-bucketed: texts sorted by token count, each batch padded to its longest.
On CUDA a batch holds as many texts as fit a token budget derived from the free device memory
(``batch_tokens`` sets the budget explicitly); on the CPU at most ``batch_size`` texts within
the host memory budgets of :func:`~gpurag.embed.tokens.length_batches`, like the ONNX embedder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from gpurag.embed.tokens import MiniLMTokens, length_batches, padded_batch
from gpurag.errors import ConfigError

HEADS = 12
LN_EPS = 1e-12
MAX_BATCH_TOKENS = 1 << 18  # cap of the CUDA token budget per batch
MEMORY_FRACTION = 0.4  # of the free device memory, for one batch's activations


def _resolve_dtype(device: Any, dtype: str | None) -> Any:
    import torch

    from gpurag.settings import current

    choice = (dtype or current().embed_dtype or "auto").lower()
    if choice == "auto":
        return torch.float16 if device.type == "cuda" else torch.float32
    table = {"float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float32": torch.float32, "fp32": torch.float32}
    if choice not in table:
        raise ConfigError(f"unknown embedder dtype {dtype!r}: use float16, bfloat16 or float32")
    return table[choice]


def load_state_dict(model_path: Path, device: Any, dtype: Any) -> dict[str, Any]:
    """MiniLM weights on ``device`` in ``dtype`` (LayerNorm parameters too)."""
    import torch

    from gpurag.embed.onnx_weights import cached_state_dict_path, minilm_state_dict

    cached = cached_state_dict_path(model_path)
    if cached is not None:
        from safetensors.torch import load_file

        tensors = load_file(str(cached))
    else:
        tensors = {k: torch.from_numpy(v) for k, v in minilm_state_dict(model_path).items()}
    return {k: v.to(device=device, dtype=dtype) for k, v in tensors.items()}


class TorchMiniLMEmbedder(MiniLMTokens):
    """Mean-pooled, L2-normalized MiniLM sentence embeddings with a torch BERT encoder."""

    dim = 384

    def __init__(
        self,
        device: str = "cpu",
        model_path: str | os.PathLike | None = None,
        tokenizer_path: str | os.PathLike | None = None,
        max_tokens: int = 512,
        dtype: str | None = None,
        batch_tokens: int | None = None,
    ) -> None:
        try:
            import torch
        except ImportError as exc:
            raise ConfigError("the torch MiniLM embedder needs torch (the 'gnn' extra)") from exc
        from gpurag.embed.onnx_minilm import default_model_path

        model = Path(model_path) if model_path else default_model_path()
        if not model.is_file():
            raise ConfigError(f"embedder ONNX model not found: {model}")
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError("the torch MiniLM embedder was asked for cuda, but torch sees no GPU")
        self.dtype = _resolve_dtype(self.device, dtype)
        self.batch_tokens = batch_tokens
        self._init_tokenizer(tokenizer_path, max_tokens)
        self._w = load_state_dict(model, self.device, self.dtype)
        self.layers = 1 + max(int(k.split(".")[2]) for k in self._w if k.startswith("encoder."))
        n_pos = self._w["embeddings.position_embeddings.weight"].shape[0]
        if max_tokens > n_pos:
            raise ConfigError(f"max_tokens={max_tokens} exceeds the model's {n_pos} positions")
        dtype_name = str(self.dtype).replace("torch.", "")
        self.name = f"torch-minilm-l6-v2:{model.name}:{dtype_name}"
        self.implementation = (f"torch-{self.device.type} {dtype_name} minilm-l6-v2 "
                               f"(torch {torch.__version__}, dequantized {model.name})")

    # -- the encoder --------------------------------------------------------------------------
    def _forward(self, ids: Any, mask: Any) -> Any:
        """Last hidden states ``(b, L, 384)`` of token ``ids`` with padding ``mask`` (bool)."""
        import torch
        from torch.nn import functional as nnf

        w = self._w
        b, length = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:length][None]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = nnf.layer_norm(x, (self.dim,), w["embeddings.LayerNorm.weight"],
                         w["embeddings.LayerNorm.bias"], LN_EPS)
        attn_mask = mask[:, None, None, :]  # (b, 1, 1, L): keys that exist
        head = self.dim // HEADS
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def lin(name: str, t: torch.Tensor, p: str = p) -> torch.Tensor:
                return nnf.linear(t, w[p + name + ".weight"], w[p + name + ".bias"])

            q, k, v = (lin(f"attention.self.{n}", x).view(b, length, HEADS, head).transpose(1, 2)
                       for n in ("query", "key", "value"))
            a = nnf.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
            a = lin("attention.output.dense", a.transpose(1, 2).reshape(b, length, self.dim))
            x = nnf.layer_norm(a + x, (self.dim,), w[p + "attention.output.LayerNorm.weight"],
                             w[p + "attention.output.LayerNorm.bias"], LN_EPS)
            h = lin("output.dense", nnf.gelu(lin("intermediate.dense", x)))
            x = nnf.layer_norm(h + x, (self.dim,), w[p + "output.LayerNorm.weight"],
                             w[p + "output.LayerNorm.bias"], LN_EPS)
        return x

    def batch_token_budget(self) -> int:
        """Tokens per batch: ``batch_tokens`` when given, else from the free device memory on
        CUDA; 0 (``batch_size`` texts per batch) on the CPU."""
        if self.batch_tokens:
            return int(self.batch_tokens)
        if self.device.type != "cuda":
            return 0
        import torch

        free, _ = torch.cuda.mem_get_info(self.device)
        elt = torch.finfo(self.dtype).bits // 8
        inter = self._w["encoder.layer.0.intermediate.dense.weight"].shape[0]
        per_token = elt * (16 * self.dim + 3 * inter) + 4 * self.dim  # live activations
        return int(max(512, min(MAX_BATCH_TOKENS, MEMORY_FRACTION * free // per_token)))

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Embed texts in length-sorted batches; rows come back in input order."""
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._encode_inputs(*self.model_inputs(texts), batch_size=batch_size)

    def encode_tokens(self, flat: np.ndarray, lengths: np.ndarray,
                      batch_size: int = 64) -> np.ndarray:
        """Embed texts given as model inputs (``model_inputs``' layout), e.g. the chunker's
        token ids; rows come back in input order."""
        return self._encode_inputs(flat, lengths, batch_size=batch_size)

    def _encode_inputs(self, flat: np.ndarray, lengths: np.ndarray,
                       batch_size: int = 64) -> np.ndarray:
        import torch

        out = np.empty((len(lengths), self.dim), dtype=np.float32)
        if not len(lengths):
            return out
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        order = np.argsort(lengths, kind="stable")
        sorted_len = lengths[order]
        budget = self.batch_token_budget()
        results: list[tuple[np.ndarray, torch.Tensor]] = []
        if budget:  # as many as fit: (rows x the longest of them) <= budget
            slices = length_batches(sorted_len, max_rows=max(batch_size, budget),
                                    attention_budget=budget * int(sorted_len.max()),
                                    token_budget=budget)
        else:  # the host: the same memory budgets as the ONNX embedder
            slices = length_batches(sorted_len, max_rows=batch_size)
        with torch.inference_mode():
            for start, stop in slices:
                idx = order[start:stop]
                ids, mask = padded_batch(flat, starts, lengths, idx)
                ids_t = torch.from_numpy(ids).to(self.device, non_blocking=True)
                mask_t = torch.from_numpy(mask).to(self.device, non_blocking=True).bool()
                hidden = self._forward(ids_t, mask_t).float()
                m = mask_t[..., None].float()
                pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp_min(1e-9)
                vecs = torch.nn.functional.normalize(pooled, dim=1, eps=1e-12)
                results.append((idx, vecs.to("cpu", non_blocking=True)))
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        for idx, vecs in results:
            out[idx] = vecs.numpy()
        return out
