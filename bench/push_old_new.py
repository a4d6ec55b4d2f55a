"""The local push of this checkout against another checkout's (``--old``, e.g. a detached
copy of main): bit-identity of the touched nodes, estimates and residuals, then CPU ms per
question, old and new taking turns in one process (issue 26).

The graph is bench/graph_algos.py's synthetic power-law graph at the size of the 148k-passage
index's node count (528,851 nodes; ``--edges`` undirected pairs before coalescing); the
questions push from 1-120 random seeds with random weights (damping 0.8, as the profile).

Usage: python bench/push_old_new.py --old /tmp/old/gpurag/graph/ppr.py [--eps 3e-6,1e-4,1e-3]
       [--questions 20] [--repeats 8] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO)]

from graph_algos import synthetic_graph  # noqa: E402

from gpurag.graph import ppr as new  # noqa: E402
from gpurag.graph.csr import build_csr  # noqa: E402


def load_old(path: str):
    spec = importlib.util.spec_from_file_location("old_ppr", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["old_ppr"] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True, help="the other checkout's gpurag/graph/ppr.py")
    ap.add_argument("--nodes", type=int, default=528_851)
    ap.add_argument("--edges", type=int, default=2_500_000)
    ap.add_argument("--eps", default="3e-6,1e-4,1e-3")
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--note", default="", help="the machine, in words (kept in the report)")
    ap.add_argument("--out")
    args = ap.parse_args()
    old = load_old(args.old)
    graph_seed, question_seed, damping = 1, 0, 0.8
    src, dst, w = synthetic_graph(args.nodes, args.edges, seed=graph_seed)
    g_new = build_csr(src, dst, w, args.nodes)
    g_old = copy.deepcopy(g_new)  # each module keeps its own per-graph arrays on its graph
    rng = np.random.default_rng(question_seed)
    questions = []
    for i in range(args.questions):
        s = rng.choice(args.nodes, size=int(rng.integers(1 if i % 2 else 40, 121)),
                       replace=False)
        questions.append(new._seed_arrays(args.nodes, s, rng.random(s.size)))
    eps_list = [float(e) for e in args.eps.split(",")]
    for eps in eps_list:
        for s, wt in questions:
            a = old._push_one(g_old, old._operator(g_old), s, wt, damping, eps)
            b = new._push_one(g_new, new._operator(g_new), s, wt, damping, eps)
            for x, y in zip(a, b, strict=True):
                if x.dtype != y.dtype or x.tobytes() != y.tobytes():
                    sys.exit(f"push results differ at eps {eps}")
    times: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(args.repeats):
        for name, mod, g in (("old", old, g_old), ("new", new, g_new)):
            op = mod._operator(g)
            t = time.process_time()
            for s, wt in questions:
                mod._push_one(g, op, s, wt, damping, eps_list[0])
            times[name].append((time.process_time() - t) * 1000 / len(questions))
    sizes = [int(s.size) for s, _ in questions]
    report = {"graph": {"nodes": g_new.n_nodes, "stored_edges": g_new.n_edges,
                        "edge_pairs_asked": args.edges, "rng_seed": graph_seed},
              "questions": {"count": len(questions), "rng_seed": question_seed,
                            "seeds_per_question": {"min": min(sizes), "max": max(sizes),
                                                   "median": float(np.median(sizes))},
                            "damping": damping},
              "turns": args.repeats,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "note": args.note},
              "identical_at_eps": eps_list, "timed_eps": eps_list[0],
              "cpu_ms_per_question": {k: {"min": min(v), "median": float(np.median(v))}
                                      for k, v in times.items()},
              "load_avg": list(os.getloadavg())}
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
