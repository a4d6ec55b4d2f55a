"""Result types of a query: ranked passages with provenance, seeds and entity paths."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpurag.query.deferred import Deferred, resolve


@dataclass
class Passage:
    """One retrieved chunk with its provenance."""

    rank: int
    chunk_id: str
    doc_id: str
    title: str
    text: str
    char_start: int
    char_end: int
    score: float  # dense: cosine to the question; graph: the best relevance from the walk
    # (0 to 1) at this rank or below (:func:`gpurag.query.graph.shown_scores`)


@dataclass
class SeedEntity:
    """An entity the question matched, with how it matched."""

    entity_id: int
    name: str
    score: float
    via: str  # "entity", "fact" or "passage"


@dataclass
class EntityPath:
    """A chain of entities linking a seed entity to a retrieved passage."""

    chunk_id: str
    entities: list[str]
    relations: list[str]


@dataclass
class QueryResult:
    """What ``Index.query`` returns; stable across retrieval modes."""

    question: str
    mode: str
    passages: list[Passage]
    seeds: list[SeedEntity] = field(default_factory=list)
    paths: list[EntityPath] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    answer: str | None = None
    citations: list[str] = field(default_factory=list)
    error: str | None = None
    # how likely the corpus holds what the question asks about (0 to 1, absolute, comparable
    # across questions; gpurag.query.confidence); None for an index without a graph.
    # Computed for the whole batch on the first read (gpurag.query.deferred).
    confidence: float | None = Deferred(lambda: None)  # type: ignore[assignment]
    # graph mode: per passage the chains from a question entity to it (gpurag.query.evidence),
    # made on the first read
    chains: list[Any] = Deferred(list)  # type: ignore[assignment]  # noqa: RUF009
    # mode "global": the communities ranked for the question (gpurag.query.communities)
    communities: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def resolve_deferred(self) -> None:
        """Compute every field filled on first read now (the service does it on its worker
        thread, not on the event loop that answers)."""
        resolve(self, _DEFERRED)

    def __getstate__(self) -> dict[str, Any]:  # a copy or pickle holds values, not pending work
        self.resolve_deferred()
        return self.__dict__

    @property
    def chunk_ids(self) -> list[str]:
        return [p.chunk_id for p in self.passages]

    @property
    def doc_ids(self) -> list[str]:
        return [p.doc_id for p in self.passages]


_DEFERRED = ("confidence", "chains")
