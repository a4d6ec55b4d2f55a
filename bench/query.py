"""Index and query throughput of gpurag on prefixes of the shared Wikipedia passages.

For each prefix size: index time per stage (from the manifest), then query latency p50/p95
one question at a time and questions/s in batches, for dense and graph mode; then PPR and
Leiden on the index's real graph against the implementations peers call (igraph
``personalized_pagerank``, networkx ``pagerank``, graspologic-native ``hierarchical_leiden``),
reusing bench/graph_algos.py. Questions are made from passage titles and first sentences.

Usage: python bench/query.py [--sizes 10000,50000] [--data PATH] [--work runs/bench]
Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/data/enwiki_passages/passages.jsonl.gz"


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
    picks = rng.choice(len(rows), size=min(n, len(rows)), replace=False)
    out = []
    for i in picks:
        words = rows[i]["text"].split()[:12]
        out.append(f"What is known about {rows[i]['title']}: {' '.join(words[4:12])}?")
    return out


def latency(index, questions: list[str], mode: str, batch: int) -> dict:
    index.query_batch(questions[:2], k=10, mode=mode)  # warm up
    single = []
    for q in questions:
        t = time.perf_counter()
        index.query(q, k=10, mode=mode)
        single.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    for i in range(0, len(questions), batch):
        index.query_batch(questions[i : i + batch], k=10, mode=mode)
    batch_s = time.perf_counter() - t
    return {"p50_ms": float(np.percentile(single, 50)), "p95_ms": float(np.percentile(single, 95)),
            "single_qps": 1000 / float(np.mean(single)),
            "batched_qps": len(questions) / batch_s, "batch_size": batch}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10000,50000")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--work", default="runs/bench")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--skip-peers", action="store_true", help="skip the igraph/networkx runs")
    args = ap.parse_args()
    data = Path(args.data)
    if not data.is_file():
        sys.exit(f"benchmark data not found: {data} (pass --data)")
    from gpurag import Index

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    report = {"machine": platform.platform(), "python": platform.python_version(), "runs": []}
    for size in [int(s) for s in args.sizes.split(",")]:
        src = work / f"enwiki-{size}.jsonl"
        rows = write_prefix(data, size, src)
        out = work / f"enwiki-{size}.index"
        log(f"[{size}] indexing {src}")
        t = time.perf_counter()
        index = Index.build(src, out)
        build_s = time.perf_counter() - t
        questions = make_questions(rows, args.questions)
        run = {"passages": size, "index_s": build_s,
               "stage_s": index.manifest.extra.get("timings_s", {}),
               "counts": index.manifest.counts, "query": {}}
        for mode in ("dense", "graph"):
            log(f"[{size}] queries, {mode}")
            run["query"][mode] = latency(index, questions, mode, args.batch)
        if not args.skip_peers:
            run["graph_algorithms"] = peer_comparison(index, args)
        report["runs"].append(run)
        log(json.dumps(run["query"]))
    print(json.dumps(report, indent=1))


def peer_comparison(index, args: argparse.Namespace) -> dict:
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
