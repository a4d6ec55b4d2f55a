"""GPU backend timings: copy bandwidth (the ceiling), batched PPR, exact kNN, and the CPU ratio.

Writes one JSON file under ``--out`` (``gpu_bench_<date>_<device>.json``) and prints a short
table last. Sections:

* ``copy``: device-to-device copy (bytes read + written per second: the bandwidth ceiling) and
  host-to-device upload;
* ``ppr``: ``kernels.ppr_batched`` on synthetic power-law graphs (Chung-Lu, symmetric,
  duplicate edges summed into weights) for each batch size: ms per query, iterations, ms per
  iteration, and achieved GB/s as (a) the matrix bytes per iteration and (b) the compulsory
  bytes per iteration (matrix + the dense iterate read and written once), against the ceiling;
* ``ppr_cpu``: the CPU backend (``gpurag.graph.ppr.ppr_power``, SciPy) on the same graph:
  a full solve for one query and a few iterations for larger batches (ms per iteration
  extrapolated to the GPU's iteration count), plus frontier push for one query (what the CPU
  backend's ``auto`` picks for few seeds);
* ``knn``: ``kernels.knn.ExactIndex`` (fp16 scan + fp32 re-rank on CUDA) over an ``N x d`` unit
  vector database, and the same on the CPU (torch float32 matmul, or faiss-cpu when present);
* ``embed``: the torch MiniLM embedder (``gpurag.embed.torch_minilm``) in float16 and bfloat16
  on the device over ``--embed-n`` passages (the shared Wikipedia corpus when found, else the
  sample corpus cut into passages): passages/s, tokens/s, peak device memory; and the ONNX
  embedder on the CPU over ``--embed-cpu-n`` of them, for the ratio.

A time budget (``--budget-s``) skips the CPU comparisons that would not fit.

    python bench/gpu_bench.py                                 # on the GPU machine, defaults
    python bench/gpu_bench.py --device cpu --edges 1e6 --batches 1,64 --knn-n 200000
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import power_law_torch as power_law_graph
from synthetic import random_reset

from gpurag.graph.csr import CSRGraph
from gpurag.graph.ppr import ppr_power, ppr_push_batch
from gpurag.kernels.knn import ExactIndex
from gpurag.kernels.ppr_batched import build_operator, ppr_batched

REPO = Path(__file__).resolve().parents[1]

T0 = time.perf_counter()


def elapsed() -> float:
    return time.perf_counter() - T0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Any, device: torch.device, repeat: int = 1) -> tuple[float, Any]:
    """Mean wall seconds of ``fn()`` over ``repeat`` runs (synchronized), and its last result."""
    sync(device)
    t = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    sync(device)
    return (time.perf_counter() - t) / repeat, out


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


# -- copy bandwidth -----------------------------------------------------------------------------
def copy_bandwidth(device: torch.device, gib: float) -> dict:
    n = int(gib * 2**30) // 4
    x = torch.ones(n, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    y.copy_(x)
    t, _ = timed(lambda: y.copy_(x), device, repeat=10)
    out = {"bytes": 2 * x.numel() * 4, "d2d_gbs": 2 * x.numel() * 4 / t / 1e9}
    if device.type == "cuda":
        host = torch.ones(n // 4, dtype=torch.float32).pin_memory()
        dev = torch.empty(n // 4, dtype=torch.float32, device=device)
        dev.copy_(host)
        t, _ = timed(lambda: dev.copy_(host, non_blocking=True), device, repeat=5)
        out["h2d_gbs"] = host.numel() * 4 / t / 1e9
    return out


# -- PPR ------------------------------------------------------------------------------------------
def bench_ppr(
    device: torch.device, n_edges: int, batches: list[int], ceiling_gbs: float, args: Any
) -> tuple[list[dict], list[dict]]:
    t_gen, csr = timed(lambda: power_law_graph(n_edges, device), device)
    indptr, indices, weights = csr
    n, nnz = indptr.numel() - 1, indices.numel()
    t_op, op = timed(lambda: build_operator(*csr, device), device)
    csr = None
    matrix_bytes = op.nbytes()
    label = f"{nnz / 1e6:.3g}M edges"
    print(f"[{elapsed():6.1f}s] graph {label}: n={n} nnz={nnz} gen {t_gen:.2f}s "
          f"operator {t_op:.2f}s", flush=True)
    with warnings.catch_warnings():  # warm-up (library handles, allocator)
        warnings.simplefilter("ignore", RuntimeWarning)
        ppr_batched(op, random_reset(n, 2, 0), max_iter=2, k=10)
    rows: list[dict] = []
    for q in batches:
        reset = random_reset(n, q, q)
        stats: dict = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            t, _ = timed(lambda o=op, r=reset, s=stats: ppr_batched(o, r, k=10, stats=s), device)
        iters = int(sum(stats["iterations"]) / len(stats["iterations"]))
        chunks = len(stats["iterations"])
        per_iter = t / max(sum(stats["iterations"]), 1)
        dense_bytes = 2 * n * min(q, stats["batch_size"]) * 4  # iterate read + written once
        rows.append({
            "graph": label, "n": n, "nnz": nnz, "q": q, "backend": "kernels.ppr_batched",
            "device": device.type, "ms_total": 1e3 * t, "ms_per_query": 1e3 * t / q,
            "iterations": iters, "chunks": chunks, "ms_per_iter": 1e3 * per_iter,
            "matrix_gbs": matrix_bytes / per_iter / 1e9,
            "compulsory_gbs": (matrix_bytes + dense_bytes) / per_iter / 1e9,
            "floor_ms_per_iter": 1e3 * (matrix_bytes + dense_bytes) / (ceiling_gbs * 1e9),
            "max_l1_change": max(stats["max_l1_change"]),
        })
        print(f"[{elapsed():6.1f}s]   q={q}: {1e3 * t:.1f} ms ({iters} it, {chunks} chunk)",
              flush=True)
    cpu_rows = bench_ppr_cpu(indptr, indices, weights, label, batches, rows, args)
    op = indptr = indices = weights = None
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows, cpu_rows


def bench_ppr_cpu(
    indptr: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, label: str,
    batches: list[int], gpu_rows: list[dict], args: Any,
) -> list[dict]:
    """The CPU backend on the same graph, within the time budget."""
    if args.no_cpu or elapsed() > args.budget_s * 0.6:
        return []
    g = CSRGraph(indptr.cpu().numpy(), indices.cpu().numpy(), weights.cpu().numpy())
    n = g.n_nodes
    out: list[dict] = []
    gpu_iters = {r["q"]: r["iterations"] for r in gpu_rows}
    gpu_ms = {r["q"]: r["ms_total"] for r in gpu_rows}
    big = g.n_edges > args.cpu_full_max_edges  # large graphs: per-iteration timings only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        t = time.perf_counter()
        ppr_power(g, random_reset(n, 1, 0), max_iter=1)  # builds and caches P^T
        setup_ms = 1e3 * (time.perf_counter() - t)
        for q in batches:
            if elapsed() > args.budget_s * 0.75 or q > (1 if big else args.cpu_max_q):
                break
            reset = random_reset(n, q, q)
            its = 2 if big else 3
            t = time.perf_counter()
            ppr_power(g, reset, max_iter=its)
            per_iter = (time.perf_counter() - t) / its
            row = {
                "graph": label, "q": q, "backend": "scipy ppr_power (cpu)",
                "ms_per_iter": 1e3 * per_iter, "setup_ms": setup_ms,
                "ms_total_est": 1e3 * per_iter * gpu_iters.get(q, 1),
            }
            if q == 1 and not big:  # one full solve, measured
                t = time.perf_counter()
                ppr_power(g, reset)
                row["ms_total_measured"] = 1e3 * (time.perf_counter() - t)
            row["ms_per_query_est"] = row["ms_total_est"] / q
            row["gpu_speedup"] = row["ms_total_est"] / gpu_ms[q] if q in gpu_ms else None
            out.append(row)
        if elapsed() < args.budget_s * 0.75 and not args.no_push and not big:
            t = time.perf_counter()
            ppr_push_batch(g, random_reset(n, 1, 1))
            ms = 1e3 * (time.perf_counter() - t)
            out.append({"graph": label, "q": 1, "backend": "scipy push eps=1e-6 (cpu auto)",
                        "ms_total_est": ms, "ms_per_query_est": ms,
                        "gpu_speedup": ms / gpu_ms[1] if 1 in gpu_ms else None})
    print(f"[{elapsed():6.1f}s]   cpu baseline: {len(out)} rows", flush=True)
    return out


# -- kNN -------------------------------------------------------------------------------------------
def bench_knn(device: torch.device, n: int, dim: int, queries: list[int], args: Any) -> list[dict]:
    gen = torch.Generator(device=device).manual_seed(1)
    db = torch.randn(n, dim, device=device, generator=gen)
    db /= db.norm(dim=1, keepdim=True)
    index = ExactIndex(dim, device)
    index.add(db)
    rows: list[dict] = []
    qmax = torch.randn(max(queries), dim, device=device, generator=gen)
    qmax /= qmax.norm(dim=1, keepdim=True)
    index.search(qmax[:1], 10)  # warm-up
    for q in queries:
        t, _ = timed(lambda q=q: index.search(qmax[:q], 10), device, repeat=3)
        rows.append({
            "n": n, "dim": dim, "q": q, "k": 10, "device": device.type,
            "backend": f"kernels.knn ({str(index.compute_dtype).replace('torch.', '')} scan"
                       + (" + fp32 rerank)" if index.rerank else ")"),
            "ms_total": 1e3 * t, "ms_per_query": 1e3 * t / q,
            "tflops": 2 * q * n * dim / t / 1e12,
            "scan_gbs": n * dim * index._scan.element_size() / t / 1e9,
        })
        print(f"[{elapsed():6.1f}s] knn q={q}: {1e3 * t:.2f} ms", flush=True)
    if not args.no_cpu and device.type == "cuda" and elapsed() < args.budget_s * 0.85:
        host_db = db.cpu().numpy()
        host_q = qmax.cpu().numpy()
        index = db = None
        torch.cuda.empty_cache()
        rows += bench_knn_cpu(host_db, host_q, [q for q in queries if q <= args.cpu_max_q],
                              {r["q"]: r["ms_total"] for r in rows})
    return rows


def bench_knn_cpu(db: np.ndarray, qs: np.ndarray, queries: list[int], gpu_ms: dict) -> list[dict]:
    try:
        from gpurag.vectors.faiss_index import _faiss

        faiss = _faiss()
        index = faiss.IndexFlatIP(db.shape[1])
        index.add(db)
        name = "faiss-cpu IndexFlatIP"
        search = index.search
    except ImportError:
        index = ExactIndex(db.shape[1], "cpu")
        index.add(db)
        name = "kernels.knn (cpu fp32)"
        search = index.search
    rows = []
    for q in queries:
        t = time.perf_counter()
        search(qs[:q], 10)
        t = time.perf_counter() - t
        rows.append({"n": db.shape[0], "dim": db.shape[1], "q": q, "k": 10, "device": "cpu",
                     "backend": name, "ms_total": 1e3 * t, "ms_per_query": 1e3 * t / q,
                     "gpu_speedup": 1e3 * t / gpu_ms[q] if q in gpu_ms else None})
        print(f"[{elapsed():6.1f}s] knn cpu q={q}: {1e3 * t:.1f} ms", flush=True)
    return rows


# -- embedder ------------------------------------------------------------------------------------
def embed_texts(n: int, passages: str) -> tuple[list[str], str]:
    """``n`` passages: a prefix of the shared corpus when present, else the sample corpus cut
    into ~400-character pieces and repeated."""
    import gzip

    path = Path(passages)
    if path.is_file():
        texts = []
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                rec = json.loads(line)
                texts.append(f"{rec.get('title', '')}\n{rec['text']}")
                if len(texts) >= n:
                    break
        return texts, str(path)
    docs = [json.loads(x)["text"] for x in
            (REPO / "examples" / "sample" / "corpus.jsonl").read_text().splitlines() if x]
    pieces = [d[i : i + 400] for d in docs for i in range(0, len(d), 400)]
    return [pieces[i % len(pieces)] for i in range(n)], "examples/sample (repeated)"


def bench_embed(device: torch.device, args: Any) -> list[dict]:
    from gpurag.embed.onnx_minilm import OnnxMiniLMEmbedder
    from gpurag.embed.torch_minilm import TorchMiniLMEmbedder

    texts, source = embed_texts(args.embed_n, args.passages)
    rows: list[dict] = []
    onnx = OnnxMiniLMEmbedder()
    tokens = int(np.minimum(np.asarray(onnx.count_tokens(texts)) + 2, onnx.max_tokens).sum())
    ref = None
    dtypes = ["float16", "bfloat16"] if device.type == "cuda" else ["float32"]
    for dtype in dtypes:
        emb = TorchMiniLMEmbedder(device=str(device), dtype=dtype)
        emb.encode(texts[:256])  # warm-up
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t, vecs = timed(lambda e=emb: e.encode(texts), device)
        row = {"backend": emb.implementation, "device": device.type, "dtype": dtype,
               "passages": len(texts), "source": source, "s": t,
               "passages_per_s": len(texts) / t, "tokens_per_s": tokens / t,
               "batch_token_budget": emb.batch_token_budget()}
        if device.type == "cuda":
            row["peak_device_bytes"] = int(torch.cuda.max_memory_allocated(device))
        rows.append(row)
        print(f"[{elapsed():6.1f}s] embed {dtype}: {row['passages_per_s']:.0f} passages/s",
              flush=True)
        ref = vecs if ref is None else ref
        del emb
    if not args.no_cpu and elapsed() < args.budget_s * 0.9:
        m = min(len(texts), args.embed_cpu_n)
        t = time.perf_counter()
        cpu_vecs = onnx.encode(texts[:m])
        t = time.perf_counter() - t
        rows.append({"backend": onnx.implementation, "device": "cpu", "dtype": "int8 weights",
                     "passages": m, "source": source, "s": t, "passages_per_s": m / t,
                     "min_cosine_vs_first": float((cpu_vecs * ref[:m]).sum(axis=1).min())})
        for r in rows[:-1]:
            r["speedup_vs_onnx_cpu"] = r["passages_per_s"] / rows[-1]["passages_per_s"]
        print(f"[{elapsed():6.1f}s] embed onnx cpu: {rows[-1]['passages_per_s']:.0f} passages/s",
              flush=True)
    return rows


# -- main ------------------------------------------------------------------------------------------
def parse_counts(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def table(result: dict) -> str:
    ceiling = result["copy"]["d2d_gbs"]
    lines = [f"device: {result['device']}  copy ceiling {ceiling:.0f} GB/s"
             + (f", h2d {result['copy']['h2d_gbs']:.1f} GB/s" if "h2d_gbs" in result["copy"]
                else ""),
             f"{'PPR graph':<14}{'q':>6}{'ms/query':>11}{'iters':>7}{'ms/iter':>9}"
             f"{'matrix GB/s':>13}{'compul. GB/s':>14}{'% ceil':>8}{'floor ms/it':>13}"]
    for r in result["ppr"]:
        lines.append(
            f"{r['graph']:<14}{r['q']:>6}{r['ms_per_query']:>11.3f}{r['iterations']:>7}"
            f"{r['ms_per_iter']:>9.3f}{r['matrix_gbs']:>13.1f}{r['compulsory_gbs']:>14.1f}"
            f"{100 * r['compulsory_gbs'] / ceiling:>7.0f}%{r['floor_ms_per_iter']:>13.3f}")
    for r in result["ppr_cpu"]:
        speed = f"  kernel speedup x{r['gpu_speedup']:.3g}" if r.get("gpu_speedup") else ""
        lines.append(f"{r['graph']:<14}{r['q']:>6}{r['ms_per_query_est']:>11.3f}"
                     f"  {r['backend']}{speed}")
    lines.append(f"{'kNN N x d':<16}{'q':>6}{'ms/query':>11}{'TFLOP/s':>9}  backend")
    for r in result["knn"]:
        speed = f"  kernel speedup x{r['gpu_speedup']:.3g}" if r.get("gpu_speedup") else ""
        tf = f"{r['tflops']:>9.1f}" if "tflops" in r else f"{'':>9}"
        lines.append(f"{r['n']:>9} x {r['dim']:<4}{r['q']:>6}{r['ms_per_query']:>11.3f}{tf}"
                     f"  {r['backend']}{speed}")
    for r in result.get("embed", []):
        if "error" in r:
            lines.append(f"embed: {r['error']}")
            continue
        speed = (f"  x{r['speedup_vs_onnx_cpu']:.3g} vs onnx cpu"
                 if r.get("speedup_vs_onnx_cpu") else "")
        lines.append(f"embed {r['passages']} passages: {r['passages_per_s']:>9.0f} passages/s"
                     f"  {r['backend']}{speed}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--edges", default="1e7,1e8", help="graph sizes (stored entries)")
    ap.add_argument("--batches", default="1,64,256,1024")
    ap.add_argument("--knn-n", type=int, default=1_000_000)
    ap.add_argument("--knn-dim", type=int, default=384)
    ap.add_argument("--knn-queries", default="1,64,1024")
    ap.add_argument("--copy-gib", type=float, default=2.0)
    ap.add_argument("--cpu-max-q", type=int, default=64, help="largest batch timed on the CPU")
    ap.add_argument("--cpu-full-max-edges", type=float, default=2e7,
                    help="above this, the CPU backend gets per-iteration timings of q=1 only")
    ap.add_argument("--no-cpu", action="store_true", help="skip the CPU backend comparisons")
    ap.add_argument("--no-push", action="store_true", help="skip the CPU push timing")
    ap.add_argument("--embed-n", type=int, default=20000, help="passages embedded (0: skip)")
    ap.add_argument("--embed-cpu-n", type=int, default=1000, help="of those, by ONNX on the CPU")
    ap.add_argument("--passages", default=str(REPO.parent / "shared" / "data" / "enwiki_passages"
                                                  / "passages.jsonl.gz"))
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    name = device_name(device)
    result: dict = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": name, "device_type": device.type, "torch": torch.__version__,
        "cuda": torch.version.cuda, "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(), "args": vars(args),
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or device.type
    path = out_dir / f"gpu_bench_{result['date'][:10]}_{slug}.json"

    def save() -> None:  # after every section, so a run cut short keeps what it measured
        result["wall_s"] = elapsed()
        path.write_text(json.dumps(result, indent=1, default=str) + "\n")

    result["copy"] = copy_bandwidth(device, args.copy_gib)
    result["ppr"], result["ppr_cpu"], result["knn"] = [], [], []
    save()
    print(f"[{elapsed():6.1f}s] copy {result['copy']}", flush=True)
    for e in parse_counts(args.edges):
        if elapsed() > args.budget_s * 0.7:
            print(f"skipping PPR on {e} edges: over budget", flush=True)
            continue
        gpu_rows, cpu_rows = bench_ppr(device, e, parse_counts(args.batches),
                                       result["copy"]["d2d_gbs"], args)
        result["ppr"] += gpu_rows
        result["ppr_cpu"] += cpu_rows
        save()
    if args.knn_n:
        result["knn"] = bench_knn(device, args.knn_n, args.knn_dim,
                                  parse_counts(args.knn_queries), args)
    save()
    if args.embed_n:
        try:
            result["embed"] = bench_embed(device, args)
        except Exception as exc:  # report, keep the other sections
            result["embed"] = [{"error": f"{type(exc).__name__}: {exc}"}]
            print(f"embed bench failed: {exc!r}", flush=True)
    save()
    print(f"wrote {path}")
    print(table(result))
    return result


if __name__ == "__main__":
    main()
