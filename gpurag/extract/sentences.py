"""Sentences of chunk texts: the units a rule-based fact is made of (:mod:`gpurag.pipeline.facts`)
and the sentences an evidence chain quotes (:mod:`gpurag.query.evidence`), cut the same way."""

from __future__ import annotations

import re

import numpy as np

# A sentence ends at . ! ? (not after an initial such as "M." or a title such as "Dr.") followed
# by space and an upper-case letter, digit or quote; a blank line also ends one.
SENTENCE_END = re.compile(
    r"(?<=[.!?])(?<!\b[A-Z]\.)(?<!\b(?:Mr|Dr|St|Jr|Sr|Ms)\.)(?<!\bMrs\.)[\"')\]]*\s+"
    r"(?=[A-Z0-9\"'(\[])|\n\s*\n")
SEPARATOR = "\n\n"


def sentence_spans(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sentences of all ``texts`` in one regex pass: (chunk row, start, end) arrays."""
    joined = SEPARATOR.join(texts)
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    chunk_start = np.concatenate([[0], np.cumsum(lengths + len(SEPARATOR))[:-1]])
    cuts = np.fromiter((m.end() for m in SENTENCE_END.finditer(joined)), dtype=np.int64)
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(joined)]])
    row = np.searchsorted(chunk_start, starts, side="right") - 1
    local_start = starts - chunk_start[row]
    local_end = np.minimum(ends - chunk_start[row], lengths[row])
    keep = local_end > local_start
    return row[keep], local_start[keep], local_end[keep]
