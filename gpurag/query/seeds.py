"""The seed entities of a batch as arrays, turned into result objects only for what is shown."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpurag.query.results import SeedEntity


@dataclass
class SeedTable:
    """Seed entities of a batch, one entry per (question, entity) in the order they were
    found: ``q`` (question), ``entity``, ``score`` (similarity, 1.0 for a named entity) and
    ``via`` ("entity" or "name")."""

    q: np.ndarray
    entity: np.ndarray
    score: np.ndarray
    via: np.ndarray

    @classmethod
    def empty(cls) -> SeedTable:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32),
                   np.zeros(0, object))

    def extend(self, q: np.ndarray, entity: np.ndarray, score: np.ndarray, via: str
               ) -> SeedTable:
        """These seeds followed by the given ones."""
        return SeedTable(np.concatenate([self.q, np.asarray(q, np.int64)]),
                         np.concatenate([self.entity, np.asarray(entity, np.int64)]),
                         np.concatenate([self.score, np.asarray(score, np.float32)]),
                         np.concatenate([self.via, np.full(len(q), via, object)]))

    def lists(self, n_questions: int, names: np.ndarray, top: int = 10
              ) -> list[list[SeedEntity]]:
        """Per question, its ``top`` seeds by score (ties: in the order found)."""
        order = np.lexsort((np.arange(len(self.q)), -self.score.astype(np.float64), self.q))
        qs = self.q[order]
        pos = np.arange(len(qs)) - np.searchsorted(qs, qs)
        order = order[pos < top]
        out: list[list[SeedEntity]] = [[] for _ in range(n_questions)]
        for qi, e, s, v in zip(self.q[order].tolist(), self.entity[order].tolist(),
                               self.score[order].tolist(), self.via[order].tolist(),
                               strict=True):
            out[qi].append(SeedEntity(e, str(names[e]), s, v))
        return out
