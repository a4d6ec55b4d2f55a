"""Query cost per stage on prefixes of the shared Wikipedia passages: dense against graph mode.

For each prefix size the index is built (or reused from ``--work``), then each mode answers
the same questions one at a time and in batches (``--batches``, default 1, 64 and 1,024), and
the report gives per batch size the milliseconds per question: p50/p95 of the whole query
(single questions), the mean per question (batches), and each stage's share as the results'
``timings_ms`` report it (embed; then the graph stages dense, bm25, linking, seeds, walk,
fusion, second_hop, expansion_bm25, paths). Questions are made from passage titles and the
first words of their text.

``--peers`` also times PPR and Leiden on the index's graph against igraph, networkx and
graspologic-native (bench/graph_algos.py).

Usage: python bench/query.py [--sizes 2000,20000] [--questions 1024] [--batches 1,64,1024]
       [--single 100] [--batched 256] [--out FILE.json] [--work runs/bench] [--device cpu|cuda]
Prints the table on stderr and writes the JSON report (``--out``; default stdout).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

_SHARED = Path(__file__).resolve().parents[2] / "shared/data"
DEFAULT_DATA = ((_SHARED if _SHARED.is_dir() else Path("/work/shared/data"))
                / "enwiki_passages/passages.jsonl.gz")
MODES = ("dense", "graph")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_prefix(src: Path, n: int, out: Path) -> list[dict]:
    """The first ``n`` passages as a JSONL file; returns them."""
    rows = []
    with gzip.open(src, "rt", encoding="utf-8") as fh, open(out, "w", encoding="utf-8") as w:
        for line in fh:
            if len(rows) >= n:
                break
            rows.append(json.loads(line))
            w.write(line)
    return rows


def make_questions(rows: list[dict], n: int, seed: int = 0) -> list[str]:
    """Questions from passages: a title plus a fragment of its first sentence."""
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(rows), size=n, replace=n > len(rows))
    out = []
    for i in picks:
        words = rows[i]["text"].split()[:12]
        out.append(f"What is known about {rows[i]['title']}: {' '.join(words[4:12])}?")
    return out


def machine() -> dict:
    """CPU model, cores, memory and load: the context every number here needs."""
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "load_avg": list(os.getloadavg())}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        mem = Path("/proc/meminfo").read_text().split()
        info["mem_gib"] = round(int(mem[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except Exception:  # torch absent or broken: a CPU machine
        pass
    return info


def open_or_build(work: Path, data: Path, size: int):
    """The index of the first ``size`` passages (built in ``work`` unless there) and them."""
    from gpurag import Index

    src = work / f"enwiki-{size}.jsonl"
    rows = write_prefix(data, size, src)
    out = work / f"enwiki-{size}.index"
    build_s = None
    if not (out / "manifest.json").is_file():
        log(f"[{size}] indexing {src}")
        t = time.perf_counter()
        Index.build(src, out, show_progress=False)
        build_s = time.perf_counter() - t
    return Index.open(out), rows, build_s


def run_batches(index, questions: list[str], mode: str, batch: int, n: int) -> dict:
    """Per question: total ms (p50/p95 for single questions, mean for batches) and the mean
    ms of each stage, over the first ``n`` questions in batches of ``batch``."""
    totals, stages = [], []
    for i in range(0, n, batch):
        chunk = questions[i:i + batch]
        t = time.perf_counter()
        results = index.query_batch(chunk, k=10, mode=mode)
        totals.append((time.perf_counter() - t) * 1000 / len(chunk))
        stages.append(results[0].timings_ms)
    keys = sorted({k for s in stages for k in s})
    out = {"batch": batch, "questions": n, "ms_per_question": float(np.mean(totals)),
           "questions_per_s": 1000 / float(np.mean(totals)),
           "stages_ms": {k: float(np.mean([s.get(k, 0.0) for s in stages])) for k in keys}}
    if batch == 1:
        out["p50_ms"] = float(np.percentile(totals, 50))
        out["p95_ms"] = float(np.percentile(totals, 95))
    return out


def table(run: dict) -> str:
    """One markdown table of a prefix's runs: ms per question per stage."""
    cols = ["embed", "retrieve", "dense", "bm25", "linking", "seeds", "walk", "fusion",
            "second_hop", "expansion_bm25", "paths", "evidence"]
    lines = [f"{run['passages']} passages",
             "| mode | batch | p50 | p95 | ms/q | q/s | " + " | ".join(cols) + " |",
             "|---" * (6 + len(cols)) + "|"]
    for mode, rows in run["query"].items():
        for r in rows:
            st = r["stages_ms"]
            lines.append(f"| {mode} | {r['batch']} | {r.get('p50_ms', float('nan')):.1f} | "
                         f"{r.get('p95_ms', float('nan')):.1f} | {r['ms_per_question']:.2f} | "
                         f"{r['questions_per_s']:.0f} | "
                         + " | ".join(f"{st[c]:.2f}" if c in st else "" for c in cols) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2000,20000")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--work", default="runs/bench")
    ap.add_argument("--questions", type=int, default=1024,
                    help="questions made per prefix (the largest batch needs as many)")
    ap.add_argument("--single", type=int, default=100, help="questions asked one at a time")
    ap.add_argument("--batched", type=int, default=256,
                    help="questions asked in batches (at least one batch of each size)")
    ap.add_argument("--batches", default="1,64,1024")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto (the runtime's)")
    ap.add_argument("--out", default="", help="write the JSON report here (default stdout)")
    ap.add_argument("--peers", action="store_true", help="also time igraph/networkx PPR and "
                    "Leiden on the index's graph")
    args = ap.parse_args()
    data = Path(args.data)
    if not data.is_file():
        sys.exit(f"benchmark data not found: {data} (pass --data)")
    if args.device != "auto":  # read by the runtime when the index opens
        os.environ["GPURAG_DEVICE"] = args.device
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine(), "args": vars(args), "runs": []}
    batches = [int(b) for b in args.batches.split(",")]
    for size in [int(s) for s in args.sizes.split(",")]:
        index, rows, build_s = open_or_build(work, data, size)
        questions = make_questions(rows, args.questions)
        run = {"passages": size, "index_s": build_s, "counts": index.manifest.counts,
               "query": {}}
        with index:
            for mode in args.modes.split(","):
                index.query_batch(questions[:4], k=10, mode=mode)  # opens what it needs
                run["query"][mode] = []
                for b in batches:
                    n = args.single if b == 1 else max(b, args.batched)
                    log(f"[{size}] {mode}, batches of {b} ({min(n, len(questions))} questions)")
                    run["query"][mode].append(run_batches(index, questions, mode, b,
                                                          min(n, len(questions))))
            if args.peers:
                run["graph_algorithms"] = peer_comparison(index)
        report["runs"].append(run)
        log(table(run))
    report["machine"]["load_avg_end"] = list(os.getloadavg())
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


def peer_comparison(index) -> dict:
    """PPR and Leiden on this index's graph: ours against the peers' implementations."""
    import graph_algos

    g = index.retriever.graph
    indptr, dst = np.asarray(g.indptr), np.asarray(g.indices, dtype=np.int64)
    src = np.repeat(np.arange(g.n_nodes, dtype=np.int64), np.diff(indptr))
    once = src < dst  # each undirected edge once
    edges = (src[once], dst[once], np.asarray(g.weights)[once])
    rng = np.random.default_rng(0)
    ns = argparse.Namespace(queries=16, reference_queries=4, seeds=5, many_seeds=200,
                            baseline_queries=4, skip_networkx=False, nx_edges=3_000_000,
                            nx_queries=2, max_cluster_size=64)
    out = {}
    try:
        out["ppr"] = graph_algos.bench_ppr(g, edges, ns, rng)
    except Exception as exc:
        out["ppr_error"] = repr(exc)
    try:
        out["leiden"] = graph_algos.bench_leiden(g, ns)
    except Exception as exc:
        out["leiden_error"] = repr(exc)
    return out


if __name__ == "__main__":
    main()
