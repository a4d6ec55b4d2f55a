"""Insert documents into an index as a new version: the local update
(:mod:`gpurag.pipeline.incremental_local`) where the index allows it, else the exact one
(:mod:`gpurag.pipeline.incremental`). Above both, so neither imports the other to choose."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpurag.errors import InputError
from gpurag.pipeline import incremental_local as local
from gpurag.pipeline.incremental import UpdateResult, insert_exact
from gpurag.store import WriteLock, open_index_dir
from gpurag.store.diskio import naming

if TYPE_CHECKING:  # the runtime is built at the edge and passed down
    from gpurag.runtime import Runtime

log = logging.getLogger("gpurag.pipeline.incremental")  # the messages' logger, as before


def insert_documents(index: str | Path, sources: Sequence[str | Path],
                     *, runtime: Runtime, embedder: str | None = None,
                     show_progress: bool = True, exact: bool = False) -> UpdateResult:
    """Add the documents under ``sources`` to the index at ``index`` as a new version.

    Documents whose id is already in the index are skipped and reported (delete them first to
    replace them). ``embedder``: the embedder spec (the caller decides whether the one the
    manifest names is trusted). Nothing new: no new version.

    By default the update is local (:mod:`gpurag.pipeline.incremental_local`: its cost follows
    the new documents, its answers stay within a stated tolerance of a full build); ``exact``
    re-derives the graph over all chunks, so the version equals a full build byte for byte.
    Indexes a local update cannot serve (dense-only, no stored extraction, LLM extraction or
    descriptions) always take the exact path.
    """
    show = runtime.show_progress(show_progress)
    out = Path(index).resolve()
    sources = [Path(s) for s in sources]
    for s in sources:
        if not s.exists():
            raise InputError(f"insert source {s}: no such file or folder")
    with naming(out), WriteLock(out) as lock:
        if not exact:
            d = open_index_dir(out)
            try:
                why = local.why_not_local(d, local.stored_config(d))
                if why is None:
                    return local.insert_local(out, lock, d, sources, runtime, embedder, show)
                log.info("exact insert: %s", why)
            finally:
                d.close()
        return insert_exact(out, lock, sources, runtime, embedder, show)
