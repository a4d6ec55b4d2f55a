"""Settings of the query service (command-line options map onto these fields)."""

from __future__ import annotations

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
        if isinstance(self.port, bool) or not 0 <= self.port <= 65535:
            raise ValueError(f"port must be a whole number in [0, 65535], not {self.port!r}")
        if self.batch_window_ms < 0:
            raise ValueError("batch_window_ms must be >= 0")
        for name in ("max_batch", "max_queue", "max_body_bytes", "max_question_chars",
                     "max_questions", "max_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be > 0")
