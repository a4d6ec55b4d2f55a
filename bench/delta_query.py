"""What a local insert's graph and BM25 deltas cost readers (issue 34): an index with deltas
against the same index compacted (no deltas), alternating, same questions.

Per index: the open (``Index.open`` and the first graph question: where the CSR delta is merged
and the BM25 delta appended), the merge alone (``csr.load`` of the graph folder, the BM25
model's load), and single-question graph-mode p50/p95 over ``--single`` questions made from
passage titles (bench/query.py's ``make_questions``), ``--rounds`` rounds taking turns.

    python bench/delta_query.py --with-deltas /tmp/delta50/local.index \
        --without /tmp/delta50/local-compacted.index --out bench/results/....json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def _load_times(path: Path) -> dict:
    from gpurag.graph import csr as csr_mod
    from gpurag.query.lexical import BM25Index
    from gpurag.store import open_index_dir

    d = open_index_dir(path)
    try:
        t0 = time.perf_counter()
        g = csr_mod.load(d.file("graph"))
        t_graph = time.perf_counter() - t0
        n = int(d.manifest.counts["chunks"])
        t0 = time.perf_counter()
        BM25Index.load(d.file("lexical"), n)
        t_bm25 = time.perf_counter() - t0
        return {"graph_load_s": round(t_graph, 4), "bm25_load_s": round(t_bm25, 4),
                "graph_edges": int(g.n_edges),
                "delta_files": sorted(r for r in d.manifest.files if "delta" in r)}
    finally:
        d.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-deltas", type=Path, required=True)
    ap.add_argument("--without", type=Path, required=True)
    ap.add_argument("--single", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from query import make_questions
    from scale import host_only_runtime

    from gpurag import Index

    runtime = host_only_runtime("cpu")  # the stand-in embedder the host-only indexes use
    paths = {"with_deltas": args.with_deltas, "without": args.without}
    report: dict = {"bench": "delta-query", "load_avg_at_start": list(os.getloadavg()),
                    "indexes": {k: str(v) for k, v in paths.items()}, "rounds": []}
    with Index.open(args.without, runtime=runtime) as idx:
        rows = idx.chunks[["title", "text"]].to_dict("records")
    questions = make_questions(rows, args.single)
    times: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(args.rounds):
        row = {}
        for name, path in paths.items():
            load = _load_times(path)
            t0 = time.perf_counter()
            idx = Index.open(path, runtime=runtime)
            idx.query(questions[0], mode="graph")
            load["open_and_first_query_s"] = round(time.perf_counter() - t0, 3)
            for q in questions:
                t0 = time.perf_counter()
                idx.query(q, mode="graph")
                times[name].append(time.perf_counter() - t0)
            idx.close()
            row[name] = load
        row["load_avg"] = list(os.getloadavg())
        report["rounds"].append(row)
        print(json.dumps(row), file=sys.stderr)
    report["single_graph_ms"] = {
        name: {"p50": round(1e3 * float(np.percentile(t, 50)), 2),
               "p95": round(1e3 * float(np.percentile(t, 95)), 2), "n": len(t)}
        for name, t in times.items()}
    report["load_avg_at_end"] = list(os.getloadavg())
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
