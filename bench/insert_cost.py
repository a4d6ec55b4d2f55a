"""Cost of one local insert into an existing index, this tree against a baseline tree, same run.

Each insert is a separate process on a hard-link copy of the base index (``cp -al``: an update
never writes into a stored file, it writes a new version beside it and swaps), with the
stand-in embedder (``bench/standin.py``: host stages only). Runs alternate between the trees
(A B A B ...) so both see the same machine load. Reported per run: the process's wall, its
import time, the update's wall, CPU time (user + sys: less sensitive to the load of a shared
machine than wall), peak RSS, the manifest's stages and the files the insert wrote (new
inodes)::

    python bench/insert_cost.py --base /tmp/base50000.index --new new20.jsonl \\
        --baseline /tmp/base-tree --runs 3 --out bench/results/insert_cost_<date>.json

``--repeat N`` instead times N single-document inserts in a row in one process (this tree
only): the per-insert wall and stages at insert 1..N (does the cost grow with the inserts?). Each
row is the insert's own (``insert_documents``' result: version, documents, skipped, stages);
an insert that commits no version (its document's text already indexed) is listed as a
no-op and left out of the quartiles and the slope.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from incremental import _inodes, _written  # noqa: E402  (the files an update wrote)

CHILD = r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
from scale import host_only_runtime
op, target, arg = sys.argv[2], sys.argv[3], sys.argv[4]
if op.startswith("cli-"):
    import gpurag.cli as cli
else:
    from gpurag.pipeline.updates import delete_documents, insert_documents
t_import = time.perf_counter() - t0
runtime = host_only_runtime("cpu")
t1 = time.perf_counter()
c1 = os.times()
if op.startswith("cli-"):  # the command line, its runtime the stand-in's
    cli.make_runtime = lambda args: runtime
    argv = (["-q", "insert", target, arg] if op == "cli-insert"
            else ["-q", "delete", target, "--ids-file", arg])
    assert cli.main(argv) == 0
elif op == "insert":
    insert_documents(target, [arg], runtime=runtime, show_progress=False)
else:
    ids = [json.loads(line)["id"] for line in open(arg, encoding="utf-8") if line.strip()]
    delete_documents(target, ids, runtime=runtime, show_progress=False)
c2 = os.times()
print(json.dumps({"import_s": round(t_import, 3), "update_s": round(time.perf_counter() - t1, 3),
                  "update_cpu_s": round(c2.user + c2.system - c1.user - c1.system, 3)}))
"""

REPEAT = r"""
import json, os, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
from scale import host_only_runtime
from gpurag.pipeline.updates import insert_documents
runtime = host_only_runtime("cpu")
target, sources = sys.argv[2], sys.argv[3:]
for src in sources:
    t0 = time.perf_counter()
    c1 = os.times()
    r = insert_documents(target, [src], runtime=runtime, show_progress=False)
    c2 = os.times()
    # the insert's own stages and outcome (a no-op, its document's text already indexed,
    # commits no version: the manifest's stages would be the previous insert's)
    print(json.dumps({"wall_s": round(time.perf_counter() - t0, 3),
                      "cpu_s": round(c2.user + c2.system - c1.user - c1.system, 3),
                      "version": r.version, "documents": len(r.documents),
                      "skipped": r.skipped,
                      "stages_s": {k: round(v, 3) for k, v in r.timings_s.items()}}),
          flush=True)
"""


def _env(tree: Path) -> dict:
    """The child's environment: ``tree`` first on the path, bytecode cached as an installed
    package has it (with ``PYTHONDONTWRITEBYTECODE`` set, every child would compile gpurag's
    hundred modules from source, ~0.7 s CPU that no installed ``gpurag`` pays)."""
    env = {**os.environ, "GPURAG_PROGRESS": "0", "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compiled(tree: Path) -> None:
    """Write the bytecode of ``tree``'s gpurag and bench modules (as ``pip install`` does)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "gpurag"),
                    str(tree / "bench")], env=_env(tree), check=True,
                   stdout=subprocess.DEVNULL)


def one_insert(tree: Path, base: Path, new: Path, work: Path, op: str = "insert") -> dict:
    """One local update ``op`` into a hard-link copy of ``base``, run by ``tree``: insert the
    documents of ``new``, or delete them (``delete``; ``cli-insert``/``cli-delete``: through
    the command line, as ``gpurag insert``/``gpurag delete`` run)."""
    target = work / "t.index"
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(work / ".t.index.embcache", ignore_errors=True)
    subprocess.run(["cp", "-al", str(base), str(target)], check=True)
    base_version = _manifest(target)["extra"].get("version", 1)
    before = _inodes(target)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        arg = new
        if op == "cli-delete":  # the ids file the command reads
            arg = work / "ids.txt"
            arg.write_text("".join(json.loads(line)["id"] + "\n" for line in
                                   new.read_text(encoding="utf-8").splitlines() if line.strip()),
                           encoding="utf-8")
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tree), op, str(target),
                                 str(arg)],
                                env=_env(tree), stdout=out, stderr=err, cwd=tree)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(), err.read().decode()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"insert by {tree} failed: {errors[-2000:]}")
    row = {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
           "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
           **json.loads(text.strip().splitlines()[-1])}
    manifest = _manifest(target)
    row["version"] = manifest["extra"].get("version", 1)
    # no new version: the manifest's stages are the base's, not this run's
    row["stages_s"] = ({} if row["version"] == base_version else
                       {k: round(v, 3) for k, v in manifest["extra"]["timings_s"].items()})
    row["written"] = _written(before, _inodes(target))
    row["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    shutil.rmtree(target, ignore_errors=True)
    return row


def _manifest(index: Path) -> dict:
    return json.loads((index / "manifest.json").read_text(encoding="utf-8"))


def _median(rows: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in rows]))


def compare(args) -> dict:
    trees = {"after": HERE.parent}
    if args.baseline:
        trees = {"before": args.baseline.resolve(), **trees}
    work = Path(tempfile.mkdtemp(prefix="gpurag-insert-cost-", dir=args.work))
    for tree in trees.values():
        compiled(tree)
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for i in range(args.runs):
        for name, tree in trees.items():
            row = one_insert(tree, args.base, args.new, work, args.op)
            runs[name].append(row)
            print(json.dumps({name: i, **row}), file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    summary = {}
    for name, rows in runs.items():
        stages = sorted({k for r in rows for k in r["stages_s"]})
        summary[name] = {
            **{k: _median(rows, k) for k in ("wall_s", "cpu_s", "import_s", "update_s",
                                              "update_cpu_s", "peak_rss_mb")},
            "written_mb": float(np.median([r["written"]["mb"] for r in rows])),
            "stages_s": {s: float(np.median([r["stages_s"].get(s, 0.0) for r in rows]))
                         for s in stages}}
    out = {"runs": runs, "median": summary}
    if "before" in summary:
        b, a = summary["before"], summary["after"]
        out["after_over_before"] = {k: round(a[k] / b[k], 3) for k in (
            "wall_s", "cpu_s", "update_s", "update_cpu_s", "peak_rss_mb", "written_mb") if b[k]}
    return out


def repeat(args) -> dict:
    records = [line for line in args.new.read_text(encoding="utf-8").splitlines() if line]
    work = Path(tempfile.mkdtemp(prefix="gpurag-insert-repeat-", dir=args.work))
    target = work / "r.index"
    subprocess.run(["cp", "-al", str(args.base), str(target)], check=True)
    sources = []
    for i, line in enumerate(records[: args.repeat]):
        src = work / "one" / f"{i}" / "doc.jsonl"
        src.parent.mkdir(parents=True)
        src.write_text(line + "\n", encoding="utf-8")
        sources.append(str(src))
    rows = []
    compiled(HERE.parent)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", REPEAT, str(HERE.parent), str(target),
                             *sources], env=_env(HERE.parent), stdout=subprocess.PIPE,
                            text=True, cwd=HERE.parent)
    assert proc.stdout is not None
    for line in proc.stdout:
        rows.append(json.loads(line))
        if args.repeat_s and time.perf_counter() - t0 > args.repeat_s:
            proc.kill()
            break
    proc.wait()
    files = len(_inodes(target))
    shutil.rmtree(work, ignore_errors=True)
    # the quartiles and slope are of the inserts that committed a version (no-ops left out)
    done = [r for r in rows if r.get("version") is not None]
    walls = np.array([r["wall_s"] for r in done])
    cpus = np.array([r["cpu_s"] for r in done])
    q = max(1, len(done) // 4)
    return {"inserts": len(rows), "committed": len(done), "files_at_end": files,
            "no_op_inserts": [i + 1 for i, r in enumerate(rows) if r.get("version") is None],
            "quarter_median_wall_s": [float(np.median(walls[i * q:(i + 1) * q]))
                                      for i in range(4) if len(walls[i * q:(i + 1) * q])],
            "quarter_median_cpu_s": [float(np.median(cpus[i * q:(i + 1) * q]))
                                     for i in range(4) if len(cpus[i * q:(i + 1) * q])],
            "slope_cpu_s_per_100_inserts": (round(float(np.polyfit(np.arange(len(cpus)), cpus,
                                                                   1)[0]) * 100, 4)
                                            if len(cpus) > 2 else None),
            "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="the committed base index")
    ap.add_argument("--new", type=Path, required=True, help="documents to insert (jsonl)")
    ap.add_argument("--baseline", type=Path, help="a checkout of the tree to compare against")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--op", default="insert", choices=["insert", "delete", "cli-insert",
                                                       "cli-delete"],
                    help="what each run does with --new (delete: --base must hold them)")
    ap.add_argument("--repeat", type=int, default=0,
                    help="single-document inserts in a row (one per line of --new)")
    ap.add_argument("--repeat-s", type=float, default=0, help="stop --repeat after this long")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder's parent")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    report = {"bench": "insert-cost", "op": args.op, "base": str(args.base),
              "new": str(args.new),
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
                          "note": args.note}}
    report.update(repeat(args) if args.repeat else compare(args))
    report["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
