"""Tokenize once: the token windows of a batch of documents and the embedder's model inputs
for those windows, from one tokenization of the documents.

A chunk embeds as ``"{title}\\n{window text}"`` (``chunk_embed.embed_text``) truncated to the
embedder's ``max_tokens``. With the MiniLM WordPiece tokenizer the ids of that string are the
title's ids followed by the window's slice of the document's ids (the newline is a word
break; text is normalized character by character; greedy WordPiece tokenizes a word's prefix
as the prefix of the word's tokens), except when the window starts inside a word (its first
token a ``##`` continuation): the window's own tokenization starts that word afresh. Those
windows (and those of Markdown or reStructuredText documents, which embed without their
markup) are tokenized again as text, so the model inputs, and the embeddings, are exactly
those of the text path (``tests/pipeline/test_tokenize_once.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpurag.embed.tokens import concat_ranges
from gpurag.ingest.chunker import window_spans


@dataclass
class Windows:
    """Token windows over a batch of texts: ``doc`` (row of the text), ``start``/``stop``
    (token indices into the batch's flat token arrays, ``stop`` exclusive)."""

    doc: np.ndarray
    start: np.ndarray
    stop: np.ndarray


def batch_windows(counts: np.ndarray, max_tokens: int, overlap: int) -> Windows:
    """The windows :func:`~gpurag.ingest.chunker.window_spans` cuts from each text (``counts``
    tokens each), for the whole batch at once."""
    window_spans(np.zeros((0, 2), np.int64), max_tokens, overlap)  # the same argument checks
    counts = np.asarray(counts, dtype=np.int64)
    stride = max_tokens - overlap
    n_windows = np.where(counts > 0, (np.maximum(counts - overlap, 1) + stride - 1) // stride, 0)
    doc = np.repeat(np.arange(len(counts)), n_windows)
    k = np.arange(len(doc)) - np.repeat(np.cumsum(n_windows) - n_windows, n_windows)
    base = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)[doc]
    local = k * stride
    stop = np.minimum(local + max_tokens, counts[doc])
    return Windows(doc, base + local, base + stop)


def model_inputs_of_windows(embedder, ids: np.ndarray, windows: Windows, keep: np.ndarray,
                            titles: Sequence[str], as_text: np.ndarray,
                            strings: Callable[[np.ndarray], list[str]]
                            ) -> tuple[np.ndarray, np.ndarray]:
    """``model_inputs`` of the kept windows' embedded strings (title line, then the window
    text; ``titles`` per kept window) built from the documents' ``ids``; the windows where
    ``as_text`` (per kept window) and those starting inside a word are tokenized again from
    ``strings(rows)`` (their embedded strings)."""
    head, tail = embedder.wrap_ids()
    room = embedder.max_tokens - len(head) - len(tail)
    start, stop = windows.start[keep], windows.stop[keep]
    n = len(start)
    cont = embedder.continuation_ids()
    first = ids[np.minimum(start, max(len(ids) - 1, 0))] if len(ids) else np.zeros(n, np.int64)
    inside = (first < len(cont)) & cont[np.minimum(first, len(cont) - 1)] & (stop > start)
    inside |= np.asarray(as_text, dtype=bool)
    # the titles' ids, one tokenization per distinct title
    codes, uniq = pd.factorize(pd.Series(list(titles), dtype=object))
    t_ids, _, t_counts = embedder.token_ids_offsets([str(t) for t in uniq])
    t_start = (np.cumsum(t_counts) - t_counts)[codes]
    t_len = np.minimum(t_counts[codes], room)
    w_len = np.minimum(stop - start, room - t_len)
    # windows starting inside a word: tokenized again as text
    redo = np.flatnonzero(inside)
    r_flat, r_len = (embedder.model_inputs(strings(redo))
                     if len(redo) else (np.zeros(0, np.int64), np.zeros(0, np.int64)))
    pool = np.concatenate([head, tail, t_ids, ids, r_flat]).astype(np.int64)
    t_base, d_base = len(head) + len(tail), len(head) + len(tail) + len(t_ids)
    r_base = d_base + len(ids)
    seg_start = np.stack([np.zeros(n, np.int64), t_base + t_start, d_base + start,
                          np.full(n, len(head), np.int64)], axis=1)
    seg_len = np.stack([np.full(n, len(head)), t_len, w_len, np.full(n, len(tail))], axis=1)
    seg_start[redo] = 0
    seg_len[redo] = 0
    seg_start[redo, 0] = r_base + np.cumsum(r_len) - r_len
    seg_len[redo, 0] = r_len
    flat = pool[concat_ranges(seg_start.ravel(), seg_len.ravel())]
    return flat, seg_len.sum(axis=1).astype(np.int64)


def tokenizes_once(embedder) -> bool:
    """Whether ``embedder`` takes token ids from the chunker: by its class (a wrapper that
    forwards attributes does not, unless it says how: the embedding cache, keyed by text, has
    ``encode_inputs_for`` and tokenizes once when the embedder it wraps does)."""
    if callable(getattr(type(embedder), "encode_inputs_for", None)):
        return tokenizes_once(embedder.inner)
    kind = type(embedder)
    if not all(callable(getattr(kind, a, None)) for a in
               ("token_ids_offsets", "encode_tokens", "wrap_ids", "continuation_ids")):
        return False
    try:
        embedder.wrap_ids()
    except ValueError:
        return False
    return True
