"""PNG plots of the benchmark results: one ``NAME.png`` next to each ``NAME.json``.

    python bench/plot.py                       # every JSON under bench/results/
    python bench/plot.py bench/results/scale_2026-11-30_cpu.json [more files or folders]

Kinds recognised by their content: ``scale`` (bench/scale.py: build passages/s and peak memory
against corpus size, query latency against graph size and batch), ``gpu_bench``
(bench/gpu_bench.py: PPR and kNN ms/query against batch), ``serve_load`` (bench/serve_load.py),
``llm_clients`` (bench/llm_clients.py) and ``eval`` (``gpurag eval --json``). Files of another
kind found in a folder are skipped with a note; a file named on the command line that cannot be
plotted, or a malformed result of a known kind, is an error (exit status 1). Needs matplotlib
(``pip install 'gpurag[viz]'``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpurag.errors import ConfigError  # noqa: E402
from gpurag.eval.plot import PlotError, grouped_bars, new_figure, plot_eval, save_png  # noqa: E402

GiB = 2**30
SIZES = {"scale": (13.0, 9.0), "gpu_bench": (13.0, 5.0), "serve_load": (11.0, 4.5),
         "llm_clients": (13.0, 5.0)}


def kind_of(data: Any) -> str | None:
    """Which benchmark wrote ``data`` (None when unknown)."""
    if not isinstance(data, Mapping):
        return None
    if "build" in data and "graph" in data:
        return "scale"
    if "ppr" in data and "knn" in data:
        return "gpu_bench"
    if "runs" in data and "throughput_ratio_on_off" in data:
        return "serve_load"
    if "scenarios" in data and "versions" in data:
        return "llm_clients"
    if "modes" in data and "questions" in data:
        return "eval"
    return None


def _rows(data: Mapping, key: str, need: tuple[str, ...], source: str) -> list[dict]:
    """The rows of ``data[key]`` that carry ``need`` (failed or skipped cases are left out)."""
    rows = data.get(key)
    if not isinstance(rows, list):
        raise PlotError(f"{source}: cannot plot: {key!r} is not a list")
    return [r for r in rows if isinstance(r, Mapping) and all(k in r for k in need)]


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this result", ha="center", va="center",
            transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _log_if_wide(ax, xs: list[float]) -> None:
    """Log x axis for wide ranges; a single x value gets one plain tick."""
    if xs and min(xs) > 0 and max(xs) / min(xs) >= 20:
        ax.set_xscale("log")
    elif len(set(xs)) == 1:
        ax.set_xticks([xs[0]], [f"{xs[0]:,.0f}"])


def _count(n: float) -> str:
    """1234567 -> '1.23M', 100000 -> '100k'."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"


def _graph_label(g: Mapping) -> str:
    return f"{_count(g['edges'])} edges, {_count(g['nodes'])} nodes"


def plot_scale(data: Mapping, fig, source: str) -> None:
    builds = sorted(_rows(data, "build", ("passages", "passages_per_s", "peak_rss_bytes"), source),
                    key=lambda r: r["passages"])
    graphs = sorted(_rows(data, "graph", ("edges", "nodes", "ppr"), source),
                    key=lambda r: r["edges"])
    if not builds and not graphs:
        raise PlotError(f"{source}: cannot plot: no build or graph case finished")
    (a_rate, a_mem), (a_batch, a_size) = fig.subplots(2, 2)
    if builds:
        xs = [b["passages"] for b in builds]
        a_rate.plot(xs, [b["passages_per_s"] for b in builds], "o-", lw=2.5, color="black",
                    label="whole build")
        stages = sorted({s for b in builds for s in b.get("stages", {})})
        for s in stages:
            ys = [b.get("stages", {}).get(s, {}).get("passages_per_s") for b in builds]
            pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y]
            if pts:
                a_rate.plot(*zip(*pts, strict=True), "o--", lw=1, label=s)
        a_rate.set_yscale("log")
        _log_if_wide(a_rate, xs)
        a_rate.set_title("index build throughput")
        a_rate.set_xlabel("corpus size (passages)")
        a_rate.set_ylabel("passages per second (log)")
        a_rate.legend(fontsize=7, ncol=2)
        a_mem.plot(xs, [b["peak_rss_bytes"] / GiB for b in builds], "o-", label="peak RSS (host)")
        if any("peak_device_bytes" in b for b in builds):
            a_mem.plot(xs, [b.get("peak_device_bytes", 0) / GiB for b in builds], "s-",
                       label="peak device memory")
        if all("index_bytes" in b for b in builds):
            a_mem.plot(xs, [b["index_bytes"] / GiB for b in builds], "^--",
                       label="index on disk")
        _log_if_wide(a_mem, xs)
        a_mem.set_ylim(bottom=0)
        a_mem.set_title("memory during the build")
        a_mem.set_xlabel("corpus size (passages)")
        a_mem.set_ylabel("GiB")
        a_mem.legend(fontsize=8)
    else:
        _empty(a_rate, "finished build case")
        _empty(a_mem, "finished build case")
    if graphs:
        batches: set[int] = set()
        for g in graphs:
            for key, style in (("ppr", "o-"), ("knn", "s--")):
                rows = sorted(g.get(key, []), key=lambda r: r["q"])
                if rows:
                    batches.update(r["q"] for r in rows)
                    label = (f"PPR + top-10, {_graph_label(g)}" if key == "ppr" else
                             f"kNN, {_count(rows[0].get('n', g['nodes']))} x 384-d vectors")
                    a_batch.plot([r["q"] for r in rows], [r["per_query_p50_ms"] for r in rows],
                                 style, label=label)
        _log_if_wide(a_batch, sorted(batches))
        a_batch.set_yscale("log")
        a_batch.set_title("query latency against batch size (p50)")
        a_batch.set_xlabel("queries per batch")
        a_batch.set_ylabel("ms per query (log)")
        a_batch.legend(fontsize=7)
        edges = [g["edges"] for g in graphs]
        for q in sorted(batches):
            ys = [next((r["per_query_p50_ms"] for r in g["ppr"] if r["q"] == q), None)
                  for g in graphs]
            pts = [(x, y) for x, y in zip(edges, ys, strict=True) if y is not None]
            if pts:
                a_size.plot(*zip(*pts, strict=True), "o-", label=f"batch of {q}")
        _log_if_wide(a_size, edges)
        if len(set(edges)) > 1:
            from matplotlib.ticker import EngFormatter

            a_size.xaxis.set_major_formatter(EngFormatter())
        a_size.set_yscale("log")
        a_size.set_title("PPR + top-10 latency against graph size (p50)")
        a_size.set_xlabel("graph edges (stored)")
        a_size.set_ylabel("ms per query (log)")
        a_size.legend(fontsize=8)
    else:
        _empty(a_batch, "finished graph case")
        _empty(a_size, "finished graph case")
    machine = data.get("machine") or {}
    where = machine.get("gpu") or f"{machine.get('cpu', '?')} ({machine.get('cpu_count')} cpus)"
    fig.suptitle(f"gpurag scale, {data.get('device', '?')}: {where}, {str(data.get('date'))[:10]}")


def plot_gpu_bench(data: Mapping, fig, source: str) -> None:
    ax_ppr, ax_knn = fig.subplots(1, 2)
    drawn = False
    for key, style, who in (("ppr", "o-", "GPU"), ("ppr_cpu", "s--", "CPU")):
        rows = _rows(data, key, ("n", "q", "ms_per_query"), source) if key in data else []
        for n in sorted({r["n"] for r in rows}):
            pts = sorted((r["q"], r["ms_per_query"]) for r in rows if r["n"] == n)
            ax_ppr.plot(*zip(*pts, strict=True), style, label=f"{who}, {n:,} nodes")
            drawn = True
    knn = _rows(data, "knn", ("n", "q", "ms_per_query"), source)
    for dev in sorted({str(r.get("device", "gpu")) for r in knn}):
        for n in sorted({r["n"] for r in knn if str(r.get("device", "gpu")) == dev}):
            pts = sorted((r["q"], r["ms_per_query"]) for r in knn
                         if r["n"] == n and str(r.get("device", "gpu")) == dev)
            ax_knn.plot(*zip(*pts, strict=True), "o-", label=f"{dev}, {n:,} vectors")
            drawn = True
    if not drawn:
        raise PlotError(f"{source}: cannot plot: no PPR or kNN row")
    for ax, title in ((ax_ppr, "personalized PageRank"), (ax_knn, "exact kNN")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{title}: latency against batch size")
        ax.set_xlabel("queries per batch")
        ax.set_ylabel("ms per query (log)")
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(f"gpurag GPU bench: {data.get('device', '?')}, {str(data.get('date'))[:10]}")


def plot_serve_load(data: Mapping, fig, source: str) -> None:
    runs = _rows(data, "runs", ("batching", "throughput_rps", "p50_ms", "p99_ms"), source)
    if not runs:
        raise PlotError(f"{source}: cannot plot: no finished run")
    names = [f"batching {'on' if r['batching'] else 'off'}" for r in runs]
    ax_t, ax_l = fig.subplots(1, 2)
    grouped_bars(ax_t, names, {"throughput": [r["throughput_rps"] for r in runs]})
    ax_t.set_title("query service throughput")
    ax_t.set_xlabel("server-side request batching")
    ax_t.set_ylabel("requests per second")
    grouped_bars(ax_l, names, {"p50": [r["p50_ms"] for r in runs],
                               "p99": [r["p99_ms"] for r in runs]})
    ax_l.set_title("request latency")
    ax_l.set_xlabel("server-side request batching")
    ax_l.set_ylabel("ms per request")
    ax_l.legend()
    fig.suptitle(serve_load_title(data), fontsize=10)


def serve_load_title(data: Mapping) -> str:
    """The serve-load figure's title: its conclusion (batching on/off throughput) with the
    conditions it holds under (clients, cpus, embedder threads, machine load, date)."""
    args = data.get("args") or {}
    threads = args.get("threads")
    load = data.get("loadavg_1m_before_after") or []
    ratio = data.get("throughput_ratio_on_off")
    verdict = (f"batching on/off throughput x{ratio:.2f}" if isinstance(ratio, int | float)
               else "batching on vs off")
    conditions = [f"{args.get('clients', '?')} clients", f"{data.get('cpu_count', '?')} cpus",
                  f"embedder threads {threads}" if threads else "embedder threads: all cores"]
    if len(load) == 2:
        conditions.append(f"load avg {load[0]:.1f}->{load[1]:.1f}")
    conditions.append(str(data.get("date"))[:10])
    return f"gpurag serve under load: {verdict} ({', '.join(conditions)})"


def plot_llm_clients(data: Mapping, fig, source: str) -> None:
    sc = data.get("scenarios")
    if not isinstance(sc, Mapping) or not sc:
        raise PlotError(f"{source}: cannot plot: no scenario")
    clients = ("gpurag", "openai")
    for name, row in sc.items():
        if not (isinstance(row, Mapping) and all(isinstance(row.get(c), Mapping)
                                                 and "wall_s" in row[c] for c in clients)):
            raise PlotError(f"{source}: cannot plot: scenario {name!r} lacks gpurag/openai rows")
    ax_t, ax_f = fig.subplots(1, 2)
    good = [n for n in ("llama_cpp", "fake_ok") if n in sc]
    faults = [n for n in sc if n not in good]
    if good:
        grouped_bars(ax_t, good, {c: [sc[n][c]["requests_per_s"] for n in good]
                                  for c in clients})
        ax_t.set_title("throughput (answered requests)")
        ax_t.set_xlabel("server")
        ax_t.set_ylabel("requests per second")
        ax_t.legend(title="client")
    else:
        _empty(ax_t, "throughput scenario")
    if faults:
        grouped_bars(ax_f, faults, {c: [sc[n][c]["wall_s"] for n in faults] for c in clients})
        ax_f.set_title("time until every request succeeded or failed")
        ax_f.set_xlabel("injected fault")
        ax_f.set_ylabel("seconds")
        ax_f.legend(title="client")
    else:
        _empty(ax_f, "fault scenario")
    args = data.get("args") or {}
    fig.suptitle(f"openai vs gpurag LLM client: {args.get('inflight', '?')} in flight, "
                 f"{str(data.get('date'))[:10]}")


PLOTTERS: dict[str, Callable[[Mapping, Any, str], None]] = {
    "scale": plot_scale, "gpu_bench": plot_gpu_bench, "serve_load": plot_serve_load,
    "llm_clients": plot_llm_clients}


def plot_file(path: str | Path, out: str | Path | None = None) -> Path:
    """Plot one result JSON to ``out`` (default: the same name with ``.png``)."""
    path = Path(path)
    out = Path(out) if out else path.with_suffix(".png")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlotError(f"{path}: cannot plot: not readable JSON ({exc})") from exc
    kind = kind_of(data)
    if kind is None:
        raise PlotError(f"{path}: cannot plot: not a result of a known benchmark "
                        f"(known: {', '.join([*PLOTTERS, 'eval'])})")
    if kind == "eval":
        return plot_eval(data, out, source=str(path))
    fig = new_figure(SIZES[kind])
    PLOTTERS[kind](data, fig, str(path))
    fig.tight_layout()
    return save_png(fig, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=[str(REPO / "bench" / "results")],
                    help="result JSON files or folders of them (default: bench/results)")
    args = ap.parse_args(argv)
    failed = 0
    for arg in map(Path, args.paths):
        named = not arg.is_dir()
        for path in sorted(arg.glob("*.json")) if arg.is_dir() else [arg]:
            try:
                data = _load_quietly(path)
                if not named and data is not _UNREADABLE and kind_of(data) is None:
                    print(f"skipped {path}: not a result of a known benchmark")
                    continue
                print(f"wrote {plot_file(path)}")
            except (PlotError, ConfigError) as exc:
                print(f"bench/plot.py: error: {exc}", file=sys.stderr)
                failed += 1
    return 1 if failed else 0


_UNREADABLE = object()


def _load_quietly(path: Path) -> Any:
    """The JSON in ``path``, or ``_UNREADABLE`` (then ``plot_file`` reports why)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return _UNREADABLE


if __name__ == "__main__":
    sys.exit(main())
