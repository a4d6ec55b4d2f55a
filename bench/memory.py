"""Agent memory throughput: appends/s and search latency at growing trace counts (CPU).

Synthetic chat traces ("Name12 Surname7 met Name40 Surname3 at Place88 about the Topic5
plan.") in sessions of 20 turns. Embedding every trace would take hours on 2 cores at 1M, so
traces come with precomputed random unit vectors and queries with vectors too: the numbers
are the memory's own work (durable log append + fsync, vocabulary growth and surface tagging,
FAISS add; at search: lexical, dense, relational, temporal, fusion and the consistency
filter). From ``scale_from`` traces (50k) the memory reads its indexed path
(gpurag/memory/scale.py); up to ``--compare-upto`` the small path's scans are timed on the same
memory in the same run. Each size runs in its own process, so its peak RSS is its own.
``--ppr-device cuda`` also times the small path's batched anchor PPR on the device.

Usage: python bench/memory.py [--sizes 10000,100000,1000000] [--queries 50] [--work DIR]
Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import shutil
import subprocess
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
    """``n`` traces over a vocabulary that grows with n (about n/20 people), and their
    vectors (:func:`vectors`)."""
    return texts(n, seed), vectors(0, n, seed)


def texts(n: int, seed: int = 0) -> list[dict]:
    return _generate(n, seed)[0]


def _generate(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    people = max(50, n // 20)
    first, last = _names(rng, people, "Ann"), _names(rng, people, "Berg")
    places = _names(rng, max(20, n // 100), "Porto")
    topics = _names(rng, 200, "Topic")
    p = rng.integers(0, people, size=(n, 2))
    pl = rng.integers(0, len(places), size=n)
    tp = rng.integers(0, len(topics), size=n)
    rows = [{
        "text": f"{first[a]} {last[a]} met {first[b]} {last[b]} at {places[c]} about the "
                f"{topics[d]} plan.",
        "session": f"s{i // SESSION_TURNS}", "turn": i % SESSION_TURNS, "time": float(i)}
        for i, (a, b, c, d) in enumerate(zip(p[:, 0], p[:, 1], pl, tp, strict=True))]
    names = [f"{a} {b}" for a, b in zip(first, last, strict=True)]
    return rows, names, places, topics, p, pl, tp


def direct_load(mem: Memory, n: int, batch: int = 10_000) -> None:
    """Fill an empty memory with the ``n`` template traces without the write-time rules'
    regex passes: the vocabulary and each trace's tags come from the generator (which knows
    the names it wrote), the log and vectors are appended durably through the memory's own
    log in batches. For the 1M search figures, where the write path would take over an hour
    on the shared 2 cores; :func:`check_direct_load` shows it gives the state and the
    results of ``add_many``."""
    from gpurag.memory.derived import names_key
    from gpurag.memory.vocab import name_tokens

    rows, names, places, topics, p, pl, tp = _generate(n)
    vocab = mem.vocab
    seen_name = np.full(len(names), -1, np.int64)
    seen_place = np.full(len(places), -1, np.int64)
    seen_topic = np.full(len(topics), -1, np.int64)
    order = {}  # first-appearance order of entries, as learn() adds them

    def entry(kind, table, i, surface):
        if table[i] < 0:
            table[i] = len(order)
            order[(kind, i)] = surface
        return int(table[i])

    tags = []
    for a, b, c, d in zip(p[:, 0], p[:, 1], pl, tp, strict=True):
        tags.append(list(dict.fromkeys([entry("n", seen_name, a, names[a]),
                                        entry("n", seen_name, b, names[b]),
                                        entry("p", seen_place, c, places[c]),
                                        entry("t", seen_topic, d, topics[d])])))
    surfaces = list(order.values())
    for surface, toks in zip(surfaces, name_tokens(surfaces), strict=True):
        key = "".join(toks)
        vocab.index[key] = len(vocab.keys)
        vocab.keys.append(key)
        vocab.surfaces.append(surface)
        vocab.n_tokens.append(len(toks))
        vocab.first_last.append((toks[0], toks[-1]))
    counts = np.bincount(np.concatenate([p[:, 0], p[:, 1]]), minlength=len(names))
    for values, cnt in ((seen_name, counts),
                        (seen_place, np.bincount(pl, minlength=len(places))),
                        (seen_topic, np.bincount(tp, minlength=len(topics)))):
        for i in np.flatnonzero(values >= 0).tolist():
            vocab.cap_count[vocab.keys[int(values[i])]] = int(cnt[i])
    for w in ("met", "at", "about", "the", "plan"):
        vocab.lower_words[w] = n
    vocab._canon = None
    surf = vocab.surfaces
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        items = [mem._validate(rows[i], i, None) for i in range(lo, hi)]
        vec = vectors(lo, hi)
        mem.log.append(items, vec)
        mem._tags.extend(tags[lo:hi])
        mem._raw_n.extend(len(t) for t in tags[lo:hi])
        mem._expansion.extend([""] * (hi - lo))
        mem._read.extend(names_key([surf[j] for j in t]) for t in tags[lo:hi])
        mem._ingest(items, vec, learn=False, annotated=True)
    mem._keys = None


def check_direct_load(n: int, work: Path) -> dict:
    """:func:`direct_load` and ``add_many`` give the same vocabulary, tags and top-10s."""
    traces = texts(n)
    a = Memory.create(work / "direct", embedder=_NoEmbedder())
    direct_load(a, n)
    b = Memory.create(work / "add_many", embedder=_NoEmbedder())
    for lo in range(0, n, 1000):
        b.add_many(traces[lo:lo + 1000], vectors=vectors(lo, min(n, lo + 1000)))
    same_vocab = (a.vocab.keys == b.vocab.keys and a.vocab.surfaces == b.vocab.surfaces
                  and a.vocab.cap_count == b.vocab.cap_count
                  and a.vocab.lower_words == b.vocab.lower_words)
    same_tags = a._tags == b._tags and a._read == b._read
    questions, qvec, _ = _questions([t["text"] for t in traces], 20)
    ra = a.search_batch(questions, k=10, vectors=qvec)
    rb = b.search_batch(questions, k=10, vectors=qvec)
    same = all([h.id for h in x.hits] == [h.id for h in y.hits]
               for x, y in zip(ra, rb, strict=True))
    a.close()
    b.close()
    return {"traces": n, "same_vocabulary": same_vocab, "same_tags": same_tags,
            "same_top10": same}


VEC_BLOCK = 10_000


def vectors(lo: int, hi: int, seed: int = 0) -> np.ndarray:
    """Random unit vectors of traces ``lo..hi``, fixed per block of 10k traces (so a 1M run
    never holds them all at once)."""
    out = []
    for b in range(lo // VEC_BLOCK, (hi - 1) // VEC_BLOCK + 1 if hi > lo else lo // VEC_BLOCK):
        v = np.random.default_rng([seed, b]).standard_normal((VEC_BLOCK, DIM)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        s, e = max(lo, b * VEC_BLOCK), min(hi, (b + 1) * VEC_BLOCK)
        out.append(v[s - b * VEC_BLOCK:e - b * VEC_BLOCK])
    return np.concatenate(out) if out else np.zeros((0, DIM), np.float32)


def rss_mb() -> float:
    """Resident set size now (MB)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _questions(texts: list[str], n_queries: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    qidx = rng.integers(0, len(texts), size=n_queries)
    questions = [f"When did {texts[i].split(' met ')[0]} meet "
                 f"{texts[i].split(' met ')[1].split(' at ')[0]}?" for i in qidx]
    qvec = np.stack([vectors(int(i), int(i) + 1)[0] for i in qidx])
    qvec += 0.5 * rng.standard_normal((n_queries, DIM)).astype(np.float32) / 20
    return questions, qvec, qidx


def _latency(mem, questions, qvec, qidx) -> dict:
    mem.search(questions[0], k=10, vector=qvec[0])  # index / lexical build
    lat, cpu, found = [], [], 0
    for q, v, i in zip(questions, qvec, qidx, strict=True):
        t, c = time.perf_counter(), time.process_time()
        res = mem.search(q, k=10, vector=v)
        lat.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        found += bool(res.hits) and res.hits[0].id == int(i)
    # wall time depends on the machine's load (shared); CPU time of this process much less
    return {"search_ms_p50": float(np.percentile(lat, 50)),
            "search_ms_p95": float(np.percentile(lat, 95)),
            "search_cpu_ms_p50": float(np.percentile(cpu, 50)),
            "search_cpu_ms_p95": float(np.percentile(cpu, 95)), "source_at_1": found / len(lat)}


def run_size(n: int, n_queries: int, work: Path, batch: int, compact: bool,
             compare: bool, direct: bool) -> dict:
    path = work / f"mem{n}"
    shutil.rmtree(path, ignore_errors=True)
    mem = Memory.create(path, embedder=_NoEmbedder())
    base_mb = rss_mb()
    if direct:
        t0, c0 = time.perf_counter(), time.process_time()
        direct_load(mem, n)
        bulk_s, bulk_cpu = time.perf_counter() - t0, time.process_time() - c0
    else:  # only the add_many calls are timed (the random vectors are made outside them)
        traces = texts(n)
        bulk_s = bulk_cpu = 0.0
        for lo in range(0, n, batch):
            vec = vectors(lo, min(n, lo + batch))
            t0, c0 = time.perf_counter(), time.process_time()
            mem.add_many(traces[lo:lo + batch], vectors=vec)
            bulk_s += time.perf_counter() - t0
            bulk_cpu += time.process_time() - c0
    log(f"{n}: {'direct load' if direct else 'bulk append'} {n / bulk_s:,.0f} traces/s")
    traces = None  # (1M dicts)
    questions, qvec, qidx = _questions(mem.texts, n_queries)
    indexed = mem._scaled()
    t1 = time.perf_counter()
    mem.search(questions[0], k=10, vector=qvec[0])  # builds the index / the lexical index
    first_s = time.perf_counter() - t1
    out = {"traces": n, "path": "indexed" if indexed else "small",
           "filled_by": "direct_load (no write-time rules)" if direct else "add_many",
           "bulk_append_traces_per_s": None if direct else n / bulk_s,
           "bulk_append_cpu_traces_per_s": None if direct else n / bulk_cpu,
           "fill_s": bulk_s, "bulk_batch": batch,
           "first_search_s": first_s, **_latency(mem, questions, qvec, qidx)}
    log(f"{n}: search p50 {out['search_ms_p50']:.1f} ms ({out['path']} path)")
    if compare and indexed:  # the small path's scans on the same memory, same run
        mem.config.scale_from = 1 << 62
        small = _latency(mem, questions, qvec, qidx)
        out["small_path"] = small
        out["small_over_indexed_p50"] = small["search_ms_p50"] / out["search_ms_p50"]
        mem.config.scale_from = n
        mem._faiss = mem._lex = mem._lex_tail = None
        mem._csr_n = -1
        log(f"{n}: small path p50 {small['search_ms_p50']:.1f} ms")
    out["rss_mb"] = rss_mb() - base_mb
    # single durable appends, each followed by a search that must see it
    single, rw, rw_cpu = [], [], []
    extra = texts(20, seed=9)
    evec = vectors(0, 20, seed=9)
    for t, v in zip(extra, evec, strict=True):
        t3 = time.perf_counter()
        new = mem.add(t["text"], session="bench", turn=None, time=None, vector=v)
        single.append((time.perf_counter() - t3) * 1000)
        t4, c4 = time.perf_counter(), time.process_time()
        res = mem.search(t["text"].split(" at ")[0] + "?", k=10, vector=v)
        rw.append((time.perf_counter() - t4) * 1000)
        rw_cpu.append((time.process_time() - c4) * 1000)
        assert new in [h.id for h in res.hits], "a search missed the trace just appended"
    info = mem.info()
    out.update({
        "entities": info["entities"], "index": info["index"],
        "single_append_ms_p50": float(np.percentile(single, 50)),
        "single_append_ms_p95": float(np.percentile(single, 95)),
        "search_after_append_ms_p50": float(np.percentile(rw, 50)),
        "search_after_append_cpu_ms_p50": float(np.percentile(rw_cpu, 50)),
        "rss_peak_mb": peak_mb()})
    if compact:
        t5 = time.perf_counter()
        out["compact"] = mem.compact()
        out["compact_s"] = time.perf_counter() - t5
        before_close = [[h.id for h in r.hits]  # (compact re-tags: results after it)
                        for r in mem.search_batch(questions[:10], k=10, vectors=qvec[:10])]
    mem.close()
    del mem  # (freed before the reopen: the peak RSS is one memory's)
    gc.collect()
    if compact:  # (an open without a snapshot replays every trace through the rules)
        t6 = time.perf_counter()
        again = Memory.open(path, readonly=True, embedder=_NoEmbedder())
        out["open_s"] = time.perf_counter() - t6
        t7 = time.perf_counter()
        again.search(questions[0], k=10, vector=qvec[0])
        out["first_search_after_open_s"] = time.perf_counter() - t7
        out["index_after_open"] = again._index.source if again._index is not None else None
        ra = again.search_batch(questions[:10], k=10, vectors=qvec[:10])
        out["reopened_same_top10"] = [[h.id for h in r.hits] for r in ra] == before_close
        again.close()
    disk = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    out["disk_bytes_per_trace"] = disk / n
    out["rss_bytes_per_trace"] = out["rss_mb"] * 2**20 / n
    out["rss_peak_mb"] = peak_mb()
    shutil.rmtree(path, ignore_errors=True)
    return out


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
        mem = Memory.create(Path(tmp) / "m", embedder=_NoEmbedder(), scale_from=1 << 62)
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
    ap.add_argument("--no-compact-from", type=int, default=1 << 62,
                    help="skip compact at and above this many traces")
    ap.add_argument("--compare-upto", type=int, default=100_000,
                    help="also time the small path's scans on memories up to this size")
    ap.add_argument("--ppr-device", help="also time the small path's anchor PPR batch on this "
                    "device")
    ap.add_argument("--direct-from", type=int, default=1 << 62,
                    help="fill memories of at least this many traces with direct_load")
    ap.add_argument("--check-direct", type=int, default=0,
                    help="first check direct_load against add_many on this many traces")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, this process
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="gpurag-bench-memory-")
    work = Path(args.work or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    if args.one:
        n = args.one
        print(json.dumps(run_size(n, args.queries, work, args.batch,
                                  n < args.no_compact_from, n <= args.compare_upto,
                                  n >= args.direct_from)))
        return
    out = {"bench": "memory", "machine": platform.machine(), "cpus": os.cpu_count(),
           "python": platform.python_version(),
           "load_before": os.getloadavg(),
           "note": "precomputed random unit vectors (fixed seed): embedding excluded; "
                   "template traces; each size in its own process (peak RSS per size)",
           "sizes": []}
    if args.check_direct:
        out["direct_load_check"] = check_direct_load(args.check_direct, work)
    for n in (int(s) for s in args.sizes.split(",")):
        cmd = [sys.executable, __file__, "--one", str(n), "--queries", str(args.queries),
               "--batch", str(args.batch), "--work", str(work),
               "--no-compact-from", str(args.no_compact_from),
               "--compare-upto", str(args.compare_upto), "--direct-from", str(args.direct_from)]
        res = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True)
        row = json.loads(res.stdout.strip().splitlines()[-1])
        row["load_after"] = os.getloadavg()
        out["sizes"].append(row)
    if args.ppr_device:
        out["ppr_device"] = ppr_device(min(int(args.sizes.split(",")[-1]), 100_000),
                                       args.ppr_device)
    print(json.dumps(out, indent=1))
    tmp.cleanup()


if __name__ == "__main__":
    main()
