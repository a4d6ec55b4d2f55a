"""Per-question cost of a query with confidence and evidence chains deferred, against the
eager code before it (a checkout on ``PYTHONPATH``), in the same run.

Each version answers the same questions one at a time (``--modes``); rounds alternate between
the two versions (separate processes, so both see the same load) and the report gives, per
mode, the p50 milliseconds per question of: the query alone (passages only: what a caller who
never reads ``confidence``/``chains`` pays), the query with both read (what the CLI, JSON
and HTTP pay), the ratio before/after, and the confidence and evidence stages' own time
(``timings_ms``, when read). It also checks that the ranked chunks, and the
chains, are identical between the versions.

Usage: python bench/query_deferred.py INDEX QUESTIONS.jsonl --before DIR [--n 60]
       [--rounds 3] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, sys, time
from dataclasses import asdict
from gpurag import Index
index_path, qfile, n, modes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
qs = [json.loads(l)["question"] for l in open(qfile, encoding="utf-8") if l.strip()][:n]
index = Index.open(index_path)
for m in modes:  # warm: searchers, BM25, evidence arrays
    [r.chains for r in index.query_batch(qs[:2], k=5, mode=m)]
    [r.confidence for r in index.query_batch(qs[:2], k=5, mode=m)]
out = {}
for m in modes:
    alone, read, ranks, chains, conf_ms, ev_ms = [], [], [], [], [], []
    for q in qs:
        t0 = time.perf_counter()
        r = index.query(q, k=5, mode=m)
        alone.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        r = index.query(q, k=5, mode=m)
        c, ch = r.confidence, r.chains
        read.append((time.perf_counter() - t0) * 1000)
        ranks.append(r.chunk_ids)
        conf_ms.append(r.timings_ms.get("confidence", 0.0))
        ev_ms.append(r.timings_ms.get("evidence", 0.0))
        chains.append([asdict(x) for x in ch])
    out[m] = {"alone": alone, "read": read, "ranks": ranks, "chains": chains,
              "confidence_ms": conf_ms, "evidence_ms": ev_ms}
print(json.dumps(out))
"""


def run(pythonpath: str, index: str, qfile: str, n: int, modes: str) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath, "GPURAG_PROGRESS": "0"}
    done = subprocess.run([sys.executable, "-c", WORKER, index, qfile, str(n), modes],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("index")
    ap.add_argument("questions")
    ap.add_argument("--before", required=True, help="folder holding the earlier gpurag/")
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="dense,graph")
    ap.add_argument("--out")
    args = ap.parse_args()
    load0 = os.getloadavg()
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(args.rounds):
        for name, path in (("before", args.before), ("after", str(REPO))):
            t0 = time.perf_counter()
            runs[name].append(run(path, args.index, args.questions, args.n, args.modes))
            print(f"round {i + 1} {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    report: dict = {"date": time.strftime("%Y-%m-%d"), "index": args.index, "n": args.n,
                    "rounds": args.rounds, "modes": {}, "machine": {
                        "cpu": f"{platform.machine()}, {os.cpu_count()} cores",
                        "load_1_5_15_start": [round(v, 1) for v in load0],
                        "load_1_5_15_end": [round(v, 1) for v in os.getloadavg()]}}
    for m in args.modes.split(","):
        row: dict = {}
        for name in runs:
            for kind in ("alone", "read"):
                row[f"{name}_{kind}_p50_ms"] = float(np.median(
                    np.concatenate([r[m][kind] for r in runs[name]])))
        for kind in ("confidence_ms", "evidence_ms"):  # the stage's own time when read
            for name in runs:
                row[f"{name}_{kind}_p50"] = float(np.median(
                    np.concatenate([r[m][kind] for r in runs[name]])))
        row["ratio_alone"] = row["before_alone_p50_ms"] / row["after_alone_p50_ms"]
        row["ratio_read"] = row["before_read_p50_ms"] / row["after_read_p50_ms"]
        before, after = runs["before"][0][m], runs["after"][0][m]
        row["same_ranks"] = before["ranks"] == after["ranks"]
        row["same_chains"] = before["chains"] == after["chains"]
        report["modes"][m] = row
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
