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


def synthetic_merge(n_nodes: int, n_edges: int, shares: list[float], repeats: int = 3
                    ) -> list[dict]:
    """The merge on read alone (:func:`gpurag.graph.delta.merge`) over a random graph of
    ``n_nodes`` nodes (a fifth passages) and ``n_edges`` stored entries, with a delta of each
    share of the entries (half new pairs, half changed ones): median seconds of ``repeats``."""
    from gpurag.graph import delta as delta_mod
    from gpurag.graph.csr import build_csr

    rng = np.random.default_rng(0)
    g = build_csr(rng.integers(0, n_nodes, n_edges // 2), rng.integers(0, n_nodes, n_edges // 2),
                  None, n_nodes)
    n_ent = n_nodes * 4 // 5
    out = []
    for share in shares:
        m = max(int(share * g.n_edges), 1)
        rows = np.repeat(np.arange(g.n_nodes), np.diff(g.indptr))
        pick = rng.choice(g.n_edges, m // 2, replace=False)
        r = np.concatenate([rows[pick], rng.integers(0, n_nodes, m - m // 2)])
        c = np.concatenate([g.indices[pick].astype(np.int64), rng.integers(0, n_nodes,
                                                                           m - m // 2)])
        ok = r != c
        part = np.empty(int(ok.sum()), delta_mod.ENTRY)
        part["key"] = delta_mod.keys(r[ok], c[ok], n_ent)
        part["weight"] = 1.0
        part = delta_mod.union([part[np.argsort(part["key"])]])
        meta = {"base_entities": n_ent, "entities": n_ent, "passages": n_nodes - n_ent}
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            delta_mod.merge(g.indptr, g.indices, g.weights, meta, [part])
            times.append(time.perf_counter() - t0)
        out.append({"edges": int(g.n_edges), "delta_entries": int(part.size), "share": share,
                    "merge_s": round(float(np.median(times)), 4)})
        print(json.dumps(out[-1]), file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-deltas", type=Path, required=True)
    ap.add_argument("--without", type=Path, required=True)
    ap.add_argument("--single", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--synthetic", default="",
                    help="NODES,EDGES: also time the merge alone on a random graph this size "
                         "(148k enwiki: ~580000,4800000) with deltas of 0.1%%, 1%% and 12.5%%")
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
    if args.synthetic:
        n_nodes, n_edges = (int(x) for x in args.synthetic.split(","))
        report["synthetic_merge"] = synthetic_merge(n_nodes, n_edges, [0.001, 0.01, 0.125])
    report["load_avg_at_end"] = list(os.getloadavg())
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
