"""The bundled MiniLM tokenizer, shared by the ONNX and torch MiniLM embedders."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np

from gpurag.arrays import unique_sorted
from gpurag.errors import ConfigError

TOKENIZER_PATH = Path(__file__).parent / "assets" / "minilm-tokenizer.json"
# Texts tokenized at once by ``model_inputs``: each Encoding holds its tokens, offsets and masks
# (about 1 KB for a name, several for a sentence), so 35k facts at once held ~200 MB.
TOKENIZE_BLOCK = 4096


class MiniLMTokens:
    """Token counting, offsets and truncated model inputs with the bundled WordPiece tokenizer."""

    max_tokens: int

    def _init_tokenizer(self, tokenizer_path: str | os.PathLike | None, max_tokens: int) -> None:
        from tokenizers import Tokenizer

        tok = Path(tokenizer_path) if tokenizer_path else TOKENIZER_PATH
        if not tok.is_file():
            raise ConfigError(f"embedder tokenizer not found: {tok}")
        self.max_tokens = max_tokens
        self.tokenizer = Tokenizer.from_file(str(tok))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_tokens)
        self._plain_tokenizer = Tokenizer.from_file(str(tok))
        self._plain_tokenizer.no_padding()
        self._plain_tokenizer.no_truncation()

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

    def token_ids_offsets(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One tokenization (no special tokens, no truncation) of every text: all texts' token
        ids concatenated, their char ``(start, end)`` offsets, and each text's token count."""
        encodings = self._plain_tokenizer.encode_batch(list(texts), add_special_tokens=False)
        counts = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64,
                             count=len(encodings))
        total = int(counts.sum())
        ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings),
                          dtype=np.int64, count=total)
        offsets = np.fromiter(itertools.chain.from_iterable(
            itertools.chain.from_iterable(e.offsets for e in encodings)),
            dtype=np.int64, count=2 * total).reshape(-1, 2)
        return ids, offsets, counts

    def wrap_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """The special ids ``model_inputs`` puts before and after a text's ids ([CLS], [SEP])."""
        if not hasattr(self, "_wrap"):
            around = self.tokenizer.encode("", add_special_tokens=True)
            plain = self._plain_tokenizer.encode("", add_special_tokens=False).ids
            ids = np.asarray(around.ids, dtype=np.int64)
            if plain or len(ids) != 2:  # not the BERT layout: [CLS] text [SEP]
                raise ValueError("the tokenizer does not wrap texts as [CLS] ... [SEP]")
            self._wrap = (ids[:1], ids[1:])
        return self._wrap

    def continuation_ids(self) -> np.ndarray:
        """Per vocabulary id: whether it continues a word (``##...``): a window starting at one
        starts inside a word, where the window's own tokenization differs from the slice."""
        if not hasattr(self, "_continuation"):
            vocab = self._plain_tokenizer.get_vocab(with_added_tokens=True)
            mask = np.zeros(max(vocab.values(), default=-1) + 1, dtype=bool)
            cont = [i for t, i in vocab.items() if t.startswith("##")]
            mask[np.asarray(cont, dtype=np.int64)] = True
            self._continuation = mask
        return self._continuation

    def model_inputs(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """All texts' token ids (with [CLS]/[SEP], truncated to ``max_tokens``) concatenated,
        and each text's length: ``(flat_ids int64, lengths int64)``."""
        texts = list(texts)
        flats, lengths = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for lo in range(0, len(texts), TOKENIZE_BLOCK):  # a block's Encodings at a time
            encodings = self.tokenizer.encode_batch(texts[lo : lo + TOKENIZE_BLOCK],
                                                    add_special_tokens=True)
            lengths.append(np.fromiter((len(e.ids) for e in encodings), dtype=np.int64,
                                       count=len(encodings)))
            flats.append(np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings),
                                     dtype=np.int64, count=int(lengths[-1].sum())))
            del encodings
        return np.concatenate(flats), np.concatenate(lengths)


# Host batches (ONNX on the CPU): rows x longest^2 bounds the attention tensors and rows x
# longest the other activations, so a batch of 512-token chunks holds a few rows. Measured on 2
# cores, 2,000 Wikipedia passages: peak RSS 0.69 GB instead of 3.2 GB with 64 rows of any
# length, and faster. More than 64 rows of short names was no faster (31k names and facts: 74 s
# at 64 rows, 78 s at 512) and held 90 MB more, so ``embed_batch_size`` stays 64.
ATTENTION_BUDGET = 1 << 18
TOKEN_BUDGET = 1 << 12
MAX_ROWS = 512


def length_batches(sorted_lengths: np.ndarray, max_rows: int = MAX_ROWS,
                   attention_budget: int = ATTENTION_BUDGET,
                   token_budget: int = TOKEN_BUDGET, min_run: int = 0
                   ) -> list[tuple[int, int]]:
    """``(start, stop)`` slices of ascending ``sorted_lengths``: each as many rows as fit
    ``rows x longest^2 <= attention_budget`` and ``rows x longest <= token_budget`` (at least
    one row, at most ``max_rows``). With ``min_run``, every run of at least ``min_run`` equal
    lengths is cut apart from its neighbours, so its batches hold no padding (the texts
    between such runs share batches as before)."""
    lens = np.maximum(np.asarray(sorted_lengths, dtype=np.int64), 1)
    if min_run <= 0 or len(lens) < min_run:
        return _budget_slices(lens, 0, len(lens), max_rows, attention_budget, token_budget)
    # boundaries of the runs of one length; a run long enough stands apart
    edge = np.flatnonzero(np.r_[True, lens[1:] != lens[:-1], True])
    long = np.flatnonzero(np.diff(edge) >= min_run)
    cuts = unique_sorted(np.r_[0, edge[long], edge[long + 1], len(lens)])
    out: list[tuple[int, int]] = []
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):  # a few per length
        out += _budget_slices(lens, lo, hi, max_rows, attention_budget, token_budget)
    return out


def _budget_slices(lens: np.ndarray, pos: int, n: int, max_rows: int, attention_budget: int,
                   token_budget: int) -> list[tuple[int, int]]:
    """:func:`length_batches`' greedy slices of ``lens[pos:n]`` (ascending, each >= 1)."""
    out: list[tuple[int, int]] = []
    while pos < n:
        window = lens[pos : min(pos + max_rows, n)]  # ascending: a prefix's last is its longest
        rows = np.arange(1, len(window) + 1)
        fits = (rows * window * window <= attention_budget) & (rows * window <= token_budget)
        take = max(1, int(np.count_nonzero(fits)))  # fits is a prefix (both sides grow)
        out.append((pos, pos + take))
        pos += take
    return out


def padded_batch(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                 rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, mask)`` of shape ``(len(rows), max length)`` for the given texts, zero-padded."""
    lens = lengths[rows]
    width = int(lens.max())
    mask = np.arange(width)[None, :] < lens[:, None]
    ids = np.zeros(mask.shape, dtype=np.int64)
    # position of each real token in ``flat``: its text's start + its column
    ids[mask] = flat[(starts[rows][:, None] + np.arange(width)[None, :])[mask]]
    return ids, mask.astype(np.int64)


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices ``start .. start + length - 1`` of every range, concatenated in order."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(starts, dtype=np.int64) - first, lengths) + np.arange(total)
