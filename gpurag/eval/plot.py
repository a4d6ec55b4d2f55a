"""PNG plots of an evaluation result (``gpurag eval --plot``) and shared plotting helpers.

matplotlib is an optional extra (``pip install 'gpurag[viz]'``); figures are drawn with the
Agg canvas directly, so no display and no pyplot global state are involved.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpurag.errors import ConfigError, GpuragError

DPI = 100
EVAL_FIGSIZE = (15.0, 5.0)  # inches: 1500 x 500 pixels at DPI
EVAL_METRICS = (("recall@2", "R@2"), ("recall@5", "R@5"), ("all_gold@8", "all gold @8"))


class PlotError(GpuragError):
    """A result file cannot be plotted (empty, malformed, or of an unknown kind)."""


def new_figure(figsize: tuple[float, float]):
    """A matplotlib Figure on an Agg canvas (ConfigError when matplotlib is missing)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ConfigError("plots need matplotlib: pip install 'gpurag[viz]'") from exc
    fig = Figure(figsize=figsize, dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def require_matplotlib() -> None:
    """Fail early (before a long run) when plots were asked for but cannot be drawn."""
    new_figure((1.0, 1.0))


def save_png(fig, out: str | Path) -> Path:
    """Write ``fig`` as PNG to ``out`` atomically (temporary file, then rename)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # open() rather than mkstemp: the file gets the usual umask permissions, not 0600
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fig.savefig(fh, format="png", dpi=DPI)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


def grouped_bars(ax, groups: Sequence[str], series: Mapping[str, Sequence[float]]) -> None:
    """Bars of each series side by side per group, values printed on top."""
    n = max(len(series), 1)
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values, width, label=name)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
    ax.set_xticks(range(len(groups)), groups)


def _need(cond: bool, source: str, what: str) -> None:
    if not cond:
        raise PlotError(f"{source}: cannot plot: {what}")


def check_eval_result(result: Any, source: str = "eval result") -> dict[str, dict]:
    """The usable ``modes`` of a ``gpurag eval`` result, or a PlotError naming what is wrong."""
    _need(isinstance(result, Mapping), source, "not a JSON object")
    modes = result.get("modes")
    _need(isinstance(modes, Mapping), source, "no 'modes' object (is it a gpurag eval result?)")
    unavailable = result.get("unavailable") or {}
    _need(bool(modes), source, "no mode was evaluated"
          + (f" (unavailable: {', '.join(unavailable)})" if unavailable else ""))
    for mode, row in modes.items():
        _need(isinstance(row, Mapping), source, f"mode {mode!r} is not an object")
        for key, _ in EVAL_METRICS:
            _need(isinstance(row.get(key), int | float), source,
                  f"mode {mode!r} has no numeric {key!r}")
        for part in ("by_hops", "by_type"):
            _need(isinstance(row.get(part, {}), Mapping), source,
                  f"mode {mode!r}: {part!r} is not an object")
    return dict(modes)


def _breakdown_panel(ax, modes: dict[str, dict], part: str, label: str) -> bool:
    """recall@5 per group of ``part`` (by_hops / by_type) per mode; False when there is none."""
    keys = sorted({k for row in modes.values() for k in row.get(part, {})},
                  key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k))
    if not keys:
        return False
    sizes = {k: next(row[part][k].get("n", 0) for row in modes.values() if k in row.get(part, {}))
             for k in keys}
    names = [f"{k} hops\n(n={sizes[k]})" if part == "by_hops" else f"{k or '?'}\n(n={sizes[k]})"
             for k in keys]
    grouped_bars(ax, names, {m: [row.get(part, {}).get(k, {}).get("recall@5", 0.0) for k in keys]
                             for m, row in modes.items()})
    ax.set_title(f"recall@5 by {label}")
    ax.set_xlabel(label)
    ax.set_ylabel("recall@5 (share of gold passages in top 5)")
    ax.set_ylim(0, 1.1)
    ax.legend(title="mode", fontsize=8)
    return True


def plot_eval(result: Any, out: str | Path, source: str = "eval result") -> Path:
    """Draw a ``gpurag eval`` result: R@2/R@5/all-gold@8 per mode, recall@5 by hops and type."""
    modes = check_eval_result(result, source)
    fig = new_figure(EVAL_FIGSIZE)
    axes = fig.subplots(1, 3)
    grouped_bars(axes[0], list(modes), {label: [row[key] for row in modes.values()]
                                        for key, label in EVAL_METRICS})
    axes[0].set_title("retrieval quality per mode")
    axes[0].set_xlabel("retrieval mode")
    axes[0].set_ylabel("score (0-1)")
    axes[0].set_ylim(0, 1.1)
    axes[0].legend(title="metric", fontsize=8)
    if not _breakdown_panel(axes[1], modes, "by_hops", "hops"):
        axes[1].set_axis_off()
    if not _breakdown_panel(axes[2], modes, "by_type", "question type"):
        axes[2].set_axis_off()
    counts = (result.get("index") or {}).get("counts") or {}
    fig.suptitle(f"gpurag eval: {result.get('dataset', '?')} ({result.get('n_questions', '?')} "
                 f"questions, {counts.get('documents', '?')} passages)")
    fig.tight_layout()
    return save_png(fig, out)
