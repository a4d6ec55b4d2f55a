"""How indexing and querying scale: per-stage throughput, peak memory, query latency vs size.

Two sections, each case in its own child process (so peak memory is the case's own):

* ``build``: the full ``gpurag`` build of prefixes of the shared Wikipedia corpus
  (``--passages``, default ``../shared/data/enwiki_passages/passages.jsonl.gz``; ``--prefixes``
  10000,50000,0 = 10k, 50k, all): seconds and passages/s per stage (the manifest's timings),
  peak host RSS, peak torch device memory (cuda), index bytes vs text bytes, the
  implementations the build recorded, and the recall@10 of each vector set stored as
  float16 or int8 against float32 (``precision``: a sample re-embedded in float32, held-out
  rows as queries, exact search);
* ``graph``: synthetic power-law graphs (``--edges``; ``bench/synthetic.py``: NumPy, torch on
  cuda, ``pylibraft`` when present) for the graph-only query stages: generation time, PPR
  (the backend gpurag selects for the device, damping 0.8 and tol 1e-4 as ``QueryConfig``)
  plus top-10 per query, and kNN seed search over one 384-d vector per node (capped by
  ``--knn-max``), each at ``--batches`` 1, 64, 1024: p50/p95 latency per batch, per query,
  queries/s, peak memory.

With ``--cluster local:1,local:2`` (or scheduler addresses) each prefix is built once in one
process and once per cluster (``gpurag index --cluster``): wall time against the single-process
build (``over_single``: the engine's overhead at N = 1, its speed-up past it) and whether every
index file's sha256 is the same (``same_bytes``). Peak RSS is the driver's; the workers' own
processes are not counted.

Cases run while ``--budget-s`` allows (a case is skipped, and says so, once over budget).
Writes ``scale_<date>_<device>.json`` under ``--out`` and prints a table.

    python bench/scale.py --prefixes 2000 --edges 1e6          # small, CPU (a few minutes)
    python bench/scale.py --device cuda --prefixes 10000,50000,0 --edges 1e7,1e8
    python bench/scale.py --prefixes 400 --edges '' --no-precision --cluster local:1,local:2

``--host-only`` builds with a deterministic stand-in embedder (``bench/standin.py``: the real
tokenizer, then a seeded hash projection of the token ids, 384-d float32) so every host stage
does its real work and its throughput can be measured on any CPU; ``--baseline DIR`` builds
each prefix first with the gpurag of another checkout (``git worktree add /tmp/base COMMIT``),
in the same run, so before/after figures share the machine and its load:

    python bench/scale.py --host-only --prefixes 10000,50000 --edges '' --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import inspect
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]

# GPURAG_BENCH_TREE: the checkout whose gpurag a --baseline child builds with
TREE = Path(os.environ.get("GPURAG_BENCH_TREE") or REPO)
sys.path.insert(0, str(TREE))
sys.path.insert(0, str(REPO / "bench"))
DEFAULT_PASSAGES = REPO.parent / "shared" / "data" / "enwiki_passages" / "passages.jsonl.gz"
_START = [time.perf_counter()]  # reset by main(): the budget counts from the run's start


def elapsed() -> float:
    return time.perf_counter() - _START[0]


def log(msg: str) -> None:
    print(f"[{elapsed():7.1f}s] {msg}", file=sys.stderr, flush=True)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kB


def device_peak() -> dict:
    """Peak torch device memory of this process (cuda only)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return {}
    return {"peak_device_bytes": int(torch.cuda.max_memory_allocated()),
            "peak_device_reserved_bytes": int(torch.cuda.max_memory_reserved())}


def percentiles(samples: list[float]) -> dict:
    a = np.asarray(samples) * 1e3
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)),
            "min_ms": float(a.min()), "runs": len(a)}


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- build case (child) ------------------------------------------------------------------------
def file_bytes(path: Path) -> dict[str, int]:
    """Bytes per file of an index, largest first."""
    sizes = {p.relative_to(path).as_posix(): p.stat().st_size
             for p in path.rglob("*") if p.is_file()}
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1]))


def write_prefix(src: Path, n: int, dst: Path) -> tuple[int, int]:
    """First ``n`` records (0: all) of a JSONL(.gz) file into ``dst``: (records, text bytes)."""
    opener = gzip.open if src.suffix == ".gz" else open
    count = text_bytes = 0
    with opener(src, "rt", encoding="utf-8") as fin, open(dst, "w", encoding="utf-8") as fout:
        for line in fin:
            if n and count >= n:
                break
            if not line.strip():
                continue
            fout.write(line)
            text_bytes += len(json.loads(line).get("text", "").encode("utf-8"))
            count += 1
    return count, text_bytes


def recall_at(exact: np.ndarray, got: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(exact, got, strict=True)]))


def storage_precision(index_dir: Path, k: int = 10, sample: int = 3000,
                      queries: int = 300) -> list[dict]:
    """Recall@k of each storage precision against float32, per vector set of the index: up to
    ``sample`` texts of the set embedded afresh in float32, ``queries`` of them held out as
    queries (float32, as questions are), the rest stored through each codec and searched
    exactly; the build's own precision is the one its manifest names."""
    import faiss

    from gpurag.api import Index
    from gpurag.pipeline.chunk_embed import embed_text
    from gpurag.store import layout
    from gpurag.vectors.codec import PRECISIONS, codec_for

    rows = []
    with Index.open(index_dir) as index:
        chunks = index.chunks
        sets = {"passages": [embed_text(t, x) for t, x in zip(chunks["title"], chunks["text"],
                                                              strict=True)]}
        if index.dir.has(layout.NAMES):
            sets["names"] = index.dir.table(layout.NAMES)["name"].astype(str).tolist()
            sets["facts"] = index.dir.table(layout.FACTS)["text"].astype(str).tolist()
        rng = np.random.default_rng(0)
        for name, texts in sets.items():
            if len(texts) < 4 * k + 50:
                continue
            pick = rng.choice(len(texts), min(sample, len(texts)), replace=False)
            x = index.embedder.encode([texts[i] for i in pick])
            nq = min(queries, len(x) // 5)
            q, db = x[:nq], x[nq:]
            found = {}
            for precision in PRECISIONS:
                flat = faiss.IndexFlatIP(db.shape[1])
                flat.add(codec_for(precision, db.shape[1]).round_trip(db))
                found[precision] = flat.search(q, k)[1]
            rows.append({"vectors": name, "n": len(db), "dim": int(db.shape[1]),
                         "queries": int(nq), "k": k,
                         "stored_as": index.config.vector_precision,
                         **{f"recall_{p}": recall_at(found["fp32"], found[p])
                            for p in PRECISIONS if p != "fp32"}})
    return rows


def host_only_runtime(device: str) -> Any:
    """A runtime whose every embedder is the stand-in (``bench/standin.py``)."""
    from standin import HashProjectionEmbedder

    from gpurag.runtime import Runtime

    params = inspect.signature(Runtime.create).parameters.values()
    if any(p.name == "embedder" or p.kind is p.VAR_KEYWORD for p in params):
        return Runtime.create(device=device, embedder=HashProjectionEmbedder())
    # a --baseline checkout from before the runtime took an embedder object (88085bf, the
    # issue's "today"): its embedder(spec, cache) method returns the stand-in
    runtime = Runtime.create(device=device)
    standin = HashProjectionEmbedder()
    runtime.embedder = lambda *_a, **_k: standin  # type: ignore[method-assign]
    return runtime


def tree_commit(tree: Path) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def child_build(args: argparse.Namespace) -> dict:
    os.environ["GPURAG_DEVICE"] = args.device
    os.environ.setdefault("GPURAG_PROGRESS", "0")
    from gpurag.config import IndexConfig
    from gpurag.pipeline.build import build

    runtime = host_only_runtime(args.device) if args.host_only else None

    with tempfile.TemporaryDirectory(prefix="gpurag-scale-") as tmp:
        src = Path(tmp) / "corpus.jsonl"
        n, text_bytes = write_prefix(Path(args.passages), args.n, src)
        input_bytes = src.stat().st_size
        out = Path(tmp) / "index"
        t = time.perf_counter()
        # cluster only when asked: a --baseline checkout's build() may not take it
        build(src, out, IndexConfig(), show_progress=False, runtime=runtime,
              **({"cluster": args.cluster_spec} if args.cluster_spec else {}))
        wall = time.perf_counter() - t
        manifest = json.loads((out / "manifest.json").read_text())
        timings = manifest.get("extra", manifest).get("timings_s", {})
        stages = {k[:-2]: {"s": v, "passages_per_s": n / v if v > 0 else None}
                  for k, v in timings.items() if isinstance(v, (int, float))}
        index_bytes = dir_bytes(out)
        result = {
            "passages": n, "text_bytes": text_bytes, "wall_s": wall,
            "passages_per_s": n / wall, "stages": stages,
            "counts": manifest.get("counts"), "components": manifest.get("components"),
            "input_bytes": input_bytes, "index_bytes": index_bytes,
            "index_over_input": index_bytes / max(input_bytes, 1),
            "index_over_text": index_bytes / max(text_bytes, 1),
            "index_files": file_bytes(out),
            "peak_rss_bytes": peak_rss_bytes(), **device_peak(),
            "extract_workers": os.environ.get("GPURAG_EXTRACT_WORKERS"),
            "cluster": args.cluster_spec or None,
            "tree": str(TREE), "commit": tree_commit(TREE), "host_only": args.host_only,
        }
        if args.index_digest:
            result["index_sha256"] = index_digest(out)
            result["index_files_sha256"] = file_digests(out)
        if not args.no_precision and not args.host_only:
            t = time.perf_counter()
            result["precision"] = storage_precision(out)
            result["precision_s"] = time.perf_counter() - t
    return result


def file_digests(index_dir: Path) -> dict[str, str]:
    """sha256 of every file of an index but the manifest, by relative path."""
    import hashlib

    return {p.relative_to(index_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(index_dir.rglob("*")) if p.is_file() and p.name != "manifest.json"}


def index_digest(index_dir: Path) -> str:
    """One sha256 over every file's relative path and sha256 (the manifest, which holds
    timings and dates, left out): equal digests mean byte-identical indexes."""
    import hashlib

    whole = hashlib.sha256()
    for p in sorted(q for q in index_dir.rglob("*") if q.is_file()):
        rel = p.relative_to(index_dir).as_posix()
        if rel == "manifest.json":
            continue
        whole.update(f"{rel}\0{hashlib.sha256(p.read_bytes()).hexdigest()}\n".encode())
    return whole.hexdigest()


# -- graph case (child) ------------------------------------------------------------------------
def _sync(device: str) -> None:
    torch = sys.modules.get("torch")
    if device.startswith("cuda") and torch is not None:
        torch.cuda.synchronize()


def _repeat(fn: Any, device: str, min_runs: int, max_runs: int, seconds: float) -> list[float]:
    """Wall times of ``fn(i)`` runs: at least ``min_runs``, then while under ``seconds``."""
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < max_runs and (len(samples) < min_runs
                                       or time.perf_counter() - start < seconds):
        _sync(device)
        t = time.perf_counter()
        fn(len(samples))
        _sync(device)
        samples.append(time.perf_counter() - t)
    return samples


def child_graph(args: argparse.Namespace) -> dict:
    import warnings

    from synthetic import power_law_csr, random_reset

    from gpurag.graph.csr import CSRGraph
    from gpurag.runtime import Runtime

    device = args.device
    t = time.perf_counter()
    (indptr, indices, weights), generator = power_law_csr(int(args.edges), device)
    gen_s = time.perf_counter() - t
    g = CSRGraph(indptr, indices, weights)
    n = g.n_nodes
    log(f"graph {g.n_edges / 1e6:.3g}M edges, {n} nodes by {generator} in {gen_s:.1f}s")
    backends = Runtime(device="cuda" if device.startswith("cuda") else "cpu")
    name = backends.describe()["ppr"]
    batches = [int(float(b)) for b in args.batches.split(",")]
    k = 10

    def query(reset: Any) -> Any:  # the query-time PPR component: only (q, k) reach the host
        return backends.ppr(g, reset, k=k, damping=0.8, tol=1e-4).ids

    result: dict = {"edges": int(g.n_edges), "nodes": int(n), "generator": generator,
                    "generate_s": gen_s, "ppr_backend": name, "ppr": [], "knn": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        t = time.perf_counter()
        query(random_reset(n, 2, 12345))  # warm-up: operators, caches, handles
        _sync(device)
        result["ppr_setup_s"] = time.perf_counter() - t
        for q in batches:
            resets = [random_reset(n, q, 1000 * q + i) for i in range(args.max_runs)]
            samples = _repeat(lambda i, rs=resets: query(rs[i]), device, args.min_runs,
                              args.max_runs, args.case_s)
            row = {"q": q, **percentiles(samples)}
            row["per_query_p50_ms"] = row["p50_ms"] / q
            row["queries_per_s"] = q / (row["p50_ms"] / 1e3)
            result["ppr"].append(row)
            log(f"  ppr+top{k} q={q}: p50 {row['p50_ms']:.1f} ms ({row['runs']} runs)")
    result["knn"] = knn_latency(n, batches, args)
    result["peak_rss_bytes"] = peak_rss_bytes()
    result.update(device_peak())
    return result


def knn_latency(n_nodes: int, batches: list[int], args: argparse.Namespace) -> list[dict]:
    from gpurag.backends.searcher import make_searcher

    n = min(n_nodes, args.knn_max)
    if n <= 0:
        return []
    rng = np.random.default_rng(1)
    db = rng.standard_normal((n, 384), dtype=np.float32)
    db /= np.linalg.norm(db, axis=1, keepdims=True)
    t = time.perf_counter()
    searcher = make_searcher(db, args.device)
    build_s = time.perf_counter() - t
    qs = db[rng.choice(n, max(batches), replace=n < max(batches))] + 0.05 * rng.standard_normal(
        (max(batches), 384), dtype=np.float32)
    del db
    searcher.search(qs[:1], 10)
    rows = []
    for q in batches:
        samples = _repeat(lambda _i, q=q: searcher.search(qs[:q], 10), args.device,
                          args.min_runs, args.max_runs, args.case_s)
        row = {"n": n, "dim": 384, "q": q, "k": 10, "implementation": searcher.implementation,
               "build_s": build_s, **percentiles(samples)}
        row["per_query_p50_ms"] = row["p50_ms"] / q
        rows.append(row)
        log(f"  knn {n}x384 q={q}: p50 {row['p50_ms']:.2f} ms")
    return rows


# -- parent --------------------------------------------------------------------------------------
def run_child(kind: str, extra: list[str], args: argparse.Namespace,
              tree: str | None = None) -> dict:
    remaining = args.budget_s - elapsed()
    if remaining < 5:
        return {"skipped": f"over the {args.budget_s:.0f} s budget"}
    cmd = [sys.executable, __file__, "--child", kind, "--device", args.device,
           "--batches", args.batches, "--min-runs", str(args.min_runs),
           "--max-runs", str(args.max_runs), "--case-s", str(args.case_s),
           "--knn-max", str(args.knn_max), "--passages", str(args.passages), *extra]
    if args.no_precision:
        cmd.append("--no-precision")
    cmd += ["--host-only"] if args.host_only else []
    cmd += ["--index-digest"] if args.index_digest else []
    root = Path(tree) if tree else REPO
    # gpurag's import sets OMP_WAIT_POLICY where the caller had not: a child (a --baseline
    # checkout's included) does not inherit it and sets what its own gpurag sets
    from gpurag.settings import without_library_defaults

    env0 = without_library_defaults()
    env = {**env0, "PYTHONPATH": os.pathsep.join(
        [str(root), env0.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "GPURAG_BENCH_TREE": str(root)}
    # The child is this script, guarded by `if __name__ == "__main__"`, so it may spawn
    # extraction workers as the command line does (a script is not trusted to by default).
    from gpurag.pipeline.extract_pool import available_cores

    env.setdefault("GPURAG_EXTRACT_WORKERS", str(available_cores()))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env,
                              timeout=remaining)
    except subprocess.TimeoutExpired:
        return {"skipped": f"cut at the {args.budget_s:.0f} s budget"}
    if proc.returncode != 0:
        return {"error": f"exit code {proc.returncode}", "stdout_tail": proc.stdout[-2000:]}
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds of the case and every process it started (a cluster's workers included):
    # steadier than wall time on a shared machine
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "cpu_s": cpu}


def machine(device: str) -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")),
                         None)
        info["cpu"] = model or info["cpu"]
        info["mem_total_gb"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                                     / 2**30, 1)
        info["load_avg_at_start"] = os.getloadavg()
    except (OSError, ValueError):
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        if device.startswith("cuda"):
            info["gpu"] = torch.cuda.get_device_name(0)
            info["cuda"] = torch.version.cuda
    except ImportError:
        pass
    return info


def table(result: dict) -> str:
    lines = [f"device {result['device']} | {result['machine'].get('cpu')} "
             f"({result['machine'].get('cpu_count')} cpus)"]
    for b in result["build"]:
        if "stages" not in b:
            lines.append(f"build {b.get('prefix')}: {b.get('skipped') or b.get('error')}")
            continue
        stages = ", ".join(f"{k} {v['passages_per_s']:.0f}/s" for k, v in b["stages"].items()
                           if v["passages_per_s"])
        tag = f"[{b.get('commit') or 'baseline'}] " if b.get("baseline") else ""
        on = (f" on {b['cluster']} ({b.get('over_single', 0):.2f}x single's wall time, "
              f"{b.get('cpu_over_single', 0):.2f}x its CPU, same bytes: {b.get('same_bytes')})"
              if b.get("cluster") else "")
        lines.append(f"build {tag}{b['passages']} passages{on}: {b['passages_per_s']:.1f} "
                     "passages/s, "
                     f"peak RSS {b['peak_rss_bytes'] / 2**30:.2f} GiB, index "
                     f"{b.get('index_over_input', 0):.1f}x input "
                     f"({b['index_over_text']:.1f}x text) | {stages}"
                     + (f" | sha256 {b['index_sha256'][:12]}" if b.get("index_sha256") else ""))
        for p in b.get("precision", []):
            lines.append(f"  {p['vectors']:<20} n={p['n']:<7} recall@{p['k']} fp16 "
                         f"{p['recall_fp16']:.4f} int8 {p['recall_int8']:.4f}")
    for gr in result["graph"]:
        if "ppr" not in gr:
            why = gr.get("skipped") or gr.get("error")
            lines.append(f"graph {gr.get('edges_requested')}: {why}")
            continue
        lines.append(f"graph {gr['edges'] / 1e6:.3g}M edges / {gr['nodes']} nodes "
                     f"({gr['ppr_backend']}), peak RSS {gr['peak_rss_bytes'] / 2**30:.2f} GiB"
                     + (f", device {gr['peak_device_bytes'] / 2**30:.2f} GiB"
                        if "peak_device_bytes" in gr else ""))
        for r in gr["ppr"]:
            lines.append(f"  ppr+top10 q={r['q']:<5} p50 {r['p50_ms']:9.2f} ms  p95 "
                         f"{r['p95_ms']:9.2f} ms  {r['per_query_p50_ms']:8.3f} ms/query")
        for r in gr["knn"]:
            lines.append(f"  knn {r['n']}x384 q={r['q']:<5} p50 {r['p50_ms']:9.2f} ms  p95 "
                         f"{r['p95_ms']:9.2f} ms  ({r['implementation']})")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--passages", default=str(DEFAULT_PASSAGES))
    ap.add_argument("--prefixes", default="2000",
                    help="passage prefixes to build, comma-separated (0 = all); '' for none")
    ap.add_argument("--edges", default="1e6", help="synthetic graph sizes; '' for none")
    ap.add_argument("--batches", default="1,64,1024")
    ap.add_argument("--knn-max", type=int, default=100_000, help="vectors in the kNN case")
    ap.add_argument("--min-runs", type=int, default=3)
    ap.add_argument("--max-runs", type=int, default=30)
    ap.add_argument("--case-s", type=float, default=5.0, help="seconds of repeats per batch size")
    ap.add_argument("--budget-s", type=float, default=600.0)
    ap.add_argument("--no-precision", action="store_true")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    ap.add_argument("--note", default="", help="free text stored with the result")
    ap.add_argument("--host-only", action="store_true",
                    help="build with the stand-in embedder (bench/standin.py): host stages only")
    ap.add_argument("--baseline", default="",
                    help="another checkout: each prefix is built with its gpurag first")
    ap.add_argument("--index-digest", action="store_true",
                    help="store one sha256 over the built index's files (manifest left out)")
    ap.add_argument("--child", choices=["build", "graph"], help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--cluster", default="",
                    help="also build each prefix on these clusters, comma-separated "
                    "(local:N or scheduler addresses; needs gpurag[distributed])")
    ap.add_argument("--cluster-spec", default="", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    _START[0] = time.perf_counter()
    if args.cluster:  # a cluster's build is compared with the single-process one by digest
        args.index_digest = True
    if args.child:
        out = child_build(args) if args.child == "build" else child_graph(args)
        print(json.dumps(out, default=str))
        return out
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    result: dict = {"date": date, "device": args.device, "machine": machine(args.device),
                    "args": vars(args), "note": args.note, "build": [], "graph": []}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", result["machine"].get("gpu", args.device)).strip("-")
    slug += "_hostonly" if args.host_only else ""
    slug += "_cluster" if args.cluster else ""
    path = out_dir / f"scale_{date[:10]}_{slug.lower()}.json"

    def save() -> None:
        result["wall_s"] = elapsed()
        path.write_text(json.dumps(result, indent=1, default=str) + "\n")

    prefixes = [int(float(p)) for p in args.prefixes.split(",") if p.strip()]
    if prefixes and not Path(args.passages).is_file():
        result["build"].append({"skipped": f"passages file not found: {args.passages}"})
        prefixes = []
    for n in prefixes:
        for tree in ([args.baseline] if args.baseline else []) + [None]:
            log(f"build of the first {n or 'all'} passages"
                + (f" with {tree}" if tree else ""))
            row = {"prefix": n, "baseline": bool(tree),
                   **run_child("build", ["--n", str(n)], args, tree)}
            result["build"].append(row)
            save()
        for spec in [c.strip() for c in args.cluster.split(",") if c.strip()]:
            log(f"build of the first {n or 'all'} passages on --cluster {spec}")
            on = {"prefix": n, **run_child("build", ["--n", str(n), "--cluster-spec", spec],
                                           args)}
            if "wall_s" in on and "wall_s" in row:
                on["over_single"] = on["wall_s"] / row["wall_s"]
                on["cpu_over_single"] = on["cpu_s"] / row["cpu_s"]
                on["same_bytes"] = on.get("index_sha256") == row.get("index_sha256")
            result["build"].append(on)
            save()
    for e in [int(float(x)) for x in args.edges.split(",") if x.strip()]:
        log(f"synthetic graph of {e:.3g} edges")
        result["graph"].append({"edges_requested": e,
                                **run_child("graph", ["--edges", str(e)], args)})
        save()
    save()
    print(table(result), flush=True)
    print(f"wrote {path}", flush=True)
    return result


if __name__ == "__main__":
    main()
