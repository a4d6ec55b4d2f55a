"""What the rule-based extractors share: candidate spans -> mentions (+ the chunk title as a
mention) -> sentence co-occurrence relations.

* every chunk's ``title`` is a mention of that chunk (label ``TITLE``; its span is the first
  case-insensitive occurrence in the text, ``-1`` when absent);
* two distinct entity names in one sentence give a ``co-occurs`` relation (head = the earlier
  mention) with weight ``1 / (n - 1)`` for ``n`` distinct names in the sentence, so the
  co-occurrence weights of one name within one sentence sum to 1.

Spans, sentence membership and the pair expansion are array operations.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pandas as pd

from gpurag.extract.base import COOCCURS, Extraction

TITLE_LABEL = "TITLE"

_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")


def find_span(text: str, name: str, *, loose_spaces: bool = False) -> tuple[int, int]:
    """Span of the first occurrence of ``name`` in ``text``, exact or else case-insensitive;
    ``(-1, -1)`` when absent. ``loose_spaces``: the first case-insensitive occurrence with any
    run of white space where ``name`` has one (for names an LLM retyped)."""
    if loose_spaces:
        pattern = r"\s+".join(re.escape(part) for part in name.split())
        match = re.search(pattern, text, flags=re.IGNORECASE)
        return (match.start(), match.end()) if match else (-1, -1)
    if not name:
        return -1, -1
    pos = text.find(name)
    if pos < 0:
        low_text, low_name = text.lower(), name.lower()
        if len(low_text) == len(text) and len(low_name) == len(name):
            pos = low_text.find(low_name)
        else:  # lower() changed lengths (rare scripts): let re map the span
            m = re.search(re.escape(name), text, flags=re.IGNORECASE)
            pos = m.start() if m else -1
    return (pos, pos + len(name)) if pos >= 0 else (-1, -1)


def _find_titles(texts: Sequence[str], titles: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Span of each title in its text (-1 if absent); a trailing "(disambiguation)" part may be
    missing from the text ("Unun (band)" is found as "Unun")."""
    starts = np.full(len(texts), -1, dtype=np.int64)
    ends = np.full(len(texts), -1, dtype=np.int64)
    for i, (text, title) in enumerate(zip(texts, titles, strict=True)):
        s, e = find_span(text, title)
        if s < 0 and title.endswith(")"):
            s, e = find_span(text, _DISAMBIGUATION.sub("", title))
        starts[i], ends[i] = s, e
    return starts, ends


def cooccurrence_relations(
    chunk: np.ndarray,
    sentence: np.ndarray,
    names: np.ndarray,
    max_per_sentence: int = 24,
) -> pd.DataFrame:
    """All pairs of distinct names sharing a sentence, as ``co-occurs`` relations.

    ``chunk``, ``sentence`` (a global sentence id, ``-1`` = none) and ``names`` are aligned
    arrays in reading order. Each sentence keeps its first ``max_per_sentence`` distinct names;
    pair ``(i, j)`` (``i`` before ``j``) gets weight ``1 / (n - 1)``.
    """
    frame = pd.DataFrame({"chunk": chunk, "sentence": sentence, "name": names})
    frame = frame[frame["sentence"] >= 0].drop_duplicates(["sentence", "name"])
    frame = frame.sort_values("sentence", kind="stable")
    sent = frame["sentence"].to_numpy()
    if len(sent) == 0:
        return pd.DataFrame({"chunk": [], "head": [], "relation": [], "tail": [], "weight": []})
    first = np.r_[True, sent[1:] != sent[:-1]]
    group_start = np.flatnonzero(first)
    sizes = np.diff(np.r_[group_start, len(sent)])
    group_of = np.cumsum(first) - 1
    local = np.arange(len(sent)) - group_start[group_of]
    keep = local < max_per_sentence
    n = np.minimum(sizes, max_per_sentence)[group_of]
    # row i is the head of pairs with every later row of its sentence (within the cap)
    reps = np.where(keep, n - local - 1, 0)
    heads = np.repeat(np.arange(len(sent)), reps)
    starts_of_runs = np.cumsum(reps) - reps
    tails = heads + 1 + (np.arange(len(heads)) - np.repeat(starts_of_runs, reps))
    name_arr = frame["name"].to_numpy(dtype=object)
    return pd.DataFrame(
        {
            "chunk": frame["chunk"].to_numpy()[heads],
            "head": name_arr[heads],
            "relation": COOCCURS,
            "tail": name_arr[tails],
            "weight": (1.0 / np.maximum(n[heads] - 1, 1)).astype(np.float32),
        }
    )


def assemble_extraction(
    texts: Sequence[str],
    titles: Sequence[str],
    cand_chunk: np.ndarray,
    cand_start: np.ndarray,
    cand_end: np.ndarray,
    cand_label: np.ndarray,
    sentence_starts: Sequence[np.ndarray],
    offset: int,
    max_per_sentence: int = 24,
    stats: Counter | None = None,
    names: np.ndarray | None = None,
) -> Extraction:
    """Build mentions (candidates + titles) and co-occurrence relations for a batch.

    ``cand_*`` are candidate spans (chunk = local row position); ``sentence_starts[i]`` are
    the sorted sentence start offsets of text ``i`` (must include 0); ``names`` are the
    candidates' surface strings when the caller already has them.
    """
    n = len(texts)
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=n)
    base = np.r_[0, np.cumsum(lengths + 1)[:-1]].astype(np.int64)[:n]
    t_start, t_end = _find_titles(texts, titles)

    chunk = np.r_[np.arange(n), np.asarray(cand_chunk, dtype=np.int64)]
    start = np.r_[t_start, np.asarray(cand_start, dtype=np.int64)]
    end = np.r_[t_end, np.asarray(cand_end, dtype=np.int64)]
    label = np.r_[np.full(n, TITLE_LABEL, dtype=object), np.asarray(cand_label, dtype=object)]
    title_arr = np.asarray(list(titles), dtype=object)
    all_names = np.empty(len(chunk), dtype=object)
    all_names[:n] = title_arr
    if names is not None:
        all_names[n:] = names
    elif len(chunk) > n:
        spans = zip(chunk[n:], start[n:], end[n:], strict=True)
        all_names[n:] = [texts[c][s:e] for c, s, e in spans]
    valid = np.r_[title_arr.astype(str) != "", np.ones(len(chunk) - n, dtype=bool)]
    # a candidate inside its chunk's title occurrence is the title itself (or a piece of it)
    cand = slice(n, None)
    valid[cand] &= ~((start[cand] >= t_start[chunk[cand]]) & (end[cand] <= t_end[chunk[cand]]))

    frame = pd.DataFrame(
        {"chunk": chunk, "name": all_names, "label": label, "start": start, "end": end}
    )[valid]
    frame = frame.sort_values(["chunk", "start"], kind="stable").reset_index(drop=True)

    pairs = zip(sentence_starts, base, strict=True)
    shifted = [np.asarray(s, dtype=np.int64) + b for s, b in pairs]
    sent_global = np.sort(np.concatenate([np.zeros(0, dtype=np.int64), *shifted]))
    fstart = frame["start"].to_numpy()
    gpos = base[frame["chunk"].to_numpy()] + fstart
    sentence = np.where(fstart >= 0, np.searchsorted(sent_global, gpos, side="right") - 1, -1)

    relations = cooccurrence_relations(
        frame["chunk"].to_numpy() + offset, sentence, frame["name"].to_numpy(), max_per_sentence
    )
    mentions = frame.assign(chunk=frame["chunk"] + offset)
    stats = Counter() if stats is None else stats
    stats["chunks"] += n
    stats["mentions"] += len(mentions)
    stats["relations"] += len(relations)
    stats["titles_not_in_text"] += int(((t_start < 0) & (title_arr.astype(str) != "")).sum())
    return Extraction(mentions=mentions, relations=relations, stats=stats)


def texts_and_titles(chunks: pd.DataFrame) -> tuple[list[str], list[str]]:
    texts = chunks["text"].fillna("").astype(str).tolist()
    if "title" in chunks:
        titles = chunks["title"].fillna("").astype(str).str.strip().tolist()
    else:
        titles = [""] * len(texts)
    return texts, titles
