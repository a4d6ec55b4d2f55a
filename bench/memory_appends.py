"""Appends before / after in one run: the bench's fill (bench/memory.py's template traces and
precomputed vectors, ``add_many`` in batches of 1,000, CPU time of those calls) with two code
trees in turn, each fill in its own process, rounds interleaved and each round's order
alternated (the machine is shared: the load moves during a run, so the two versions see the
same load, and neither always runs first).

``--warm``: a full garbage collection before the timed appends. A fresh process has never
collected the objects its imports made, and the first full collection (~0.1 s on this
machine) falls inside the appends of a short fill; a long-running process has paid it before.

Usage: python bench/memory_appends.py BEFORE_TREE AFTER_TREE [--traces 10000] [--rounds 4]
       [--warm]    (a tree: a folder holding the gpurag package, e.g. a git worktree)
Prints one JSON object on stdout (per round, medians, load); progress on stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one(n: int, warm: bool) -> dict:
    import gpurag.memory  # the tree on PYTHONPATH (before bench/memory.py adds its own)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import memory as bench  # bench/memory.py

    from gpurag.memory import Memory

    traces = bench.texts(n)
    vecs = [bench.vectors(lo, min(n, lo + 1000)) for lo in range(0, n, 1000)]
    with tempfile.TemporaryDirectory() as tmp:
        mem = Memory.create(Path(tmp) / "m", embedder=bench._NoEmbedder())
        if warm:
            gc.collect()
        cpu = wall = 0.0
        for k, lo in enumerate(range(0, n, 1000)):
            c, w = time.process_time(), time.perf_counter()
            mem.add_many(traces[lo:lo + 1000], vectors=vecs[k])
            cpu += time.process_time() - c
            wall += time.perf_counter() - w
        mem.close()
    return {"code": str(Path(gpurag.memory.__file__).parents[2]), "traces": n,
            "cpu_traces_per_s": n / cpu, "wall_traces_per_s": n / wall,
            "load_1min": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before", nargs="?")
    ap.add_argument("after", nargs="?")
    ap.add_argument("--traces", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.traces, args.warm)))
        return
    trees = {"before": args.before, "after": args.after}
    rows: dict[str, list[dict]] = {k: [] for k in trees}
    out = {"bench": "memory_appends", "traces": args.traces, "warm": args.warm,
           "load_before": os.getloadavg()}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(trees)[::-1]  # neither always runs first
        for name in order:
            tree = trees[name]
            env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()), GPURAG_PROGRESS="0")
            cmd = [sys.executable, __file__, "--one", "--traces", str(args.traces)]
            res = subprocess.run(cmd + (["--warm"] if args.warm else []), env=env, check=True,
                                 stdout=subprocess.PIPE, text=True)
            row = json.loads(res.stdout.strip().splitlines()[-1])
            rows[name].append(row)
            print(f"round {r}: {name} {row['cpu_traces_per_s']:,.0f} traces/s CPU, load "
                  f"{row['load_1min']:.1f}", file=sys.stderr, flush=True)
    for name, got in rows.items():
        rates = [x["cpu_traces_per_s"] for x in got]
        out[name] = {"tree": trees[name], "rounds": got, "median_cpu_traces_per_s":
                     statistics.median(rates), "max_cpu_traces_per_s": max(rates)}
    out["after_over_before_median"] = (out["after"]["median_cpu_traces_per_s"]
                                       / out["before"]["median_cpu_traces_per_s"])
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
