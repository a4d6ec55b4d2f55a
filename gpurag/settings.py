"""The process environment, read in one place.

Every ``GPURAG_*`` variable gpurag knows is declared here (:data:`VARIABLES`, and the per-field
families ``GPURAG_INDEX_<FIELD>``, ``GPURAG_QUERY_<FIELD>``, ``GPURAG_LLM_<FIELD>``), checked
by a :class:`~gpurag.config.Rule`, and read into one frozen :class:`Settings`. A misspelled
``GPURAG_*`` variable is a :class:`~gpurag.errors.ConfigError` naming it, never ignored.
This is the one module of ``gpurag/`` that touches ``os.environ`` (reads, the variables handed
to a child process, and the one write a command makes for what it starts later);
``tests/foundation/test_settings.py`` keeps it so.

:func:`current` is the process's settings: parsed once, and again only when a ``GPURAG_*``
variable changed (a test's ``monkeypatch.setenv``, a script's ``os.environ[...] = ...``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpurag.errors import ConfigError
from gpurag.rules import Rule, bounded_workers

PREFIX = "GPURAG_"
INDEX_PREFIX, QUERY_PREFIX, LLM_PREFIX = "GPURAG_INDEX_", "GPURAG_QUERY_", "GPURAG_LLM_"
# Read by the test suite, bench/ and scripts/, never by gpurag itself: allowed, not used.
TOOLING_PREFIXES = ("GPURAG_TEST_", "GPURAG_BENCH_")
TOOLING = ("GPURAG_SHARED_DATA", "GPURAG_PARITY_PASSAGES", "GPURAG_LLAMA_WHEEL")


@dataclass(frozen=True)
class Var:
    """One process-wide variable: its name, the :class:`Settings` field it fills, its rule."""

    name: str
    field: str
    rule: Rule
    doc: str


_OPT_STR = Rule(str, optional=True)
VARIABLES: tuple[Var, ...] = (
    Var("GPURAG_DEVICE", "device", _OPT_STR,
        "cpu, cuda or auto (unset: cuda when CuPy or torch sees a GPU)"),
    Var("GPURAG_PROBE_CUDA", "probe_cuda", Rule(bool, optional=True),
        "1: look for CUDA even without /proc/driver/nvidia (containers)"),
    Var("GPURAG_PROGRESS", "progress", Rule(bool, optional=True),
        "1 forces progress bars, 0 turns them off (unset: only on a terminal)"),
    Var("GPURAG_PROGRESS_INTERVAL", "progress_interval", Rule(float, lo=0, optional=True),
        "seconds between the log lines of a long stage off a terminal (30)"),
    Var("GPURAG_THREADS", "threads", Rule(int, lo=0, optional=True),
        "CPU threads of FAISS and ONNX Runtime, at most the cores (0 or unset: their default)"),
    Var("GPURAG_EXTRACT_WORKERS", "extract_workers", Rule(int, lo=0, optional=True),
        "worker processes of rule-based extraction (1: none; 0 or unset: automatic)"),
    Var("GPURAG_EMBED_DTYPE", "embed_dtype", _OPT_STR,
        "torch embedder precision: float16, bfloat16, float32 (unset: fp16 on a GPU)"),
    Var("GPURAG_EMBED_CACHE", "embed_cache", _OPT_STR,
        "an embedding cache folder shared by every build; off for none (unset: per index)"),
    Var("GPURAG_GAT_CHECKPOINT", "gat_checkpoint", _OPT_STR, "the GAT reranker's weights"),
    Var("GPURAG_CONFIG", "config_file", _OPT_STR, "a TOML file of [index] and [query] settings"),
    Var("GPURAG_CACHE_DIR", "cache_dir", _OPT_STR,
        "root of gpurag's caches (unset: $XDG_CACHE_HOME/gpurag, else ~/.cache/gpurag)"),
    Var("GPURAG_API_KEYS", "api_keys", _OPT_STR, "gpurag serve's bearer keys, comma-separated"),
    Var("GPURAG_VLLM_BIN", "vllm_bin", _OPT_STR, "the vllm executable of gpurag llm serve"),
)
BY_NAME = {v.name: v for v in VARIABLES}


@dataclass(frozen=True)
class Settings:
    """gpurag's environment, typed (None: not set). ``index``, ``query`` and ``llm`` hold the
    raw ``GPURAG_INDEX_*``, ``GPURAG_QUERY_*`` and ``GPURAG_LLM_*`` values by field name
    (checked by :mod:`gpurag.config` and :class:`~gpurag.llm.config.LLMConfig`)."""

    device: str | None = None
    probe_cuda: bool | None = None
    progress: bool | None = None
    progress_interval: float | None = None
    threads: int | None = None
    extract_workers: int | None = None
    embed_dtype: str | None = None
    embed_cache: str | None = None
    gat_checkpoint: str | None = None
    config_file: str | None = None
    cache_dir: str | None = None
    api_keys: str | None = None
    vllm_bin: str | None = None
    xdg_cache_home: str | None = None
    index: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    llm: Mapping[str, str] = field(default_factory=dict)

    def family(self, prefix: str) -> Mapping[str, str]:
        """The raw values of one family (``GPURAG_INDEX_``...) by lower-case field name."""
        return {INDEX_PREFIX: self.index, QUERY_PREFIX: self.query, LLM_PREFIX: self.llm}[prefix]

    def cpu_threads(self) -> int:
        """``GPURAG_THREADS`` at most the machine's cores (0: the libraries' default)."""
        return bounded_workers(self.threads or 0, "GPURAG_THREADS")

    def cache_root(self, sub: str = "") -> Path:
        """gpurag's cache folder (``sub`` inside it): ``$GPURAG_CACHE_DIR``, else
        ``$XDG_CACHE_HOME/gpurag``, else ``~/.cache/gpurag``."""
        root = (Path(self.cache_dir) if self.cache_dir else
                Path(self.xdg_cache_home or Path.home() / ".cache") / "gpurag")
        return root / sub if sub else root


def _family(environ: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix):].lower(): v for k, v in environ.items() if k.startswith(prefix)}


FAMILIES = (INDEX_PREFIX, QUERY_PREFIX, LLM_PREFIX)  # checked by their owners' field names


def check_names(environ: Mapping[str, str]) -> None:
    """Raise :class:`ConfigError` naming the first ``GPURAG_*`` variable gpurag does not know
    (the ``GPURAG_INDEX_*``, ``GPURAG_QUERY_*`` and ``GPURAG_LLM_*`` families are checked
    against their fields by :mod:`gpurag.config` and :mod:`gpurag.llm.config`)."""
    for name in sorted(environ):
        if (not name.startswith(PREFIX) or name in BY_NAME or name in TOOLING
                or name.startswith(TOOLING_PREFIXES + FAMILIES)):
            continue
        raise ConfigError(f"environment: unknown variable {name} (gpurag reads "
                          f"{', '.join(sorted(BY_NAME))} and the families "
                          f"{', '.join(p + '*' for p in FAMILIES)})")


def read(environ: Mapping[str, str] | None = None) -> Settings:
    """:class:`Settings` from ``environ``, every variable checked: a bad value or an unknown
    ``GPURAG_*`` name raises :class:`ConfigError`. ``None``: the process's, :func:`current`
    (parsed once; every reader of "this environ, else the process's" calls this)."""
    if environ is None:
        return current()
    return _parse(environ)


def _parse(env: Mapping[str, str]) -> Settings:
    check_names(env)
    values: dict[str, Any] = {}
    for var in VARIABLES:
        raw = env.get(var.name)
        if raw is None:
            continue
        try:
            values[var.field] = var.rule.coerce(raw)
        except (ValueError, TypeError):
            raise ConfigError(f"environment: {var.name}={raw!r} is not valid: it must be "
                              f"{var.rule.describe()}") from None
    return Settings(**values, xdg_cache_home=env.get("XDG_CACHE_HOME") or None,
                    index=_family(env, INDEX_PREFIX), query=_family(env, QUERY_PREFIX),
                    llm=_family(env, LLM_PREFIX))


_LOCK = threading.Lock()
_CURRENT: tuple[tuple[tuple[str, str], ...], Settings] | None = None


def _snapshot() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items()
                        if k.startswith(PREFIX) or k == "XDG_CACHE_HOME"))


def current() -> Settings:
    """The process's :class:`Settings` (parsed again only after a ``GPURAG_*`` change)."""
    global _CURRENT
    snap = _snapshot()
    cached = _CURRENT
    if cached is not None and cached[0] == snap:
        return cached[1]
    settings = _parse(dict(snap))
    with _LOCK:
        _CURRENT = (snap, settings)
    return settings


def secret(name: str) -> str | None:
    """The value of the variable ``name`` holding a secret (an API key), read when needed and
    never kept in :class:`Settings` (so it is in no repr or log)."""
    return os.environ.get(name) or None


def child_environ(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a child process: this process's, with ``extra`` on top."""
    return {**os.environ, **extra}


_SET_BY_DEFAULT: dict[str, str] = {}  # what library_default set (the user had not)


def library_default(name: str, value: str) -> str:
    """Set a variable a bundled library reads when it loads (``OMP_WAIT_POLICY``) unless the
    user set it; returns the value in force."""
    if name.startswith(PREFIX):
        raise ConfigError(f"library_default: {name} is gpurag's own (use export)")
    if name not in os.environ:
        _SET_BY_DEFAULT[name] = value
    return os.environ.setdefault(name, value)


def without_library_defaults() -> dict[str, str]:
    """This process's environment without what :func:`library_default` set (for a child that
    must start as the user's shell would, e.g. a benchmark's baseline checkout)."""
    return {k: v for k, v in os.environ.items() if _SET_BY_DEFAULT.get(k) != v}


def export(name: str, value: str) -> None:
    """Set the known variable ``name`` for the rest of this process and its children (e.g.
    ``gpurag serve --config``: every index it reopens reads the file)."""
    if name not in BY_NAME:
        raise ConfigError(f"export: unknown variable {name}")
    os.environ[name] = value


__all__ = [
    "BY_NAME",
    "VARIABLES",
    "Settings",
    "Var",
    "check_names",
    "child_environ",
    "current",
    "export",
    "library_default",
    "read",
    "secret",
]
