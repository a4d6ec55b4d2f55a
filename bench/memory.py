"""Agent memory throughput: appends/s and search latency at growing trace counts (CPU).

Synthetic chat traces ("Name12 Surname7 met Name40 Surname3 at Place88 about the Topic5
plan.") in sessions of 20 turns. Embedding every trace would take hours on 2 cores at 1M, so
traces come with precomputed random unit vectors and queries with vectors too: the numbers
are the memory's own work (durable log append + fsync, vocabulary growth and surface tagging,
FAISS add; at search: lexical, dense, one PPR per anchor over the entity CSR, the temporal
view, fusion and the consistency filter). ``--ppr-device cuda`` also times the batched PPR of
the search's anchors on the device when one is present.

Usage: python bench/memory.py [--sizes 10000,100000] [--queries 50] [--work DIR]
Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpurag.memory import Memory

DIM = 384
SESSION_TURNS = 20


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _names(rng: np.random.Generator, n: int, prefix: str) -> list[str]:
    return [f"{prefix}{i}" for i in rng.permutation(n)]


def synthetic(n: int, seed: int = 0) -> tuple[list[dict], np.ndarray]:
    """``n`` traces over a vocabulary that grows with n (about n/20 people)."""
    rng = np.random.default_rng(seed)
    people = max(50, n // 20)
    first, last = _names(rng, people, "Ann"), _names(rng, people, "Berg")
    places = _names(rng, max(20, n // 100), "Porto")
    topics = _names(rng, 200, "Topic")
    p = rng.integers(0, people, size=(n, 2))
    pl = rng.integers(0, len(places), size=n)
    tp = rng.integers(0, len(topics), size=n)
    traces = [{
        "text": f"{first[a]} {last[a]} met {first[b]} {last[b]} at {places[c]} about the "
                f"{topics[d]} plan.",
        "session": f"s{i // SESSION_TURNS}", "turn": i % SESSION_TURNS, "time": float(i)}
        for i, (a, b, c, d) in enumerate(zip(p[:, 0], p[:, 1], pl, tp, strict=True))]
    vec = rng.standard_normal((n, DIM)).astype(np.float32)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    return traces, vec


def run_size(n: int, n_queries: int, work: Path, batch: int) -> dict:
    traces, vec = synthetic(n)
    path = work / f"mem{n}"
    shutil.rmtree(path, ignore_errors=True)
    mem = Memory.create(path, embedder=_NoEmbedder())
    t0 = time.perf_counter()
    for lo in range(0, n, batch):
        mem.add_many(traces[lo:lo + batch], vectors=vec[lo:lo + batch])
    bulk_s = time.perf_counter() - t0
    log(f"{n}: bulk append {n / bulk_s:,.0f} traces/s")
    rng = np.random.default_rng(1)
    qidx = rng.integers(0, n, size=n_queries)
    questions = [f"When did {traces[i]['text'].split(' met ')[0]} meet "
                 f"{traces[i]['text'].split(' met ')[1].split(' at ')[0]}?" for i in qidx]
    qvec = vec[qidx] + 0.5 * rng.standard_normal((n_queries, DIM)).astype(np.float32) / 20
    t1 = time.perf_counter()
    mem.search(questions[0], k=10, vector=qvec[0])  # builds the lexical index and the CSR
    first_s = time.perf_counter() - t1
    lat = []
    for q, v in zip(questions, qvec, strict=True):
        t2 = time.perf_counter()
        mem.search(q, k=10, vector=v)
        lat.append((time.perf_counter() - t2) * 1000)
    # single durable appends, each followed by a search that must see it
    single, rw = [], []
    extra, evec = synthetic(20, seed=9)
    for t, v in zip(extra, evec, strict=True):
        t3 = time.perf_counter()
        mem.add(t["text"], session="bench", turn=None, time=None, vector=v)
        single.append((time.perf_counter() - t3) * 1000)
        t4 = time.perf_counter()
        mem.search(questions[0], k=10, vector=qvec[0])
        rw.append((time.perf_counter() - t4) * 1000)
    t5 = time.perf_counter()
    stats = mem.compact()
    compact_s = time.perf_counter() - t5
    info = mem.info()
    mem.close()
    t6 = time.perf_counter()
    Memory.open(path, readonly=True, embedder=_NoEmbedder()).close()
    open_s = time.perf_counter() - t6
    shutil.rmtree(path, ignore_errors=True)
    return {
        "traces": n, "entities": info["entities"], "graph_edges": info["graph_edges"],
        "bulk_append_traces_per_s": n / bulk_s, "bulk_batch": batch,
        "single_append_ms_p50": float(np.percentile(single, 50)),
        "single_append_ms_p95": float(np.percentile(single, 95)),
        "first_search_s": first_s,
        "search_ms_p50": float(np.percentile(lat, 50)),
        "search_ms_p95": float(np.percentile(lat, 95)),
        "search_after_append_ms_p50": float(np.percentile(rw, 50)),
        "compact_s": compact_s, "open_after_compact_s": open_s, "compact": stats,
    }


class _NoEmbedder:
    """Stands in for the embedder: every vector in this bench is precomputed."""

    name = "precomputed"
    dim = DIM
    max_tokens = 256

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        raise RuntimeError("bench/memory.py passes precomputed vectors")


def ppr_device(n: int, device: str) -> dict:
    """The batched anchor PPR of the search on ``device`` (kernels backend)."""
    from gpurag.backends.ppr import scores_part
    from gpurag.memory.views import anchor_mass

    traces, vec = synthetic(n)
    with tempfile.TemporaryDirectory() as tmp:
        mem = Memory.create(Path(tmp) / "m", embedder=_NoEmbedder())
        mem.add_many(traces, vectors=vec)
        mem._refresh()
        anchors = np.unique(np.random.default_rng(2).integers(0, mem._graph.n_nodes, 64))
        out = {}
        for dev in ("cpu", device):
            fn = scores_part(dev)
            name = fn.implementation
            anchor_mass(mem._graph, anchors, fn, 0.5)
            t = time.perf_counter()
            for _ in range(5):
                anchor_mass(mem._graph, anchors, fn, 0.5)
            out[dev] = {"backend": name, "ms_per_batch": (time.perf_counter() - t) * 200,
                        "anchors": len(anchors), "entities": mem._graph.n_nodes}
        mem.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--batch", type=int, default=1000, help="traces per add_many in bulk")
    ap.add_argument("--work", help="folder for the memories (default: a temporary one)")
    ap.add_argument("--ppr-device", help="also time the anchor PPR batch on this device")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="gpurag-bench-memory-")
    work = Path(args.work or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    out = {"bench": "memory", "machine": platform.machine(), "python": platform.python_version(),
           "note": "precomputed random vectors: embedding excluded", "sizes": []}
    for n in (int(s) for s in args.sizes.split(",")):
        out["sizes"].append(run_size(n, args.queries, work, args.batch))
    if args.ppr_device:
        out["ppr_device"] = ppr_device(int(args.sizes.split(",")[-1]), args.ppr_device)
    print(json.dumps(out, indent=1))
    tmp.cleanup()


if __name__ == "__main__":
    main()
