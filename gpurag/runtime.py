"""One runtime, built at the edge (``cli.py``, ``api.py``, ``serve``, ``Memory``, ``eval``)
and passed down: the composition root.

:class:`Runtime` holds what a build or a query needs besides its inputs and its typed config:
the device, the part objects (embedder, searcher factory, kNN, PPR, Leiden, top-k, reranker,
table engine, LLM client; each resolved once for the device by :mod:`gpurag.backends`, each
replaceable by the user's own), the LLM settings, whether to show progress and the
embedding cache. Nothing below the edge reads the environment or a process-wide registry:
its settings come from :mod:`gpurag.settings` (the one reader of the environment), and each
build gets its own :class:`BuildRecord` of what actually ran.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpurag.backends.part import (
    PPR_WALK_KEYWORDS,
    BuildRecord,
    implementation_name,
    rejected_keywords,
)
from gpurag.device import resolve_device
from gpurag.settings import Settings
from gpurag.settings import read as read_settings  # environ, else the process's (cached)

if TYPE_CHECKING:
    from gpurag.embed.base import Embedder
    from gpurag.llm.config import LLMConfig


CACHE_OFF = ("off", "0", "none", "false", "no")


# The parts :func:`gpurag.backends.parts_for` resolves for a device (Runtime field names).
PARTS = ("embedders", "searcher", "knn", "ppr", "ppr_scores", "leiden", "topk", "tables",
         "rerankers", "query_walk")


@dataclass(frozen=True)
class _Resolved:
    """What a runtime resolved for ``key`` (device, GAT checkpoint): part name -> object."""

    key: tuple[str, str | None]
    parts: dict[str, Any]
    walk_off: bool


def _check_own_ppr(ppr: Any) -> None:
    """A user's PPR part takes every keyword the graph query's walk passes (else the first
    graph query would fail on it)."""
    bad = rejected_keywords(ppr, PPR_WALK_KEYWORDS)
    if bad:
        raise TypeError(f"the ppr part {implementation_name(ppr)} does not take the keyword(s) "
                        f"{', '.join(bad)} that graph queries pass (the PPR component's call "
                        f"shape: gpurag.backends)")


@dataclass
class Runtime:
    """The composition root: the device and every part a build or a query runs, each resolved
    once for the device (:mod:`gpurag.backends`), any of them replaceable by the user's own.

    ``Runtime.create(embedder=MyEmbedder())`` (or ``dataclasses.replace(rt, reranker=mine)``)
    makes every build and query of this runtime use that object:

    * ``embedder``: one :class:`~gpurag.embed.base.Embedder` for every spec (None: load the
      spec through ``embedders(spec)``);
    * ``searcher(index)``: what a query searches for a stored FAISS index;
    * ``knn(vectors, *, approximate_above=None)``: the build's kNN (alias candidates);
    * ``ppr`` (top-k to the host), ``ppr_scores`` (full output), ``leiden``, ``topk``;
    * ``reranker``: one reranker (``score(qvecs, cand, ppr_scores, dense)``) for every query
      that asks for one (None: ``rerankers(name, retriever, checkpoint)`` loads it);
    * ``tables``: the table engine; ``llm_client``: one LLM client (None: made from
      ``llm_config``, ``GPURAG_LLM_*`` by default);
    * ``query_walk``: the walk segment of graph queries on the device (PPR, fusion, top-k;
      :mod:`gpurag.backends.query_device`), None on the CPU (the NumPy stages). It replaces
      ``ppr`` in unreranked graph queries, so it is resolved only when ``ppr`` is not the
      user's own (``Runtime.create(ppr=mine)`` walks with ``mine``); ``query_walk=False``
      turns it off (stored as None).

    ``dataclasses.replace`` resolves again what the runtime resolved itself and the change
    bears on: ``replace(rt, ppr=mine)`` drops a resolved device walk (the query walks with
    ``mine``), a new ``device`` or ``gat_checkpoint`` resolves that device's parts; the
    user's own parts, and a walk turned off, stay as they were.
    """

    device: str = "cpu"
    embedder: Embedder | None = None
    embedders: Callable[[str | None], Embedder] | None = None
    searcher: Callable[[Any], Any] | None = None
    knn: Callable[..., Any] | None = None
    ppr: Callable[..., Any] | None = None
    ppr_scores: Callable[..., Any] | None = None
    leiden: Callable[..., Any] | None = None
    topk: Callable[..., Any] | None = None
    reranker: Any = None
    rerankers: Callable[..., Any] | None = None
    tables: Any = None
    llm_client: Any = None
    query_walk: Any = None
    progress: bool | None = None
    embed_cache: str | None = None
    gat_checkpoint: str | None = None
    llm_config: LLMConfig | None = None
    # what __post_init__ resolved (copied by dataclasses.replace, so a copy knows which parts
    # are derived and which are the user's own)
    _resolved: _Resolved | None = field(default=None, repr=False, compare=False)
    _embedders: dict[str, Embedder] = field(default_factory=dict, repr=False, init=False)

    def __post_init__(self) -> None:
        self.device = resolve_device(self.device)  # a device that is not there: DeviceError
        prior, self._resolved = self._resolved, None
        # off: the host stages, with the runtime's ppr (a copy of a runtime whose walk is
        # off keeps it off)
        walk_off = self.query_walk is False or (
            self.query_walk is None and prior is not None and prior.walk_off)
        if self.query_walk is False:
            self.query_walk = None
        if prior is not None:  # a copy: what the original resolved is derived, not the user's
            for name, part in prior.parts.items():
                if getattr(self, name) is part:
                    setattr(self, name, None)
        missing = [name for name in PARTS if getattr(self, name) is None]
        if "ppr" not in missing:  # the user's own: the walk's call shape, checked here
            _check_own_ppr(self.ppr)
        if walk_off or ("query_walk" in missing and "ppr" not in missing):
            missing.remove("query_walk")  # off, or the user's own ppr walks
        if missing:
            same = prior is not None and prior.key == (self.device, self.gat_checkpoint)
            resolved = prior.parts if same else {}
            if any(name not in resolved for name in missing):
                from gpurag.backends import parts_for

                resolved = {**parts_for(self.device, self.gat_checkpoint), **resolved}
            for name in missing:
                setattr(self, name, resolved[name])
        self._resolved = _Resolved((self.device, self.gat_checkpoint),
                                   {name: getattr(self, name) for name in missing}, walk_off)

    @classmethod
    def create(cls, settings: Settings | None = None, *, device: str | None = None,
               progress: bool | None = None, llm: LLMConfig | None = None,
               **parts: Any) -> Runtime:
        """A runtime from ``settings`` (default: :func:`read_settings`) and explicit choices,
        which win over the settings; ``parts``: the user's own parts (field names)."""
        s = read_settings() if settings is None else settings
        dev = resolve_device(device or s.device or "auto")
        from gpurag.vectors.faiss_setup import configure

        configure(s.cpu_threads())  # FAISS's thread count, once per process (FAISS not loaded)
        return cls(device=dev, progress=s.progress if progress is None else progress,
                   embed_cache=s.embed_cache, gat_checkpoint=s.gat_checkpoint,
                   llm_config=llm, **parts)

    def describe(self) -> dict[str, str]:
        """What each part is (``gpurag info``): the implementation this runtime holds."""
        return {
            "embed": implementation_name(self.embedder if self.embedder is not None
                                         else self.embedders),
            "vectors": implementation_name(self.searcher),
            "knn": implementation_name(self.knn),
            "ppr": implementation_name(self.ppr),
            "leiden": implementation_name(self.leiden),
            "topk": implementation_name(self.topk),
            "rerank": implementation_name(self.reranker if self.reranker is not None
                                          else self.rerankers),
            "tables": implementation_name(self.tables),
            "walk": (implementation_name(self.query_walk) if self.query_walk is not None
                     else "host stages (numpy, scipy)"),
            "llm": implementation_name(self.llm_client) if self.llm_client is not None
            else "LLMClient (OpenAI-compatible server, GPURAG_LLM_URL)",
        }

    def reranker_for(self, name: str, retriever: Any, checkpoint: Any = None) -> Any:
        """The reranker a query names (``"gat"``, ``"gat:PATH"``): the user's own
        ``reranker`` when set, else the one ``rerankers`` loads for ``retriever``."""
        if self.reranker is not None:
            return self.reranker
        return self.rerankers(name, retriever, checkpoint)

    def llm_client_for(self, config: LLMConfig | None = None) -> Any:
        """The user's own ``llm_client`` when set, else a new client of ``config`` (default
        :attr:`llm`)."""
        if self.llm_client is not None:
            return self.llm_client
        from gpurag.llm.client import LLMClient

        return LLMClient(config if config is not None else self.llm)

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

    def embedder_for(self, spec: str | None, cache: bool = True,
                     cache_dir: str | os.PathLike | None = None) -> Embedder:
        """The embedder of ``spec`` (the user's own ``embedder`` when set, whatever the spec;
        else ``embedders(spec)``, loaded once per runtime), behind the embedding cache
        (:meth:`embed_cache_dir`) when ``cache`` (builds; queries pass False). A default
        cache that cannot be opened is skipped with a warning."""
        folder = self.embed_cache_dir(cache_dir) if cache else None
        raw_key = f"{spec or ''}\0"
        if raw_key not in self._embedders:
            self._embedders[raw_key] = (self.embedder if self.embedder is not None
                                        else self.embedders(spec))
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


__all__ = ["PARTS", "BuildRecord", "Runtime", "Settings", "implementation_name",
           "read_settings"]
