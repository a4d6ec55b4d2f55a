"""Progress bars (tqdm) on stderr; whether they show is the runtime's setting."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def progress_bar(total: int | None, desc: str, unit: str = "it",
                 show: bool | None = None) -> tqdm:
    """A tqdm bar on stderr: ``show=True`` forces it, ``False`` turns it off, ``None`` shows
    it only when stderr is a terminal (see :attr:`gpurag.runtime.Runtime.progress`)."""
    off = None if show is None else not show
    return tqdm(total=total, desc=desc, unit=unit, disable=off, file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1)
