"""The shared data folder (``shared/data``, read-only; its README gives the format), found
relative to this repository: beside it (``/work/main`` -> ``/work/shared/data``) or one level
further up (a git worktree such as ``/work/wt/NAME``). Bench scripts import it with bench/ on
``sys.path`` (a script's own folder is)."""

from __future__ import annotations

from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
_CANDIDATES = (_REPO.parent / "shared" / "data", _REPO.parents[1] / "shared" / "data")
# the first that exists, else the one beside the repository (a clear "not found" path)
SHARED_DATA = next((p for p in _CANDIDATES if p.is_dir()), _CANDIDATES[0])
