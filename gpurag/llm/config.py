"""Settings for talking to an OpenAI-compatible LLM server (vLLM, llama.cpp, any other)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpurag import settings
from gpurag.errors import ConfigError

STRUCTURED_MODES = ("auto", "json_schema", "json_object", "off")


def default_cache_dir() -> str:
    """``$GPURAG_CACHE_DIR/llm``, else ``$XDG_CACHE_HOME/gpurag/llm`` (``~/.cache`` default)."""
    return str(settings.current().cache_root("llm"))


def normalize_url(url: str) -> str:
    """Base URL ending in ``/v1`` (``http://host:8000`` and ``http://host:8000/v1/`` both work)."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    if not url.endswith("/v1"):
        url += "/v1"
    return url


class LLMConfigError(ConfigError, ValueError):
    """An LLM setting out of range or unreadable (a ``ValueError`` too, as it used to be)."""


@dataclass
class LLMConfig:
    """How to reach the server and how to call it.

    ``model`` may be left empty: the client then asks ``/v1/models`` and takes the first.
    ``structured`` chooses how a JSON Schema is sent: ``json_schema`` (OpenAI / vLLM
    ``response_format``), ``json_object`` (``{"type": "json_object", "schema": ...}``, as
    llama-cpp-python wants), ``auto`` (try the first, fall back to the second once the server
    rejects it) or ``off`` (prompt only, parse tolerantly).
    ``cache_dir`` ``None`` turns the response cache off.
    ``max_failure_rate``: the largest share of an extraction batch's LLM calls that may fail
    (HTTP errors, timeouts, malformed answers...) before the build stops with an error; 0
    tolerates none. The failed calls are retried by the rerun that resumes the build.
    """

    url: str = "http://127.0.0.1:8000/v1"
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 256
    timeout_s: float = 300.0
    connect_timeout_s: float = 10.0
    max_retries: int = 4
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0
    temperature: float = 0.0
    max_tokens: int = 1024
    seed: int | None = 0
    structured: str = "auto"
    cache_dir: str | None = field(default_factory=default_cache_dir)
    extra_body: dict[str, Any] = field(default_factory=dict)
    max_failure_rate: float = 0.05

    def __post_init__(self) -> None:
        from gpurag.llm.pool import split_urls

        self.url = ",".join(split_urls(self.url, normalize_url))  # a pool: several, by commas
        if self.structured not in STRUCTURED_MODES:
            raise LLMConfigError(
                f"structured must be one of {STRUCTURED_MODES}, got {self.structured!r}")
        if self.concurrency < 1:
            raise LLMConfigError("concurrency must be >= 1")
        if self.max_retries < 0:
            raise LLMConfigError("max_retries must be >= 0")
        if self.timeout_s <= 0:
            raise LLMConfigError("timeout_s must be > 0")
        if not 0.0 <= self.max_failure_rate <= 1.0:  # also refuses NaN
            raise LLMConfigError(f"LLM max_failure_rate must be within [0, 1], got "
                                 f"{self.max_failure_rate!r}")

    @property
    def api_key(self) -> str | None:
        """The API key, read from the environment variable named by ``api_key_env``."""
        return settings.secret(self.api_key_env)

    def replace(self, **changes: Any) -> LLMConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    @property
    def urls(self) -> list[str]:
        """The servers' base URLs (several: a pool, :mod:`gpurag.llm.pool`)."""
        return self.url.split(",")

    def fingerprint(self) -> str:
        """Short hash of the settings that change answers (model and sampling), for names."""
        keyed = {
            "model": self.model,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "extra_body": self.extra_body,
        }
        return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:10]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> LLMConfig:
        """Defaults, then ``GPURAG_LLM_*`` variables (of ``environ``, default the process's),
        then ``overrides`` (``None`` ignored). A ``GPURAG_LLM_*`` variable that names no field
        is an error naming it.

        Variables: ``URL``, ``MODEL``, ``API_KEY_ENV``, ``CONCURRENCY``, ``TIMEOUT_S``,
        ``CONNECT_TIMEOUT_S``, ``MAX_RETRIES``, ``BACKOFF_S``, ``BACKOFF_MAX_S``, ``TEMPERATURE``,
        ``MAX_TOKENS``, ``SEED`` (``none`` for no seed), ``STRUCTURED``, ``CACHE_DIR`` (``none``
        turns the cache off), ``EXTRA_BODY`` (a JSON object), ``MAX_FAILURE_RATE``.
        """
        prefix = settings.LLM_PREFIX
        env = settings.read(environ)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(env.llm) - names)
        if unknown:
            raise LLMConfigError(f"environment: unknown variable {prefix}{unknown[0].upper()} "
                                 f"(known: {', '.join(prefix + n.upper() for n in sorted(names))})")
        values: dict[str, Any] = {}
        for name, raw in env.llm.items():
            if raw == "":
                continue
            try:
                values[name] = _parse_field(name, raw)
            except ValueError as exc:
                raise LLMConfigError(f"{prefix}{name.upper()}={raw!r}: {exc}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @staticmethod
    def configured() -> bool:
        """True when the environment names a server (``GPURAG_LLM_URL`` is set)."""
        return bool(settings.current().llm.get("url"))


_INTS = {"concurrency", "max_retries", "max_tokens", "seed"}
_FLOATS = {"timeout_s", "connect_timeout_s", "backoff_s", "backoff_max_s", "temperature",
           "max_failure_rate"}


def _parse_field(name: str, raw: str) -> Any:
    if name in ("seed", "cache_dir") and raw.strip().lower() in ("none", "null", "off"):
        return None
    if name in _INTS:
        return int(raw)
    if name in _FLOATS:
        return float(raw)
    if name == "extra_body":
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise ValueError(f"GPURAG_LLM_EXTRA_BODY must be a JSON object, got {raw!r}")
        return value
    return raw


NO_SERVER = ("no LLM server is configured: set GPURAG_LLM_URL or pass --llm-url (e.g. "
             "http://127.0.0.1:8000/v1; `gpurag llm serve` starts a local one); without one, "
             "--mode global answers extractively (communities, entities, passages, sentences)")


def require_server(config: LLMConfig | None, given: bool = False) -> LLMConfig:
    """``config`` when a server was named (``given``: by the caller, e.g. ``--llm-url``; or
    ``GPURAG_LLM_URL``; or a config built by the caller), never a silent localhost default."""
    if config is not None and (given or LLMConfig.configured()):
        return config
    if config is None and LLMConfig.configured():
        return LLMConfig.from_env()
    raise LLMConfigError(NO_SERVER)
