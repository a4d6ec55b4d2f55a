"""The local push against power iteration on the reset matrices real graph queries hand the
walk (issue 26): CPU ms per question and how far the push's top passages agree.

The questions (bench/query.py's) run through the graph stages up to the walk, whose inputs
are recorded (``bench/walk_replay.py``'s capture); then the host PPR component
(:func:`gpurag.graph.ppr_top.host_ppr_topk`) answers each question alone, by power iteration
(the query's ``tol``) and by the push at each ``--eps``, each timed alike (a warm-up walk,
then the best of 2). Reported per eps: process CPU ms per question, overlap@10/20/60 of the
top passages with power iteration's (mean and worst question), and the largest gathered-score
difference relative to the question's top passage score.

Usage: python bench/walk_push.py --index DIR --size N [--questions 100] [--eps 3e-6,1e-5]
       [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO)]

import query as qbench  # noqa: E402
import walk_replay  # noqa: E402

from gpurag.graph.ppr_top import host_ppr_topk  # noqa: E402


def answer(graph, reset, kw: dict, method: str, eps: float) -> tuple[float, list]:
    """CPU ms per question and each question's PPRTop, one question per call."""
    ne, npsg = kw["n_ent"], kw["n_psg"]
    t = time.process_time()
    out = [host_ppr_topk(graph, reset[i:i + 1], k=kw["k"], lo=ne, hi=ne + npsg,
                         gather=kw["gather"][i:i + 1], damping=kw["damping"], tol=kw["tol"],
                         method=method, eps=eps) for i in range(reset.shape[0])]
    return 1e3 * (time.process_time() - t) / reset.shape[0], out


def overlap(a: np.ndarray, b: np.ndarray, k: int) -> list[float]:
    return [len(set(x[:k]) & set(y[:k])) / k for x, y in zip(a, b, strict=True)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--size", type=int, required=True, help="the prefix the index was built from")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--eps", default="3e-6,1e-5")
    ap.add_argument("--out")
    args = ap.parse_args()
    graph, calls = walk_replay.capture(args.index, args.size, 0, [args.questions])
    reset, kw = calls[args.questions][0]
    seeds = np.diff(reset.indptr)
    report = {"index": args.index, "nodes": graph.n_nodes, "edges": graph.n_edges,
              "questions": int(reset.shape[0]), "k": kw["k"], "damping": kw["damping"],
              "tol": kw["tol"], "seeds": {"min": int(seeds.min()), "mean": float(seeds.mean()),
                                          "max": int(seeds.max())},
              "machine": qbench.machine()}
    answer(graph, reset, kw, "power", 1e-6)  # warm-up: the per-graph operator, as for push
    runs = [answer(graph, reset, kw, "power", 1e-6) for _ in range(2)]
    ms, power = min(r[0] for r in runs), runs[0][1]
    p_ids = np.concatenate([t.ids for t in power])
    p_top = np.concatenate([t.values[:, :1] for t in power]).astype(np.float64)
    p_gat = np.concatenate([t.gathered for t in power])
    report["power_cpu_ms_per_question"] = ms
    report["push"] = {}
    for eps in [float(e) for e in args.eps.split(",")]:
        answer(graph, reset, kw, "push", eps)  # warm-up: the per-graph arrays
        runs = [answer(graph, reset, kw, "push", eps) for _ in range(2)]
        ms = min(r[0] for r in runs)
        ids = np.concatenate([t.ids for t in runs[0][1]])
        gat = np.concatenate([t.gathered for t in runs[0][1]])
        row = {"cpu_ms_per_question": ms,
               "gathered_max_rel_diff": float((np.abs(gat - p_gat) / np.maximum(p_top, 1e-30)
                                               ).max()) if gat.size else 0.0}
        for k in (10, 20, 60):
            ov = overlap(ids, p_ids, min(k, ids.shape[1]))
            row[f"overlap@{k}"] = {"mean": round(float(np.mean(ov)), 4),
                                   "min": round(float(np.min(ov)), 4)}
        report["push"][f"{eps:g}"] = row
        print(f"eps {eps:g}: {json.dumps(row)}", file=sys.stderr, flush=True)
    report["machine"]["load_avg_end"] = list(os.getloadavg())
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


if __name__ == "__main__":
    main()
