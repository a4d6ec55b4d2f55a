"""One runtime, built at the edge (``cli.py``, ``api.py``) and passed down.

:class:`Runtime` holds what a build or a query needs besides its inputs and its typed config:
the device, the :class:`~gpurag.graph.backend.Backends` (the implementation of each
component, resolved once per device), the LLM settings, whether to show progress and the
embedding cache. Nothing below the edge reads the environment or a process-wide registry:
its settings come from :mod:`gpurag.settings` (the one reader of the environment), and each
build gets its own :class:`BuildRecord` of what actually ran.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpurag.device import resolve_device
from gpurag.settings import Settings, current, read

if TYPE_CHECKING:
    from gpurag.embed.base import Embedder
    from gpurag.graph.backend import Backends
    from gpurag.llm.config import LLMConfig


def read_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read :class:`~gpurag.settings.Settings` from ``environ`` (default: the process's)."""
    return current() if environ is None else read(environ)


CACHE_OFF = ("off", "0", "none", "false", "no")


class BuildRecord:
    """What one build (or one query batch) actually ran: component -> implementation.

    A new record per build, so two builds in one process never share entries; only what ran
    is recorded, never what was merely selected.
    """

    def __init__(self) -> None:
        self._used: dict[str, str] = {}

    def record(self, component: str, implementation: str) -> None:
        self._used[component] = str(implementation)

    def as_dict(self) -> dict[str, str]:
        return dict(self._used)


def implementation_name(obj: Any) -> str:
    """How a record names a component object: its ``implementation`` attribute when it has
    one, else its ``name``, else its class name."""
    for attr in ("implementation", "name"):
        value = getattr(obj, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(obj).__name__


@dataclass
class Runtime:
    """Device, backends, LLM settings, progress and embedding cache for builds and queries."""

    device: str
    backends: Backends
    progress: bool | None = None
    embed_cache: str | None = None
    gat_checkpoint: str | None = None
    llm_config: LLMConfig | None = None
    _embedders: dict[str, Embedder] = field(default_factory=dict, repr=False, init=False)

    @classmethod
    def create(cls, settings: Settings | None = None, *, device: str | None = None,
               progress: bool | None = None, llm: LLMConfig | None = None) -> Runtime:
        """A runtime from ``settings`` (default: :func:`read_settings`) and explicit choices,
        which win over the settings."""
        from gpurag.graph.backend import Backends

        s = read_settings() if settings is None else settings
        dev = resolve_device(device or s.device or "auto")
        return cls(device=dev, backends=Backends.for_device(dev),
                   progress=s.progress if progress is None else progress,
                   embed_cache=s.embed_cache, gat_checkpoint=s.gat_checkpoint, llm_config=llm)

    @property
    def llm(self) -> LLMConfig:
        """The LLM settings (``GPURAG_LLM_*`` when none were given; read on first use)."""
        if self.llm_config is None:
            from gpurag.llm.config import LLMConfig

            self.llm_config = LLMConfig.from_env()
        return self.llm_config

    def show_progress(self, requested: bool = True) -> bool | None:
        """Whether bars show: off when not ``requested`` or turned off, else the setting
        (``None``: only on a terminal)."""
        if not requested or self.progress is False:
            return False
        return self.progress

    def embed_cache_dir(self, default: str | os.PathLike | None = None) -> str | None:
        """The embedding cache folder: ``GPURAG_EMBED_CACHE``, else ``default`` (a build's
        own, beside its index); None when ``GPURAG_EMBED_CACHE`` is ``off`` (or 0, none)."""
        if self.embed_cache and self.embed_cache.strip().lower() in CACHE_OFF:
            return None
        return self.embed_cache or (str(default) if default is not None else None)

    def embedder(self, spec: str | None, cache: bool = True,
                 cache_dir: str | os.PathLike | None = None) -> Embedder:
        """The embedder ``spec`` on this device (loaded once per runtime), behind the
        embedding cache (:meth:`embed_cache_dir`) when ``cache`` (builds; queries pass
        False). A default cache that cannot be opened is skipped with a warning."""
        folder = self.embed_cache_dir(cache_dir) if cache else None
        raw_key = f"{spec or ''}\0"
        if raw_key not in self._embedders:
            self._embedders[raw_key] = self.backends.embedder(spec, device=self.device)
        if not folder:
            return self._embedders[raw_key]
        key = f"{raw_key}{folder}"
        if key not in self._embedders:
            self._embedders[key] = self._cached(self._embedders[raw_key], folder,
                                                explicit=bool(self.embed_cache))
        return self._embedders[key]

    @staticmethod
    def _cached(embedder: Embedder, folder: str, explicit: bool) -> Embedder:
        import sqlite3

        from gpurag.embed.cache import CachedEmbedder

        try:
            return CachedEmbedder(embedder, folder)
        except (OSError, sqlite3.Error) as exc:
            if explicit:
                from gpurag.errors import ConfigError

                raise ConfigError(f"GPURAG_EMBED_CACHE={folder}: cannot keep the embedding "
                                  f"cache there ({exc}); point it at a writable folder or "
                                  "unset it") from None
            logging.getLogger(__name__).warning(
                "embedding cache %s not used: %s", folder, exc)
            return embedder


__all__ = ["BuildRecord", "Runtime", "Settings", "implementation_name",
           "read_settings"]
