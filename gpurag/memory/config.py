"""Settings of a memory: stored in ``memory.json`` at create time, overridable at open."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from gpurag.errors import ConfigError


@dataclass
class MemoryConfig:
    """Fusion weights and view parameters of :meth:`Memory.search` (see docs in the README)."""

    embedder: str = "minilm"
    w_dense: float = 1.0
    w_bm25: float = 0.5
    w_graph: float = 0.25
    coverage_slope: float = 8.0  # logistic slope of the relational weight in the deficit
    coverage_mid: float = 0.4  # deficit at which relational and temporal weigh the same
    derived_weight: bool = True  # relational weight = the coverage deficit (docs/MEMORY.md);
    # False: the older logistic in the deficit with coverage_slope / coverage_mid
    damping: float = 0.5
    tau: float = 3.0  # turns: closeness decay of the temporal view
    recency: float = 0.0  # bonus of the most recent best-covering session
    session_weight: float = 0.0  # share of a trace's score taken from its session's best
    w_claim: float = 0.5  # bonus of a trace claiming the asked attribute of a named entity
    neighbour: float = 0.2  # share of the better neighbouring turn's score a turn gets
    discourse: bool = True  # write-time pronoun/possessive chains, relative dates, claims
    candidates: int = 100  # per view, before fusion
    policy: str = "recent"  # consistency filter: recent | score
    bm25_rebuild: int = 2000  # tail size (traces) that triggers a lexical index rebuild
    scale_from: int = 50_000  # traces from which search reads the appended-to inverted lists
    # and IVF of gpurag.memory.scale instead of rebuilding whole-memory structures

    def __post_init__(self) -> None:
        if self.policy not in ("recent", "score"):
            raise ConfigError(f"memory policy must be 'recent' or 'score', not {self.policy!r}")
        if not 0 <= self.damping < 1:
            raise ConfigError(f"memory damping must lie in [0, 1), got {self.damping}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], **overrides: Any) -> MemoryConfig:
        names = {f.name for f in fields(cls)}
        unknown = set(overrides) - names
        if unknown:
            raise ConfigError(f"unknown memory settings: {', '.join(sorted(unknown))}")
        return cls(**{k: v for k, v in {**data, **overrides}.items() if k in names})
