"""The walk alone, main's solvers against the current ones, on the reset matrices real queries
hand it (issue 26): CPU ms per question in one process, the results compared bit for bit.

The questions (bench/query.py's) run through the graph query stages up to the walk, whose
inputs are recorded (the walk itself is skipped there); then the PPR component
(:func:`gpurag.graph.ppr_top.host_ppr_topk`) replays them, taking turns between the
solvers as they were before their per-call costs were cut (``tests/graph/ppr_before.py``) and
the current ones; times are process CPU time (the machine is shared: wall time is mostly
waiting), best of ``--reps``. Also reports each power-iteration row's iteration count.

Usage: python bench/walk_replay.py --index DIR --size N [--single 100] [--batches 64,1024]
       [--reps 3] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO)]

import query as qbench  # noqa: E402

from gpurag import Index  # noqa: E402
from gpurag.graph import ppr  # noqa: E402
from gpurag.graph.ppr_top import host_ppr_topk  # noqa: E402
from tests.graph import ppr_before as before  # noqa: E402


class _StopError(Exception):
    """Raised by the recorder in place of the walk."""


def capture(index_dir: str, size: int, single: int, batches: list[int]) -> tuple:
    """The walk's (reset, kwargs) per call: ``single`` one-question calls, then one call per
    batch size; and the graph."""
    import gpurag.query.graph as qg

    rows = qbench.write_prefix(qbench.DEFAULT_DATA, size, Path(f"/tmp/walk-{size}.jsonl"))
    questions = qbench.make_questions(rows, max([single, *batches]))
    got: list = []

    def record(ppr_fn, graph, reset, **kw):
        got.append((sp.csr_array(reset, copy=True), kw))
        raise _StopError

    real, qg.walk = qg.walk, record
    index = Index.open(index_dir)
    try:
        with index:
            def ask(qs):
                with contextlib.suppress(_StopError):
                    index.query_batch(qs, k=10, mode="graph")
            calls = {}
            for qq in questions[:single]:
                ask([qq])
            calls[1], got[:] = list(got), []
            for b in batches:
                ask(questions[:b])
                calls[b], got[:] = list(got), []
            graph = index.retriever.graph
    finally:
        qg.walk = real
    return graph, calls


def replay(graph, calls: list, reps: int) -> dict:
    def one(reset, kw):
        ne, npsg = kw["n_ent"], kw["n_psg"]
        return host_ppr_topk(graph, reset, k=min(kw["k"], npsg), lo=ne, hi=ne + npsg,
                             gather=kw["gather"], damping=kw["damping"], tol=kw["tol"],
                             method=kw["method"], local_fanout=kw["local_fanout"])

    solvers = {"before": (lambda g, r, d, t, m, dt, stats=None: before.old_power(g, r, d, t, m, dt),
                          before.old_normalized_reset),
               "now": (ppr._power, ppr._normalized_reset)}
    current = (ppr._power, ppr._normalized_reset)
    q = sum(c[0].shape[0] for c in calls)
    ms: dict = {k: [] for k in solvers}
    outs: dict = {}
    try:
        for _ in range(reps + 1):  # the first round warms the caches
            for name, (power, norm) in solvers.items():
                ppr._power, ppr._normalized_reset = power, norm
                c0 = time.process_time()
                outs[name] = [one(*c) for c in calls]
                ms[name].append(1e3 * (time.process_time() - c0) / q)
    finally:
        ppr._power, ppr._normalized_reset = current
    same = all(np.array_equal(getattr(a, f), getattr(b, f))
               for a, b in zip(outs["before"], outs["now"], strict=True)
               for f in ("values", "ids", "gathered"))
    r = ppr.normalized_reset(sp.vstack([c[0] for c in calls], format="csr"), graph.n_nodes)
    power_rows = np.flatnonzero(~ppr.push_rows(graph, r))
    stats: dict = {}
    if power_rows.size:
        kw = calls[0][1]
        ppr._power(graph, r[power_rows[:64]], kw["damping"], kw["tol"], 100,
                   np.dtype(np.float32), stats=stats)
    it = stats.get("iterations", np.zeros(1, int))
    return {"questions": q, "calls": len(calls),
            "cpu_ms_per_question": {k: min(v[1:]) for k, v in ms.items()},
            "identical": bool(same), "push_rows": int(r.shape[0] - power_rows.size),
            "power_rows": int(power_rows.size),
            "power_iterations": {"min": int(it.min()), "median": float(np.median(it)),
                                 "max": int(it.max())},
            "load_avg": list(os.getloadavg())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--size", type=int, required=True, help="the prefix the index was built from")
    ap.add_argument("--single", type=int, default=100)
    ap.add_argument("--batches", default="64,1024")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",") if b]
    graph, calls = capture(args.index, args.size, args.single, batches)
    report = {"index": args.index, "nodes": graph.n_nodes, "edges": graph.n_edges,
              "machine": qbench.machine(), "batches": {}}
    for b, c in calls.items():
        report["batches"][str(b)] = row = replay(graph, c, args.reps)
        print(f"batch {b}: {json.dumps(row)}", file=sys.stderr, flush=True)
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


if __name__ == "__main__":
    main()
