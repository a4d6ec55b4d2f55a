"""End to end on both backends: build and evaluate the same datasets with ``GPURAG_DEVICE=cpu``
and ``GPURAG_DEVICE=cuda`` through the command line a user runs, then compare.

For each dataset (a folder with corpus.jsonl and questions.jsonl) it records, per device, the
build's wall time and per-stage timings, which implementation ran each component (the index
manifest's ``components``: what actually ran, not what was selected), the index counts, the
eval metrics, and, across devices, how many questions got identical gold ranks. One JSON file:

    python bench/device_e2e.py examples/sample shared/data/musique_train100 --out bench/results
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path


def run_device(dataset: Path, device: str, work: Path, modes: str, timeout_s: float) -> dict:
    """Build and evaluate ``dataset`` on ``device`` through ``gpurag eval``; what it measured."""
    index_dir = work / f"{dataset.name}_{device}"
    result_json = work / f"{dataset.name}_{device}.json"
    env = {**os.environ, "GPURAG_DEVICE": device, "GPURAG_PROGRESS": "0"}
    cmd = [sys.executable, "-m", "gpurag", "eval", str(dataset), "--modes", modes,
           "--index", str(index_dir), "--json", str(result_json)]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"device": device, "error": f"timed out after {timeout_s:.0f} s"}
    wall = time.perf_counter() - start
    out: dict = {"device": device, "rc": proc.returncode, "wall_s": round(wall, 2)}
    if proc.returncode != 0:
        out["error"] = (proc.stderr or proc.stdout)[-3000:]
        return out
    manifest = json.loads((index_dir / "manifest.json").read_text())
    result = json.loads(result_json.read_text())
    extra = manifest.get("extra", {})
    out.update(components=manifest.get("components", {}), timings_s=extra.get("timings_s"),
               counts=result["index"].get("counts"), modes=result["modes"],
               ranks={q["id"]: q["ranks"] for q in result["questions"]})
    return out


def compare(cpu: dict, cuda: dict) -> dict:
    """How far the cuda run's per-question gold ranks and metrics agree with the cpu run's."""
    if "ranks" not in cpu or "ranks" not in cuda:
        return {}
    same = {mode: sum(cpu["ranks"][q].get(mode) == cuda["ranks"].get(q, {}).get(mode)
                      for q in cpu["ranks"]) for mode in cpu["modes"]}
    deltas = {mode: {m: round(cuda["modes"][mode][m] - cpu["modes"][mode][m], 4)
                     for m in ("recall@2", "recall@5", "all_gold@8", "mrr")}
              for mode in cpu["modes"] if mode in cuda["modes"]}
    counts = {k: (cpu["counts"].get(k), cuda["counts"].get(k))
              for k in sorted(set(cpu["counts"]) | set(cuda["counts"]))
              if cpu["counts"].get(k) != cuda["counts"].get(k)}
    return {"questions": len(cpu["ranks"]), "identical_ranks": same,
            "metric_delta_cuda_minus_cpu": deltas, "counts_that_differ": counts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("datasets", nargs="+", type=Path)
    ap.add_argument("--modes", default="graph,dense,bm25")
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("--timeout-s", type=float, default=240.0, help="per build+eval")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    report: dict = {"date": date.today().isoformat(), "datasets": {}}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"device_e2e_{date.today().isoformat()}.json"
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in args.datasets:
            if not (dataset / "corpus.jsonl").exists():
                print(f"skip {dataset}: no corpus.jsonl", flush=True)
                continue
            runs = {}
            for device in args.devices.split(","):
                runs[device] = run_device(dataset, device, Path(tmp), args.modes, args.timeout_s)
                r = runs[device]
                print(f"{dataset.name} {device}: rc {r.get('rc')} wall {r.get('wall_s')} s "
                      f"{r.get('error', '')[-600:]}", flush=True)
                for mode, m in r.get("modes", {}).items():
                    print(f"  {mode:<6} R@2 {m['recall@2']:.3f} R@5 {m['recall@5']:.3f} "
                          f"AG@8 {m['all_gold@8']:.3f} MRR {m['mrr']:.3f} "
                          f"p50 {m['latency_ms_p50']:.1f} ms", flush=True)
                if "components" in r:
                    print(f"  components: {r['components']}", flush=True)
            entry = {"runs": runs}
            if "cpu" in runs and "cuda" in runs:
                entry["compare"] = compare(runs["cpu"], runs["cuda"])
                print(f"  compare: {json.dumps(entry['compare'])}", flush=True)
            report["datasets"][dataset.name] = entry
            path.write_text(json.dumps(report, indent=1))  # after each set: a cut run keeps it
    print(f"wrote {path}", flush=True)
    failed = any("error" in r for e in report["datasets"].values() for r in e["runs"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
