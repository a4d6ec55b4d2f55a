"""The extractor interface: batched chunks -> entity mentions + relations, with provenance."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import pandas as pd

# The relation label of two names sharing a sentence (rule-based extractors): not a fact.
COOCCURS = "co-occurs"

MENTION_COLUMNS = {
    "chunk": "int32",
    "name": "string",
    "label": "string",
    "start": "int32",
    "end": "int32",
}
RELATION_COLUMNS = {
    "chunk": "int32",
    "head": "string",
    "relation": "string",
    "tail": "string",
    "weight": "float32",
}


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty DataFrame with the given column dtypes."""
    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in columns.items()})


@dataclass
class Extraction:
    """What an extractor found in a batch of chunks.

    ``mentions``: one row per entity mention -- ``chunk`` (row position of the chunk in the
    chunks table), ``name`` (surface form), ``label`` (entity type, "" if unknown),
    ``start``/``end`` (character span inside the chunk text, -1 when unknown).
    ``relations``: one row per relation -- ``chunk``, ``head``, ``relation``, ``tail`` (surface
    names; heads and tails also appear in ``mentions``), ``weight``.
    ``stats``: counters such as ``malformed_rows``; merged by summing.
    """

    mentions: pd.DataFrame = field(default_factory=lambda: empty_frame(MENTION_COLUMNS))
    relations: pd.DataFrame = field(default_factory=lambda: empty_frame(RELATION_COLUMNS))
    stats: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.mentions = self.mentions.astype(MENTION_COLUMNS)[list(MENTION_COLUMNS)]
        self.relations = self.relations.astype(RELATION_COLUMNS)[list(RELATION_COLUMNS)]

    @staticmethod
    def concat(parts: list[Extraction]) -> Extraction:
        """Join extractions of consecutive batches (chunk positions must already be global)."""
        if not parts:
            return Extraction()
        stats: Counter = Counter()
        for part in parts:
            stats.update(part.stats)
        return Extraction(
            mentions=pd.concat([p.mentions for p in parts], ignore_index=True),
            relations=pd.concat([p.relations for p in parts], ignore_index=True),
            stats=stats,
        )


@runtime_checkable
class Extractor(Protocol):
    """Turns a batch of chunks into mentions and relations.

    ``chunks`` is a DataFrame with at least ``chunk_id``, ``title`` and ``text`` columns; its
    row positions (0..len-1) plus ``offset`` are the ``chunk`` values written in the result.
    ``name`` identifies the extractor and its settings (it keys caches). Optional attributes
    the pipeline reads: ``batch_size`` (chunks per call), ``per_chunk`` (a chunk's output does
    not depend on its batch, so an insert never re-extracts stored chunks; default False) and
    ``cpu_bound`` (batches may run in worker processes; default False).
    """

    name: str

    def extract(self, chunks: pd.DataFrame, offset: int = 0) -> Extraction: ...
