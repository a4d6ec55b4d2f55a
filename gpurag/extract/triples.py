"""Import of precomputed OpenIE triples (e.g. GPT-3.5 output shipped with a data set).

File format, one JSON object per line::

    {"id": passage id, "entities": [str, ...], "triples": [[head, relation, tail], ...]}

Rows are matched to chunks by ``id == chunk.doc_id`` (``chunk_id`` when the chunks table has
no ``doc_id``); every chunk of a document gets the document's triples. Real LLM output is
messy: unparsable lines, rows without an id, triples that are not three non-empty strings and
non-string entities are counted in ``stats`` and skipped, never fatal.

The triples are added to the fast rule-based extraction of the same chunks (its names, titles
and sentence co-occurrence relations), not put in its place: the typed relations sit on top of
the co-occurrence graph, and the names the LLM left out, or spelled unlike the titles, are still
linked. Dates and numbers among the LLM's names are labelled ``DATE``, as the rule-based
extractors label them, so that ``graph_dates=False`` keeps them out of the graph here too.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from gpurag.extract.assembly import TITLE_LABEL, find_span, texts_and_titles
from gpurag.extract.base import Extraction
from gpurag.extract.combined import on_top_of

__all__ = ["TriplesExtractor", "is_date_name", "load_triples"]

log = logging.getLogger(__name__)
_MAX_WARNINGS = 20
DATE_LABEL = "DATE"
# A date or number name is made only of such tokens, one of them a number, a month or a day:
# "1963", "1940s", "21 January 2000", "1839 -- 1842", "March 1999", "97,524", "c. 1200 BC".
_MONTH_OR_DAY = (r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)\.?"
                 r"|january|february|march|april|june|july|august|september|october|november"
                 r"|december|(?:mon|tues|wednes|thurs|fri|satur|sun)day")
_NUMBER = r"[\d.,:/'’()–—~-]*\d[\d.,:/'’()–—~-]*(?:st|nd|rd|th|s)?"
_DATE_TOKEN = re.compile(rf"(?:{_NUMBER}|{_MONTH_OR_DAY}|[–—~-]+|bc|ad|bce|ce|c\.|ca\.|circa"
                         r"|of|the|to|and),?", re.IGNORECASE)
_DATE_CORE = re.compile(rf"(?:{_NUMBER}|{_MONTH_OR_DAY}),?", re.IGNORECASE)


def is_date_name(names: list[str]) -> np.ndarray:
    """Per name, whether it is a date, a year or a number (every word a number, a month or
    day name, or a joining or era word, and one of them a number, month or day), as the
    rule-based extractors label ``DATE`` spans."""
    def date(name: str) -> bool:
        words = name.split()
        return (all(_DATE_TOKEN.fullmatch(w) for w in words)
                and any(_DATE_CORE.fullmatch(w) for w in words))

    return np.fromiter((date(n) for n in names), dtype=bool, count=len(names))


def _clean(value: object) -> str | None:
    """A stripped non-empty string, or None."""
    if not isinstance(value, str):
        return None
    value = " ".join(value.split())
    return value or None


def load_triples(path: str | os.PathLike[str]) -> tuple[dict[str, tuple], Counter]:
    """Parse a triples file into ``{id: (entities, triples)}`` plus file-level counters.

    Counters: ``rows``, ``bad_lines`` (unparsable JSON, not an object, no usable id),
    ``duplicate_ids`` (later rows extend the first), ``malformed_triples``,
    ``malformed_entities``, ``triples``, ``passages_without_triples``.
    """
    path = Path(path)
    stats: Counter = Counter()
    table: dict[str, tuple[list[str], list[tuple[str, str, str]], int]] = {}
    warned = 0
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                row, reason = None, f"invalid JSON: {exc.msg}"
            else:
                reason = "not an object" if not isinstance(row, dict) else "missing or empty id"
            pid = row.get("id") if isinstance(row, dict) else None
            if not isinstance(pid, str | int) or isinstance(pid, bool) or pid == "":
                stats["bad_lines"] += 1
                if warned < _MAX_WARNINGS:
                    log.warning("%s:%d: skipped bad line (%s)", path, lineno, reason)
                    warned += 1
                continue
            pid = str(pid)
            stats["rows"] += 1
            raw_entities = row.get("entities") or []
            raw_triples = row.get("triples") or []
            if not isinstance(raw_entities, list):
                stats["malformed_entities"] += 1
                raw_entities = []
            if not isinstance(raw_triples, list):
                stats["malformed_triples"] += 1
                raw_triples = []
            entities = [e for e in map(_clean, raw_entities) if e is not None]
            stats["malformed_entities"] += len(raw_entities) - len(entities)
            triples = []
            bad = 0
            for triple in raw_triples:
                parts = [_clean(x) for x in triple] if isinstance(triple, list) else []
                if len(parts) != 3 or None in parts:
                    bad += 1
                    continue
                triples.append((parts[0], parts[1], parts[2]))
            stats["malformed_triples"] += bad
            stats["triples"] += len(triples)
            if not triples:
                stats["passages_without_triples"] += 1
            if pid in table:
                stats["duplicate_ids"] += 1
                old_e, old_t, old_bad = table[pid]
                table[pid] = (old_e + entities, old_t + triples, old_bad + bad)
            else:
                table[pid] = (entities, triples, bad)
    if warned >= _MAX_WARNINGS and stats["bad_lines"] > warned:
        log.warning("%s: %d bad lines in all", path, stats["bad_lines"])
    if stats["malformed_triples"]:
        log.warning(
            "%s: skipped %d malformed triples (not three non-empty strings) of %d",
            path,
            stats["malformed_triples"],
            stats["malformed_triples"] + stats["triples"],
        )
    return table, stats


def title_mentions(chunks: pd.DataFrame, offset: int = 0) -> pd.DataFrame:
    """Each titled chunk mentions its title (label ``TITLE``), as with the rule-based
    extractors, so the graph links an entity to the page about it."""
    texts, titles = texts_and_titles(chunks)
    keep = [i for i, t in enumerate(titles) if t]
    spans = np.asarray([find_span(texts[i], titles[i]) for i in keep],
                       dtype=np.int64).reshape(-1, 2)
    return pd.DataFrame({"chunk": np.asarray(keep, dtype=np.int64) + offset,
                         "name": [titles[i] for i in keep], "label": TITLE_LABEL,
                         "start": spans[:, 0], "end": spans[:, 1]})


@dataclass
class TriplesExtractor:
    """Mentions and relations from a precomputed ``triples.jsonl``, added to the ``base``
    rule-based extraction of the same chunks (``"fast"``; ``""`` for the triples alone).

    The LLM's mentions of a chunk are its row's ``entities`` plus every triple head and tail,
    label ``DATE`` for dates and numbers, else ``""``, each with the span of its first
    case-insensitive occurrence in the chunk text (``-1`` when absent). Relations
    are the triples with weight 1, beside the base's ``co-occurs`` ones. Per-batch ``stats``:
    ``malformed_triples`` of the batch's chunks, ``chunks_without_row``,
    ``chunks_without_triples``, ``mentions``, ``relations``, ``triple_mentions``,
    ``triple_relations`` and the base's counters as ``base_*``; the file-level counters
    (``bad_lines``, ...) come as ``file_*`` in the batch at ``offset == 0`` so that summing
    batch stats counts them once. ``file_stats`` holds them too.
    """

    path: str | os.PathLike[str]
    base: str = "fast"
    name: str = field(init=False)
    cpu_bound: ClassVar[bool] = True  # batches may run in worker processes
    _table: dict[str, tuple] | None = field(init=False, default=None, repr=False)
    _file_stats: Counter | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        p = Path(self.path)
        size = p.stat().st_size if p.exists() else 0
        self.name = f"triples-v2({p.name},{size},base={self.base or 'none'})"
        self._base = None
        if self.base:
            from gpurag.extract import make_extractor

            self._base = make_extractor(self.base)

    def _load(self) -> tuple[dict[str, tuple], Counter]:
        if self._table is None:
            self._table, self._file_stats = load_triples(self.path)
        assert self._file_stats is not None
        return self._table, self._file_stats

    @property
    def per_chunk(self) -> bool:
        """Whether a chunk's extraction is its own, not its batch's: the triples alone are;
        on top of the fast extraction they depend on the batch as it does."""
        return not self.base

    @property
    def file_stats(self) -> Counter:
        """File-level counters (parses the file on first use)."""
        return Counter(self._load()[1])

    def extract(self, chunks: pd.DataFrame, offset: int = 0) -> Extraction:
        """Look up each chunk's document in the triples file; add the base extraction."""
        table, file_stats = self._load()
        key_col = "doc_id" if "doc_id" in chunks else "chunk_id"
        keys = chunks[key_col].astype(str).tolist()
        texts = chunks["text"].fillna("").astype(str).tolist()
        stats: Counter = Counter()
        if offset == 0:
            stats.update({f"file_{k}": v for k, v in file_stats.items()})

        m_chunk: list[int] = []
        m_name: list[str] = []
        r_chunk: list[int] = []
        r_rows: list[tuple[str, str, str]] = []
        for pos, key in enumerate(keys):
            entry = table.get(key)
            if entry is None:
                stats["chunks_without_row"] += 1
                continue
            entities, triples, bad = entry
            stats["malformed_triples"] += bad
            if not triples:
                stats["chunks_without_triples"] += 1
            names = dict.fromkeys(entities)
            for h, _, t in triples:
                names[h] = None
                names[t] = None
            m_chunk.extend([pos] * len(names))
            m_name.extend(names)
            r_chunk.extend([pos] * len(triples))
            r_rows.extend(triples)

        spans = np.asarray(
            [find_span(texts[c], n) for c, n in zip(m_chunk, m_name, strict=True)],
            dtype=np.int64,
        ).reshape(-1, 2)
        mentions = pd.DataFrame(
            {
                "chunk": np.asarray(m_chunk, dtype=np.int64) + offset,
                "name": m_name,
                "label": np.where(is_date_name(m_name), DATE_LABEL, ""),
                "start": spans[:, 0],
                "end": spans[:, 1],
            }
        )
        heads, rels, tails = (list(x) for x in zip(*r_rows, strict=True)) if r_rows else ([],) * 3
        relations = pd.DataFrame(
            {
                "chunk": np.asarray(r_chunk, dtype=np.int64) + offset,
                "head": heads,
                "relation": rels,
                "tail": tails,
                "weight": np.ones(len(r_rows), dtype=np.float32),
            }
        )
        stats["chunks"] += len(keys)
        stats["triple_mentions"] += len(mentions)
        stats["triple_relations"] += len(relations)
        stats["mentions_not_in_text"] += int((spans[:, 0] < 0).sum())
        if self._base is None:
            mentions = pd.concat([mentions, title_mentions(chunks, offset)], ignore_index=True)
        ex = Extraction(mentions=mentions, relations=relations, stats=stats)
        if self._base is not None:
            ex = on_top_of(ex, self._base.extract(chunks, offset=offset))
        ex.stats["mentions"] += len(ex.mentions)
        ex.stats["relations"] += len(ex.relations)
        return ex
