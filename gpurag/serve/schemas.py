"""Request and response models: they validate input and make the OpenAPI schema."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Query settings a caller may change per request: QueryConfig's rerank choice and some ranking
# profile constants (a request that sets one runs on a "<profile>+custom" copy, as an explicit
# keyword of Index.query does); anything else is rejected as an unknown field.
OPTION_FIELDS = ("damping", "seed_entities", "seed_facts", "seed_passages", "sim_power",
                 "entity_weight", "fact_weight", "passage_weight", "dense_head", "dense_blend",
                 "rerank", "rerank_candidates")
GLOBAL_FIELDS = ("level", "communities")  # settings of mode "global" only
RESULT_FIELDS = ("min_confidence",)  # what is returned, not how it is ranked


class QueryRequest(BaseModel):
    """One question (``question``) or a batch (``questions``), with optional settings."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"question": "Who founded the lighthouse society?", "k": 5}]})

    question: str | None = Field(None, min_length=1, description="one question")
    questions: list[str] | None = Field(None, min_length=1,
                                        description="several questions, answered as a batch")
    k: int | None = Field(None, ge=1, description="passages per question (default 5)")
    mode: str | None = Field(None, description="dense | bm25 | graph (default: graph when the "
                             "index has a knowledge graph) | global (corpus-wide: the communities "
                             "most relevant to the question)")
    level: int | None = Field(None, ge=0, description="mode global: the community level")
    communities: int | None = Field(None, ge=1, le=1000,
                                    description="mode global: how many communities")
    min_confidence: float | None = Field(None, ge=0, le=1, description="return no passages "
                                         "for a question whose confidence is below this")
    damping: float | None = Field(None, gt=0, lt=1, description="PPR damping")
    seed_entities: int | None = Field(None, ge=1, le=1000)
    seed_facts: int | None = Field(None, ge=1, le=1000)
    seed_passages: int | None = Field(None, ge=1, le=1000)
    sim_power: float | None = Field(None, ge=0, le=100)
    entity_weight: float | None = Field(None, ge=0)
    fact_weight: float | None = Field(None, ge=0)
    passage_weight: float | None = Field(None, ge=0)
    dense_head: int | None = Field(None, ge=0, le=1000)
    dense_blend: float | None = Field(None, ge=0, le=1)
    rerank: str | None = Field(None, description="none | gat")
    rerank_candidates: int | None = Field(None, ge=1, le=1000)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, data: Any) -> Any:
        """JSON ``true`` is not the number 1: a boolean for a numeric setting is refused."""
        if isinstance(data, dict):
            for name, value in data.items():
                if isinstance(value, bool):
                    raise ValueError(f"{name}: expected a number or a string, got {value!r}"
                                     .replace("True", "true").replace("False", "false"))
        return data

    def question_list(self) -> list[str]:
        return [self.question] if self.question is not None else list(self.questions or [])

    def options(self) -> dict[str, Any]:
        names = OPTION_FIELDS + GLOBAL_FIELDS + RESULT_FIELDS
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


class Passage(BaseModel):
    rank: int
    chunk_id: str
    doc_id: str
    title: str
    text: str
    char_start: int
    char_end: int
    score: float


class SeedEntity(BaseModel):
    entity_id: int
    name: str
    score: float
    via: str


class EntityPath(BaseModel):
    chunk_id: str
    entities: list[str]
    relations: list[str]


class EvidenceStep(BaseModel):
    source: str
    relation: str
    target: str
    target_kind: str
    text: str
    chunk_id: str
    doc_id: str
    char_start: int
    char_end: int
    rank: int | None = None
    triple: str | None = None


class EvidenceChain(BaseModel):
    """A chain from a question entity to a passage (``gpurag.query.evidence``)."""

    rank: int
    chunk_id: str
    doc_id: str
    score: float
    entities: list[str]
    steps: list[EvidenceStep] = []
    bridge: bool = False


class Sentence(BaseModel):
    text: str
    chunk_id: str
    doc_id: str
    char_start: int
    char_end: int


class Community(BaseModel):
    """A community of a global answer (``gpurag.query.communities.CommunityHit``)."""

    rank: int
    level: int
    community: int
    score: float
    n_entities: int
    n_passages: int
    entities: list[str]
    passages: list[str]
    documents: list[str]
    summary: list[Sentence] = []
    report: str | None = None


class QueryResult(BaseModel):
    """``QueryResult.to_dict()`` of the Python API."""

    question: str
    mode: str
    passages: list[Passage]
    seeds: list[SeedEntity] = []
    paths: list[EntityPath] = []
    timings_ms: dict[str, float] = {}
    answer: str | None = None
    citations: list[str] = []
    error: str | None = None
    confidence: float | None = None
    chains: list[EvidenceChain] = []
    communities: list[Community] = []


class QueryResponse(BaseModel):
    """Results in the order of the questions, and the index version that answered them."""

    index_version: str
    results: list[QueryResult]


class ErrorResponse(BaseModel):
    detail: Any


class ReloadResponse(BaseModel):
    reloaded: bool
    index_version: str


class StatusResponse(BaseModel):
    status: str
    index_version: str | None = None
