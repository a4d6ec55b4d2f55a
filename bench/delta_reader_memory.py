"""What a reader of an index with deltas holds: the graph and BM25 opened, trees A/B; prints JSON.

Opens the CSR graph (:func:`gpurag.graph.csr.load`, the merge on read) and the BM25 model
(bm25s' memory-mapped load, then :func:`gpurag.query.lexical_delta.with_delta`, the delta's
rescale: what :meth:`gpurag.query.lexical.BM25Index.load` does) of ``--index`` (e.g. a 50k
enwiki index after a local insert of 20 documents, built host-only by ``bench/incremental.py
--child``), in a fresh child process per tree (``--trees``: source checkouts, each run with
``PYTHONPATH`` set to it), ``--rounds`` times, alternating the trees. For each load it records,
with :mod:`tracemalloc` (numpy's buffers are traced): the bytes still held after it
(``held_mb``) and the most held during it (``peak_mb``, the merge's temporaries and the held
arrays), the growth of the process's RSS, the load's wall time, whether the arrays are
memory-mapped, and a digest of the merged arrays (each tree's must equal the first's). The load
average is recorded beside every round; ``process``: the RSS growth over the three loads, the RSS
before them and the process's peak RSS.

    python bench/delta_reader_memory.py --index /tmp/mp50/delta.index \
        --trees /work/wt/base /work/wt/mapped --rounds 3 --out bench/results/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import hashlib, json, os, sys, time, tracemalloc
import numpy as np

def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def digest(arrays):
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()[:16]

def mapped(a):
    return isinstance(a, np.memmap) or isinstance(getattr(a, "base", None), np.memmap) or (
        not a.flags.owndata and a.base is not None and type(a.base).__name__ == "mmap")

from gpurag.graph import csr
from gpurag.query.lexical_delta import with_delta
from gpurag.store import layout, open_index_dir

index = sys.argv[1]
d = open_index_dir(index)
lex_dir = d.file(layout.LEXICAL_DIR)
graph_dir = d.file(layout.GRAPH_DIR)
import bm25s  # imported before the measure
out = {}
import resource
rss_start = rss()
tracemalloc.start()
for name in ("graph", "bm25_model", "bm25_delta"):
    tracemalloc.reset_peak()
    before, r0, t0 = tracemalloc.get_traced_memory()[0], rss(), time.perf_counter()
    if name == "graph":
        g = csr.load(graph_dir, mmap=True)
        arrays = (g.indptr, g.indices, g.weights)
    elif name == "bm25_model":  # the stored model, memory-mapped (its vocabulary in memory)
        m = bm25s.BM25.load(str(lex_dir), mmap=True, show_progress=False)
        arrays = (m.scores["indptr"], m.scores["indices"], m.scores["data"])
    else:  # the delta applied (what BM25Index.load does next)
        m = with_delta(m, lex_dir)
        arrays = (m.scores["indptr"], m.scores["indices"], m.scores["data"])
    wall = time.perf_counter() - t0
    cur, peak = tracemalloc.get_traced_memory()
    out[name] = {"held_mb": round((cur - before) / 2**20, 2),
                 "peak_mb": round((peak - before) / 2**20, 2),
                 "rss_growth_mb": round((rss() - r0) / 2**20, 2), "load_s": round(wall, 3),
                 "mapped": [bool(mapped(a)) for a in arrays], "digest": digest(arrays),
                 "entries": int(arrays[1].size)}
tracemalloc.stop()
out["process"] = {"rss_growth_mb": round((rss() - rss_start) / 2**20, 2),
                  "rss_start_mb": round(rss_start / 2**20, 2),
                  "peak_rss_mb": round(
                      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 2)}
print(json.dumps(out))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--trees", type=Path, nargs="+", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rows: dict[str, list[dict]] = {str(t): [] for t in args.trees}
    for rnd in range(args.rounds):
        trees = args.trees if rnd % 2 == 0 else list(reversed(args.trees))
        for tree in trees:
            load = os.getloadavg()[0]
            proc = subprocess.run([sys.executable, "-c", CHILD, str(args.index)],
                                  env={**os.environ, "PYTHONPATH": str(tree),
                                       "GPURAG_PROGRESS": "0"},
                                  capture_output=True, text=True, check=True, cwd="/")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            row["round"], row["load_1min"] = rnd, round(load, 2)
            rows[str(tree)].append(row)
            print(json.dumps({str(tree): row}), file=sys.stderr)
    first = rows[str(args.trees[0])][0]
    report = {"bench": "delta-reader-memory", "index": str(args.index), "rounds": args.rounds,
              "same_arrays": all(r[k]["digest"] == first[k]["digest"]
                                 for rs in rows.values() for r in rs
                                 for k in ("graph", "bm25_delta")),
              "trees": rows}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
