"""Progress: tqdm bars on a terminal; log lines everywhere else.

When stderr is not a terminal (a log file, nohup, CI), a bar becomes a :class:`LogProgress`:
one line when its stage starts, one every :data:`INTERVAL_S` seconds with the count, the rate
and the ETA, one line per named step and one when it ends, all through the
``gpurag.progress`` logger (which the command line shows at INFO unless ``--quiet``, as text
or, with ``--log-format json``, one JSON object a line). :func:`stage` logs a stage that has
no bar.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from tqdm.auto import tqdm

log = logging.getLogger("gpurag.progress")

INTERVAL_S = 30.0  # between periodic lines of a long stage (GPURAG_PROGRESS_INTERVAL)


def interval_s() -> float:
    """Seconds between periodic progress lines: ``GPURAG_PROGRESS_INTERVAL`` or 30."""
    from gpurag.settings import current

    interval = current().progress_interval
    return INTERVAL_S if interval is None else interval


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def stage(name: str, detail: str = "", show: bool | None = None, **fields: Any) -> None:
    """Log one line naming a stage of the work (nothing when ``show`` is False)."""
    if show is False:
        return
    log.info("%s%s", name, f": {detail}" if detail else "",
             extra={"progress": {"stage": name, **fields}})


class LogProgress:
    """A tqdm-like bar that logs lines instead of drawing: start, periodic, steps, end."""

    def __init__(self, total: int | None, desc: str, unit: str = "it") -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.n = 0
        self.postfix: dict[str, Any] = {}
        self._t0 = self._last = time.monotonic()
        self._start_n = 0
        self._interval = interval_s()
        self._closed = False
        of = f" of {total:,} {unit}" if total is not None else ""
        self._line("started" + of, event="start")

    def _line(self, message: str, event: str) -> None:
        elapsed = time.monotonic() - self._t0
        fields = {"stage": self.desc, "event": event, "done": self.n, "total": self.total,
                  "unit": self.unit, "elapsed_s": round(elapsed, 3), **self.postfix}
        rate = self.rate()
        if rate is not None:
            fields["rate_per_s"] = round(rate, 3)
        eta = self.eta_s()
        if eta is not None:
            fields["eta_s"] = round(eta, 1)
        log.info("%s: %s", self.desc, message, extra={"progress": fields})

    def rate(self) -> float | None:
        """Units a second since the bar started (None before any unit or time passed)."""
        elapsed = time.monotonic() - self._t0
        done = self.n - self._start_n
        return done / elapsed if done > 0 and elapsed > 0 else None

    def eta_s(self) -> float | None:
        """Seconds left at the current rate (None without a total or a rate)."""
        rate = self.rate()
        if self.total is None or rate is None:
            return None
        return max(0.0, (self.total - self.n) / rate)

    def _status(self) -> str:
        count = f"{self.n:,}" + (f"/{self.total:,}" if self.total is not None else "")
        parts = [f"{count} {self.unit}"]
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.0f}%)"
        rate = self.rate()
        if rate is not None:
            parts.append(f"{rate:,.1f} {self.unit}/s")
        eta = self.eta_s()
        if eta is not None:
            parts.append(f"ETA {_duration(eta)}")
        parts += [f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}"
                  for k, v in self.postfix.items()]
        return ", ".join(parts)

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if n and now - self._last >= self._interval and not self._closed:
            self._last = now
            self._line(self._status(), event="progress")

    def resumed(self, n: int) -> None:
        """Count ``n`` units done by an earlier run (not in the rate)."""
        self.n += n
        self._start_n += n

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True,
                    **kwargs: Any) -> None:
        self.postfix.update(ordered_dict or {}, **kwargs)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        """A named step of the stage: logged at once."""
        step = f"step {self.n + 1}/{self.total}: " if self.total else ""
        self._line(f"{step}{s}", event="step")

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc or self.desc

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        elapsed = time.monotonic() - self._t0
        rate = self.rate()
        tail = f" ({rate:,.1f} {self.unit}/s)" if rate is not None else ""
        extra = "".join(f", {k} {v:,}" if isinstance(v, int) else f", {k} {v}"
                        for k, v in self.postfix.items())
        self._line(f"done: {self.n:,} {self.unit} in {_duration(elapsed)}{tail}{extra}",
                   event="end")

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(total: int | None, desc: str, unit: str = "it",
                 show: bool | None = None) -> Any:
    """A tqdm bar on stderr: ``show=True`` forces it, ``False`` turns it off, ``None`` shows
    it only when stderr is a terminal and logs :class:`LogProgress` lines otherwise (see
    :attr:`gpurag.runtime.Runtime.progress`)."""
    if show is None and not _stderr_is_terminal() and not _in_notebook():
        return LogProgress(total, desc, unit)
    return tqdm(total=total, desc=desc, unit=unit, disable=not show if show is not None
                else False, file=sys.stderr, dynamic_ncols=True, smoothing=0.1)


def _in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (tqdm draws a widget there; stderr is no tty)."""
    return "ipykernel" in sys.modules


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
