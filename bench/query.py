"""Query cost per stage on prefixes of the shared Wikipedia passages: dense against graph mode.

For each prefix size the index is built (or reused from ``--work``), then each mode answers
the same questions one at a time and in batches (``--batches``, default 1, 64 and 1,024), and
the report gives per batch size the milliseconds per question: p50/p95 of the whole query
(single questions), the mean per question (batches), and each stage's share as the results'
``timings_ms`` report it (embed; then the graph stages dense, bm25, linking, seeds, walk,
fusion, second_hop, expansion_bm25, paths). In graph mode ``dense`` is the wait for the
passage scan after linking (a long scan runs on a helper thread beside BM25 and linking,
gpurag.query.overlap) and ``dense_scan`` the scan's own time, wherever it ran (the stage
earlier reports called ``dense``); it overlaps the other stages, so the stages need not add
up to ``retrieve``. Questions are made from passage titles and the
first words of their text. The modes take turns on each batch (same load); ``graph:noevidence``
is graph mode without the evidence chains (``evidence=False``). ``ratios`` gives the targets'
ratios: graph p50 over dense p50, and the largest batch's cost per question over single.

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

from shared_data import SHARED_DATA

DEFAULT_DATA = SHARED_DATA / "enwiki_passages/passages.jsonl.gz"
MODES = ("dense", "graph", "graph:noevidence")


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


def open_or_build(work: Path, data: Path, size: int, standin: bool = False):
    """The index of the first ``size`` passages (built in ``work`` unless there) and them.
    ``standin``: build with the deterministic stand-in embedder (``bench/standin.py``, as
    ``bench/scale.py --host-only``); the questions are still embedded by the real model, so
    latency is real while dense hits are not meaningful (the index lives in its own folder)."""
    from gpurag import Index

    src = work / f"enwiki-{size}.jsonl"
    rows = write_prefix(data, size, src)
    out = work / f"enwiki-{size}{'-standin' if standin else ''}.index"
    build_s = None
    if not (out / "manifest.json").is_file():
        log(f"[{size}] indexing {src}" + (" (stand-in embedder)" if standin else ""))
        runtime = None
        if standin:
            from scale import host_only_runtime

            runtime = host_only_runtime(os.environ.get("GPURAG_DEVICE", "cpu"))
        t = time.perf_counter()
        Index.build(src, out, show_progress=False, runtime=runtime)
        build_s = time.perf_counter() - t
    return Index.open(out), rows, build_s


def split_mode(mode: str) -> tuple[str, dict]:
    """``"graph:noevidence"`` -> ("graph", {"evidence": False}); other modes as they are."""
    base, _, flag = mode.partition(":")
    return base, ({"evidence": False} if flag == "noevidence" else {})


def run_batches(index, questions: list[str], modes: list[str], batch: int, n: int
                ) -> dict[str, dict]:
    """Per mode, per question: total ms (p50/p95 for single questions, mean for batches) and
    the mean ms of each stage, over the first ``n`` questions in batches of ``batch``. The
    modes take turns on each batch, so a change in the machine's load hits them alike."""
    totals: dict[str, list] = {m: [] for m in modes}
    stages: dict[str, list] = {m: [] for m in modes}
    for i in range(0, n, batch):
        chunk = questions[i:i + batch]
        for mode in modes:
            base, options = split_mode(mode)
            t = time.perf_counter()
            results = index.query_batch(chunk, k=10, mode=base, **options)
            totals[mode].append((time.perf_counter() - t) * 1000 / len(chunk))
            stages[mode].append(results[0].timings_ms)
    out = {}
    for mode in modes:
        keys = sorted({k for s in stages[mode] for k in s})
        tot = totals[mode]
        row = {"batch": batch, "questions": n, "ms_per_question": float(np.mean(tot)),
               "questions_per_s": 1000 / float(np.mean(tot)),
               "stages_ms": {k: float(np.mean([s.get(k, 0.0) for s in stages[mode]]))
                             for k in keys}}
        if batch == 1:
            row["p50_ms"] = float(np.percentile(tot, 50))
            row["p95_ms"] = float(np.percentile(tot, 95))
        out[mode] = row
    return out


def ratios(run: dict) -> dict:
    """The targets' ratios of one prefix: graph p50 over dense p50 (single questions), and
    per mode the per-question cost of the largest batch over that of single questions."""
    q = run["query"]
    out = {}
    dense = q.get("dense", [{}])[0].get("p50_ms")
    for mode, rows in q.items():
        single, big = rows[0], rows[-1]
        if dense and mode != "dense" and "p50_ms" in single:
            out[f"{mode}_p50_over_dense_p50"] = single["p50_ms"] / dense
        if big["batch"] > 1 and single["batch"] == 1:
            out[f"{mode}_batch{big['batch']}_over_single"] = (
                big["ms_per_question"] / single["ms_per_question"])
            if "retrieve" in big["stages_ms"] and single["stages_ms"].get("retrieve"):
                out[f"{mode}_retrieve_batch{big['batch']}_over_single"] = (
                    big["stages_ms"]["retrieve"] / single["stages_ms"]["retrieve"])
    return out


def table(run: dict) -> str:
    """One markdown table of a prefix's runs: ms per question per stage."""
    cols = ["embed", "retrieve", "dense", "dense_scan", "bm25", "linking", "seeds", "walk",
            "fusion", "second_hop", "expansion_bm25", "paths", "confidence", "evidence"]
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
    ap.add_argument("--standin-sizes", default="",
                    help="sizes whose index is built with the stand-in embedder (comma list)")
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
        standin = str(size) in args.standin_sizes.split(",")
        index, rows, build_s = open_or_build(work, data, size, standin)
        questions = make_questions(rows, args.questions)
        run = {"passages": size, "index_s": build_s, "counts": index.manifest.counts,
               "standin_build": standin,
               # what runs the graph walk: the device segment on cuda, the NumPy stages on cpu
               "walk": index.runtime.describe()["walk"],
               "query": {}}
        with index:
            modes = args.modes.split(",")
            for mode in modes:
                base, options = split_mode(mode)
                index.query_batch(questions[:4], k=10, mode=base, **options)  # opens its parts
                run["query"][mode] = []
            for b in batches:
                n = min(args.single if b == 1 else max(b, args.batched), len(questions))
                log(f"[{size}] {', '.join(modes)} in turn, batches of {b} ({n} questions)")
                for mode, row in run_batches(index, questions, modes, b, n).items():
                    run["query"][mode].append(row)
            run["ratios"] = ratios(run)
            if args.peers:
                run["graph_algorithms"] = peer_comparison(index)
        report["runs"].append(run)
        log(table(run))
        log(json.dumps(run["ratios"], indent=1))
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
