"""Graph queries on the device against the same host's CPU, in one run: the issue-26 device
targets (graph p50, questions/s in batches of 1,024, device p50 over CPU p50).

Each runtime of ``--runtimes`` opens the same index of a prefix of the shared Wikipedia
passages (built with the ``cuda`` runtime when listed, else the first, unless it is in
``--work``) and answers the same graph questions one at a time (p50/p95) and in batches
(``--batches``), the runtimes taking turns on each batch (same load). Runtimes:

* ``cpu``: the CPU runtime (ONNX embedder, FAISS, the NumPy stages; PPR ``auto``);
* ``cuda``: the cuda runtime (torch embedder, device searchers, the device walk segment);
* ``walk-cuda`` / ``walk-cpu``: the CPU runtime with only the walk segment (reset, PPR, fusion,
  top-k: :class:`gpurag.backends.query_device.DeviceWalk`) on cuda / on CPU torch: the same
  embedder as ``cpu``, so the ranks can be compared;
* ``cuda:N`` (also ``walk-cuda:N``): the walk checks convergence every N iterations, not every
  one (fewer host syncs; slightly different scores than the host's, so not for parity).

The report gives per runtime and batch the ms per question, questions/s and each stage's mean
ms (``timings_ms``; the walk segment is ``walk`` + ``fusion`` on the device, ``seeds`` + ``walk``
+ ``fusion`` on the host, where the reset is built in ``seeds``), the ratios to the first
runtime, and ``parity``: for the ``walk-*`` runtimes, the share of ``--parity`` questions whose
top-10 ids equal the first runtime's with ``ppr_method="power"`` (the host's ``auto`` pushes on
graphs of 500k+ edges, which the device never does). ``--budget-s`` stops adding batches once
spent, or when the next one would overrun it at the last batch's pace (the report says what
ran). With ``--out`` the report is written (atomically) after the rank check and after every
batch size, so a run killed by a timeout keeps what it measured.

Usage: python bench/query_device.py [--size 147645] [--runtimes cpu,cuda,walk-cuda]
       [--batches 1,64,1024] [--single 50] [--out FILE.json] [--work DIR] [--budget-s 240]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from query import DEFAULT_DATA, log, machine, make_questions, write_prefix


def runtime(name: str):
    """The runtime ``name`` stands for (see the module docstring); a ``:N`` suffix on a cuda
    or walk runtime checks the walk's convergence every N iterations instead of every one."""
    from gpurag.backends.query_device import DeviceWalk
    from gpurag.runtime import Runtime

    base, _, every = name.partition(":")
    check = {"check_every": int(every)} if every else {}
    if base == "cpu" and not every:
        return Runtime(device="cpu")
    if base == "cuda":
        return Runtime(device="cuda", **({"query_walk": DeviceWalk("cuda", **check)}
                                         if check else {}))
    if base in ("walk-cuda", "walk-cpu"):
        return Runtime(device="cpu", query_walk=DeviceWalk(base.removeprefix("walk-"), **check))
    raise SystemExit(f"unknown runtime {name!r}: use cpu, cuda[:N], walk-cuda[:N] or "
                     "walk-cpu[:N]")


def open_all(work: Path, data: Path, size: int, names: list[str]):
    """The index of the first ``size`` passages opened with each runtime, and the passages."""
    from gpurag import Index

    src = work / f"enwiki-{size}.jsonl"
    rows = write_prefix(data, size, src)
    out = work / f"enwiki-{size}.index"
    runtimes = {n: runtime(n) for n in names}
    builder = "cuda" if "cuda" in runtimes else names[0]  # the GPU embeds the passages faster
    build_s = None
    if not (out / "manifest.json").is_file():
        log(f"[{size}] indexing {src} with the {builder} runtime")
        t = time.perf_counter()
        Index.build(src, out, show_progress=False, runtime=runtimes[builder])
        build_s = time.perf_counter() - t
    return {n: Index.open(out, runtime=rt) for n, rt in runtimes.items()}, rows, build_s


def run(indexes: dict, questions: list[str], batch: int, n: int) -> dict[str, dict]:
    """Per runtime: ms per question (p50/p95 for single questions), questions/s, stages."""
    totals = {name: [] for name in indexes}
    stages = {name: [] for name in indexes}
    for i in range(0, n, batch):
        chunk = questions[i:i + batch]
        for name, index in indexes.items():
            t = time.perf_counter()
            results = index.query_batch(chunk, k=10, mode="graph", evidence=False)
            totals[name].append((time.perf_counter() - t) * 1000 / len(chunk))
            stages[name].append(results[0].timings_ms)
    out = {}
    for name in indexes:
        tot = totals[name]
        keys = sorted({k for s in stages[name] for k in s})
        row = {"batch": batch, "questions": n, "ms_per_question": float(np.mean(tot)),
               "questions_per_s": 1000 / float(np.mean(tot)),
               "stages_ms": {k: float(np.mean([s.get(k, 0.0) for s in stages[name]]))
                             for k in keys}}
        if batch == 1:
            row["p50_ms"] = float(np.percentile(tot, 50))
            row["p95_ms"] = float(np.percentile(tot, 95))
        out[name] = row
    return out


def parity(indexes: dict, questions: list[str]) -> dict[str, float]:
    """Per ``walk-*`` runtime: the share of questions whose top-10 ids equal the first
    runtime's, PPR by power iteration on both."""
    names = list(indexes)
    ids = lambda rs: [[p.chunk_id for p in r.passages] for r in rs]  # noqa: E731
    base = ids(indexes[names[0]].query_batch(questions, k=10, evidence=False,
                                              ppr_method="power"))
    out = {}
    for name in names[1:]:
        if name.startswith("walk-") and ":" not in name:
            got = ids(indexes[name].query_batch(questions, k=10, evidence=False,
                                                ppr_method="power"))
            out[name] = float(np.mean([a == b for a, b in zip(got, base, strict=True)]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=147_645)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--work", default="runs/bench")
    ap.add_argument("--runtimes", default="cpu,cuda,walk-cuda")
    ap.add_argument("--batches", default="1,64,1024")
    ap.add_argument("--single", type=int, default=50, help="questions asked one at a time")
    ap.add_argument("--parity", type=int, default=64, help="questions of the rank check")
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--out", default="", help="write the JSON report here (default stdout)")
    args = ap.parse_args()
    data = Path(args.data)
    if not data.is_file():
        sys.exit(f"benchmark data not found: {data} (pass --data)")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    names = args.runtimes.split(",")
    indexes, rows, build_s = open_all(work, data, args.size, names)
    batches = [int(b) for b in args.batches.split(",")]
    questions = make_questions(rows, max(max(batches), args.single, args.parity))
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
              "args": vars(args), "passages": args.size, "index_s": build_s,
              "counts": indexes[names[0]].manifest.counts,
              "walk": {n: ix.runtime.describe()["walk"] for n, ix in indexes.items()},
              "query": {n: [] for n in names}, "skipped_batches": []}
    for index in indexes.values():  # opens each runtime's parts (and uploads the index)
        index.query_batch(questions[:4], k=10, mode="graph", evidence=False)
    report["parity"] = parity(indexes, questions[:args.parity])
    log(f"[{args.size}] parity {report['parity']}")
    save(report, names, t0, args.out)
    pace_s = None  # seconds per question of the last batch size, all runtimes together
    for b in batches:
        n = args.single if b == 1 else b
        spent = time.perf_counter() - t0
        if spent > args.budget_s or (pace_s is not None and spent + pace_s * n > args.budget_s):
            report["skipped_batches"].append(b)
            continue
        log(f"[{args.size}] {', '.join(names)} in turn, batches of {b} ({n} questions)")
        rows = run(indexes, questions, b, n)
        for name, row in rows.items():
            report["query"][name].append(row)
            log(f"  {name}: {row['ms_per_question']:.2f} ms/q, {row['questions_per_s']:.0f} q/s"
                + (f", p50 {row['p50_ms']:.1f} ms" if "p50_ms" in row else ""))
        pace_s = sum(row["ms_per_question"] for row in rows.values()) / 1000
        save(report, names, t0, args.out)
    text = save(report, names, t0, args.out)
    log(json.dumps(report["ratios"], indent=1))
    if not args.out:
        print(text)


def save(report: dict, names: list[str], t0: float, out: str) -> str:
    """Fill in the ratios to the first runtime, the load and the wall time so far, and write
    the report to ``out`` atomically (a temporary file renamed over it) when given."""
    base = report["query"][names[0]]
    report["ratios"] = {}
    for name in names[1:]:
        for mine, theirs in zip(report["query"][name], base, strict=False):
            key = f"{name}_over_{names[0]}_batch{mine['batch']}"
            report["ratios"][key + "_ms_per_q"] = mine["ms_per_question"] / theirs[
                "ms_per_question"]
            if "p50_ms" in mine:
                report["ratios"][f"{name}_over_{names[0]}_p50"] = mine["p50_ms"] / theirs[
                    "p50_ms"]
    report["machine"]["load_avg_end"] = list(os.getloadavg())
    report["wall_s"] = time.perf_counter() - t0
    text = json.dumps(report, indent=1)
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, path)
    return text


if __name__ == "__main__":
    main()
