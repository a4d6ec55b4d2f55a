"""Progress bars (tqdm) that stay quiet when output is not a terminal or when disabled."""

from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm


def progress_bar(total: int | None, desc: str, unit: str = "it", disable: bool = False) -> tqdm:
    """A tqdm bar on stderr, shown when stderr is a terminal (``GPURAG_PROGRESS=1`` forces it,
    ``GPURAG_PROGRESS=0`` turns every bar off)."""
    setting = os.environ.get("GPURAG_PROGRESS", "")
    off: bool | None = True if (disable or setting == "0") else (False if setting == "1" else None)
    return tqdm(total=total, desc=desc, unit=unit, disable=off, file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1)
