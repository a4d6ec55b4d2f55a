"""Settings of the query service (command-line options map onto these fields)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class ServeConfig:
    """How ``gpurag serve`` listens, batches, limits and reloads."""

    host: str = "127.0.0.1"
    port: int = 8080
    # Micro-batching: requests arriving within `batch_window_ms` of the first share one
    # `Index.query_batch` call of at most `max_batch` questions. Off: one call per request.
    batching: bool = True
    batch_window_ms: float = 2.0
    max_batch: int = 64
    # Load shedding: questions waiting beyond this answer 503 with Retry-After.
    max_queue: int = 256
    retry_after_s: int = 1
    request_timeout_s: float = 30.0
    # Slow clients: request headers must be complete within header_timeout_s of the
    # connection (or of the previous response), a body within body_timeout_s of its start.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    # Input limits.
    max_body_bytes: int = 1 << 20
    max_question_chars: int = 4000
    max_questions: int = 256
    max_k: int = 100
    # Security: bearer keys; empty with insecure_no_auth only (and only on loopback).
    api_keys: list[str] = field(default_factory=list)
    insecure_no_auth: bool = False
    cors_origins: list[str] = field(default_factory=list)
    # Hot reload: seconds between checks of manifest.json (0: only POST /v1/admin/reload).
    reload_poll_s: float = 2.0

    def __post_init__(self) -> None:
        for name in ("batch_window_ms", "request_timeout_s", "reload_poll_s",
                     "header_timeout_s", "body_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, not {value!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0 to 65535, not {self.port}")
        if self.reload_poll_s < 0:
            raise ValueError("reload_poll_s must be >= 0")
        if self.batch_window_ms < 0:
            raise ValueError("batch_window_ms must be >= 0")
        for name in ("max_batch", "max_queue", "max_body_bytes", "max_question_chars",
                     "max_questions", "max_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("request_timeout_s", "header_timeout_s", "body_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
