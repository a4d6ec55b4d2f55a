"""What a local delete writes, old tree against new, same run (issue 34); prints JSON.

Takes an index (``--index``: e.g. ``exact.index`` of ``bench/incremental.py --passages ...
--host-only``, the base with ``--new`` passages inserted) and the documents to delete (the ids
of ``--docs``, a jsonl), then, ``--rounds`` times, alternating the trees (``--trees``: source
checkouts, each run with ``PYTHONPATH`` set to it), deletes them from a hard-linked copy
(``cp -al``: a delete writes new files, never into stored ones) by the host-only child of
``bench/incremental.py`` (stand-in embedder) and records wall, peak RSS, the files written
(new inodes: count, MB, the largest) and the load average. The merged-on-read graph
(:func:`gpurag.graph.csr.load`) of each tree's result is compared bit for bit with the first
tree's.

    python bench/delete_written.py --index /tmp/dd50/exact.index --docs /tmp/dd50/new/new.jsonl \
        --trees /work/wt/dd_base /work/wt/deldelta --work /tmp/dd50/ab --out bench/results/x.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from incremental import _inodes, _written


def _graph_digest(index: Path, tree: Path) -> str:
    """A digest of the merged-on-read CSR graph, read by ``tree``'s code."""
    code = ("import hashlib,sys;from gpurag.graph import csr;"
            f"g=csr.load({str(index / 'graph')!r});h=hashlib.sha256();"
            "[h.update(memoryview(__import__('numpy').ascontiguousarray(a))) "
            "for a in (g.indptr.astype('<i8'),g.indices.astype('<i4'),g.weights)];"
            "print(h.hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(tree)},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--docs", type=Path, required=True)
    ap.add_argument("--trees", type=Path, nargs="+", required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    ids = [json.loads(line)["id"] for line in args.docs.read_text().splitlines() if line.strip()]
    args.work.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict]] = {str(t): [] for t in args.trees}
    digests: dict[str, str] = {}
    for rnd in range(args.rounds):
        for tree in args.trees if rnd % 2 == 0 else list(reversed(args.trees)):
            target = args.work / f"{tree.name}-{rnd}.index"
            subprocess.run(["rm", "-rf", str(target)], check=True)
            subprocess.run(["cp", "-al", str(args.index), str(target)], check=True)
            before = _inodes(target)
            load = list(os.getloadavg())
            cmd = [sys.executable, str(tree / "bench" / "incremental.py"), "--child", "delete",
                   str(target), "--doc-ids", *ids]
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(tree),
                                              "GPURAG_PROGRESS": "0"},
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            if os.waitstatus_to_exitcode(status):
                raise SystemExit(f"{tree}: delete failed: {proc.stderr.read().decode()[-2000:]}")
            manifest = json.loads((target / "manifest.json").read_text())
            row = {"round": rnd, "wall_s": round(wall, 2),
                   "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "load_avg_before": load,
                   "load_avg_after": list(os.getloadavg()),
                   "written": _written(before, _inodes(target)),
                   "graph": manifest["extra"]["incremental"]["updated_locally"][-1],
                   "counts": {k: manifest["counts"].get(k) for k in
                              ("chunks", "deleted_chunks", "mentions", "relations",
                               "graph_edges")}}
            if rnd == 0:
                digests[str(tree)] = _graph_digest(target, tree)
            rows[str(tree)].append(row)
            print(json.dumps({str(tree): row}), file=sys.stderr)
    summary = {t: {"written_mb_median": float(np.median([r["written"]["mb"] for r in rs])),
                   "wall_s_median": float(np.median([r["wall_s"] for r in rs])),
                   "peak_rss_mb_median": float(np.median([r["peak_rss_mb"] for r in rs]))}
               for t, rs in rows.items()}
    report = {"bench": "delete-written", "index": str(args.index), "deleted_documents": len(ids),
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "machine": {"cpus": os.cpu_count(), "note": "2-core AMD EPYC VM, 23.5 GiB, shared"},
              "trees": {str(t): subprocess.run(["git", "-C", str(t), "rev-parse", "--short",
                                                "HEAD"], capture_output=True, text=True
                                               ).stdout.strip() for t in args.trees},
              "summary": summary, "graph_sha256": digests,
              "graph_equal": len(set(digests.values())) == 1, "rows": rows,
              "sha256_of_ids": hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
