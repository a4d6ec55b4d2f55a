"""Per-stage wall time of one retrieval, reported in each result's ``timings_ms``.

A :class:`Stages` is made per call (never shared between calls, so concurrent queries in the
service keep their own); each :meth:`Stages.lap` charges the time since the previous lap to a
named stage. ``bench/query.py`` reads the stages per question."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Stages:
    """Milliseconds per named stage since the object was made, lap by lap."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        """Charge the time since the last lap to ``stage`` (added to what it had)."""
        now = time.perf_counter()
        self.ms[stage] = self.ms.get(stage, 0.0) + (now - self._last) * 1000.0
        self._last = now

    def add(self, stage: str, ms: float) -> None:
        """Charge ``ms`` to ``stage`` without a lap: the time of work that ran beside the
        laps (on a helper thread, :func:`timed`), which the laps do not count out."""
        self.ms[stage] = self.ms.get(stage, 0.0) + ms

    def per_question(self, q: int) -> dict[str, float]:
        """Each stage's milliseconds divided by the batch's ``q`` questions."""
        return {k: v / max(q, 1) for k, v in self.ms.items()}


def timed(fn: Callable[..., T], *args: Any) -> tuple[T, float]:
    """``fn(*args)`` and its own wall time in milliseconds, wherever it runs (a helper
    thread's call is timed there, not by the wait for it)."""
    t0 = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - t0) * 1000.0
