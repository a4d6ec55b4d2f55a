"""A/B of the local delete between two source trees on one base index (issue 34, tombstones).

Builds (or reuses, under ``--work``) the base index of the first ``--prefix`` passages of a large
corpus with the stand-in embedder (host stages only, ``bench/standin.py``), then, alternating
the trees given by ``--trees`` for ``--rounds`` rounds, copies the base and runs a local
``delete`` of ``--delete`` documents spread over the index (seeded) in a child process of that
tree (``bench/incremental.py --child``): its wall time, peak RSS and the files it wrote (new
inodes: count and MB). ``--compact`` also compacts the last copy of each tree and checks that
the result is the full build of what stays (its files equal to those of ``--exact`` delete of
the same documents by that tree). Prints JSON (medians per tree, every row, load averages).

    python bench/delete_ab.py --passages /work/shared/data/enwiki_passages/passages.jsonl.gz \\
        --prefix 147625 --trees /work/wt/base /work/wt/tomb --work /tmp/del148 --out r.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import incremental as inc_bench


def _run(tree: Path, cmd: list[str]) -> dict:
    """``cmd`` through ``bench/incremental.py --child`` of ``tree`` (its gpurag imported)."""
    os.environ["PYTHONPATH"] = str(tree)
    script = tree / "bench" / "incremental.py"
    old = inc_bench.__file__
    inc_bench.__file__ = str(script)  # _run_rss runs the script beside this module's file
    try:
        return inc_bench._run_rss(cmd)
    finally:
        inc_bench.__file__ = old


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=Path, required=True)
    ap.add_argument("--prefix", type=int, default=50000)
    ap.add_argument("--delete", type=int, default=20, help="documents deleted")
    ap.add_argument("--trees", type=Path, nargs="+", required=True,
                    help="source trees (repository roots), the first is 'before'")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--compact", action="store_true")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    inc_bench.HOST_ONLY = True
    os.environ["GPURAG_PROGRESS"] = "0"
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    base_src = work / f"base{args.prefix}.jsonl"
    records = inc_bench._prefix(args.passages, args.prefix)
    if not base_src.exists():
        inc_bench._write(base_src, records)
    base = work / f"base{args.prefix}.index"
    report: dict = {"bench": "delete-ab", "passages": str(args.passages), "prefix": args.prefix,
                    "delete": args.delete, "trees": [str(t) for t in args.trees],
                    "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "note": args.note}}
    if not (base / "manifest.json").exists():
        report["base_build"] = _run(args.trees[0], ["index", str(base_src), "-o", str(base)])
    rng = np.random.default_rng(0)
    ids = [records[int(i)]["id"] for i in sorted(rng.choice(len(records), args.delete,
                                                            replace=False))]
    report["deleted_ids"] = ids
    rows: dict[str, list[dict]] = {str(t): [] for t in args.trees}
    for r in range(args.rounds):
        for tree in args.trees:
            target = work / f"delete-{tree.name}.index"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(base, target)
            load = list(os.getloadavg())
            row = _run(tree, ["delete", str(target), "--doc-ids", *ids])
            row["load_avg_before"] = [round(x, 2) for x in load]
            row["round"] = r
            row["stages_s"] = inc_bench._stages(target)["stages_s"]
            rows[str(tree)].append(row)
            print(json.dumps({tree.name: row}), file=sys.stderr)
    report["rows"] = rows
    report["median"] = {t: {"wall_s": float(np.median([x["wall_s"] for x in v])),
                            "peak_rss_mb": float(np.median([x["peak_rss_mb"] for x in v])),
                            "written_mb": float(np.median([x["written"]["mb"] for x in v])),
                            "files_written": int(np.median([x["written"]["files"] for x in v])),
                            "index_mb": v[0]["written"]["index_mb"]}
                        for t, v in rows.items()}
    if args.compact:
        report["compact"] = {}
        for tree in args.trees:
            target = work / f"delete-{tree.name}.index"
            exact = work / f"exact-{tree.name}.index"
            shutil.rmtree(exact, ignore_errors=True)
            shutil.copytree(base, exact)
            ex = _run(tree, ["delete", str(exact), "--doc-ids", *ids, "--exact"])
            row = _run(tree, ["compact", str(target)])
            row["files_equal_exact_delete"] = (inc_bench._digests(target)
                                               == inc_bench._digests(exact))
            row["exact_delete"] = ex
            report["compact"][str(tree)] = row
            print(json.dumps({f"compact {tree.name}": row}), file=sys.stderr)
    report["load_avg_at_end"] = list(os.getloadavg())
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
