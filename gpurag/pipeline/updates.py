"""``insert`` and ``delete``: each change under the index's write lock, local where it can be.

A local update (:mod:`~gpurag.pipeline.incremental_local` for inserts,
:mod:`~gpurag.pipeline.incremental_delete` for deletes) costs what the change touches and
answers within a stated tolerance of a full build; the exact path
(:mod:`~gpurag.pipeline.incremental`) re-derives the graph over all chunks, so the version
equals a full build byte for byte. Indexes a local update cannot serve (dense-only, no stored
extraction, LLM extraction or descriptions) always take the exact path.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpurag.errors import InputError
from gpurag.pipeline import incremental as inc
from gpurag.pipeline import incremental_local
from gpurag.pipeline.incremental import UpdateResult
from gpurag.store import WriteLock, open_index_dir
from gpurag.store.diskio import naming

if TYPE_CHECKING:  # the runtime is built at the edge and passed down
    from gpurag.runtime import Runtime

log = logging.getLogger(__name__)


def _why_not_local(d) -> str | None:
    """Why the opened version ``d`` cannot be updated locally (None: it can)."""
    return incremental_local.why_not_local(d, incremental_local.stored_config(d))


def insert_documents(index: str | Path, sources: Sequence[str | Path],
                     *, runtime: Runtime, embedder: str | None = None,
                     show_progress: bool = True, exact: bool = False) -> UpdateResult:
    """Add the documents under ``sources`` to the index at ``index`` as a new version.

    Documents whose id is already in the index are skipped and reported (delete them first to
    replace them). ``embedder``: the embedder spec (the caller decides whether the one the
    manifest names is trusted). Nothing new: no new version. Local unless ``exact``.
    """
    show = runtime.show_progress(show_progress)
    out = Path(index).resolve()
    paths = [Path(s) for s in sources]
    for s in paths:
        if not s.exists():
            raise InputError(f"insert source {s}: no such file or folder")
    with naming(out), WriteLock(out) as lock:
        d = open_index_dir(out)  # once: the local path reads it, the exact one loads it
        try:
            why = "asked for" if exact else _why_not_local(d)
            if why is None:
                return incremental_local.insert_local(out, lock, d, paths, runtime, embedder,
                                                      show)
            log.info("exact insert: %s", why)
            stored = inc.load_stored(d)
        finally:
            d.close()
        return inc.insert_locked(out, lock, stored, paths, runtime, embedder, show)


def delete_documents(index: str | Path, doc_ids: Sequence[str], *, runtime: Runtime,
                     embedder: str | None = None, show_progress: bool = True,
                     exact: bool = False) -> UpdateResult:
    """Remove the documents ``doc_ids`` (their chunks, vectors and everything only they
    supported) from the index at ``index`` as a new version. Ids not in the index are
    reported; none found is an error, and so is removing every document. Local unless
    ``exact``."""
    show = runtime.show_progress(show_progress)
    out = Path(index).resolve()
    wanted = list(dict.fromkeys(str(i) for i in doc_ids))
    if not wanted:
        raise InputError("delete: no document ids given")
    with naming(out), WriteLock(out) as lock:
        d = open_index_dir(out)
        try:
            why = "asked for" if exact else _why_not_local(d)
            if why is None:
                from gpurag.pipeline import incremental_delete

                return incremental_delete.delete_local(out, lock, d, wanted, runtime, show)
            log.info("exact delete: %s", why)
            stored = inc.load_stored(d)
        finally:
            d.close()
        return inc.delete_locked(out, lock, stored, wanted, runtime, embedder, show)
