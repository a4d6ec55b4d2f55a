"""Load test of ``gpurag serve``: N concurrent clients, micro-batching on vs off, same run.

Starts two real servers (``gpurag serve`` subprocesses on 127.0.0.1, any free port), one with
batching on and one with ``--no-batching``, then loads them in alternating rounds (on, off, on,
off, ...) so that a change in the machine's load hits both alike; in each round N clients post
single questions back to back for a bounded time. Reports requests/s, p50/p99 latency, errors
and the mean batch size (from each server's /metrics), and the throughput ratio on/off.

``--keepalive N`` also times N requests one after another on one kept-alive connection and
N on a fresh connection each (p50/min ms per server): a gap between the two is a transport
stall (Nagle against delayed ACK cost ~43 ms per keep-alive request).

Usage: python bench/serve_load.py [--index PATH] [--clients 32] [--seconds 4] [--rounds 3]
                                  [--keepalive N] [--out FILE]
Without --index the bundled sample corpus is indexed into --work first. Prints one JSON object
on stdout (and writes it to --out); progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def questions() -> list[str]:
    path = REPO / "examples/sample/questions.jsonl"
    base = [json.loads(line)["question"] for line in path.read_text().splitlines() if line]
    return [f"{q} ({i})" if i else q for i in range(4) for q in base]


def start_server(index: Path, batching: bool, args: argparse.Namespace) -> tuple:
    cmd = [sys.executable, "-m", "gpurag", "serve", str(index), "--port", "0",
           "--insecure-no-auth", "--reload-poll", "0", "--max-queue", "100000",
           "--batch-window-ms", str(args.window_ms), "--max-batch", str(args.max_batch)]
    if not batching:
        cmd.append("--no-batching")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPURAG_PROGRESS": "0"}
    if args.threads:  # the embedder's threads for batches (single questions always use one)
        env["GPURAG_THREADS"] = str(args.threads)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    first = lines.get(timeout=300)
    match = re.search(r"127\.0\.0\.1:(\d+)", first)
    if not match:
        proc.kill()
        raise SystemExit(f"server did not start: {first}")
    return proc, f"http://127.0.0.1:{match.group(1)}"


async def load(url: str, clients: int, seconds: float, qs: list[str], mode: str | None,
               k: int) -> tuple[list[float], int, float]:
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        for q in qs[:4]:  # warm up
            await http.post("/v1/query", json={"question": q, "k": k, "mode": mode})
        stop_at = time.perf_counter() + seconds

        async def client(i: int) -> None:
            nonlocal errors
            n = i
            while time.perf_counter() < stop_at:  # bounded by time
                t0 = time.perf_counter()
                r = await http.post("/v1/query", json={"question": qs[n % len(qs)], "k": k,
                                                       "mode": mode})
                if r.status_code == 200:
                    latencies.append(time.perf_counter() - t0)
                else:
                    errors += 1
                n += clients

        t0 = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        wall = time.perf_counter() - t0
    return latencies, errors, wall


def keepalive(url: str, n: int, qs: list[str], mode: str | None, k: int) -> dict:
    """p50/min ms of ``n`` sequential requests on one kept-alive connection and on a fresh
    connection each (``http.client``, as most HTTP clients send: head and body apart)."""
    import http.client
    from urllib.parse import urlsplit

    host, port = urlsplit(url).hostname, urlsplit(url).port
    out = {}
    for how in ("keepalive", "fresh"):
        conn = http.client.HTTPConnection(host, port)
        ms = []
        for i in range(n + 1):
            if how == "fresh":
                conn.close()
                conn = http.client.HTTPConnection(host, port)
            body = json.dumps({"question": qs[i % len(qs)], "k": k, "mode": mode}).encode()
            t0 = time.perf_counter()
            conn.putrequest("POST", "/v1/query")
            conn.putheader("content-type", "application/json")
            conn.putheader("content-length", str(len(body)))
            conn.endheaders()
            conn.send(body)  # the body in its own write, as requests/urllib3 do
            resp = conn.getresponse()
            resp.read()
            if i:  # the first opens the connection
                ms.append((time.perf_counter() - t0) * 1000)
        conn.close()
        out[f"{how}_p50_ms"] = round(float(np.percentile(ms, 50)), 2)
        out[f"{how}_min_ms"] = round(float(np.min(ms)), 2)
    return out


def batch_mean(url: str) -> float | None:
    text = httpx.get(f"{url}/metrics").text
    total = re.search(r"^gpurag_batch_size_sum (\S+)$", text, re.M)
    count = re.search(r"^gpurag_batch_size_count (\S+)$", text, re.M)
    if not total or not count or float(count.group(1)) == 0:
        return None
    return float(total.group(1)) / float(count.group(1))


def summarize(batching: bool, lat: list[float], errors: int, wall: float,
              mean_batch: float | None) -> dict:
    ms = np.array(lat) * 1000
    row = {"batching": batching, "requests": len(lat), "errors": errors,
           "wall_s": round(wall, 2), "throughput_rps": round(len(lat) / wall, 1),
           "p50_ms": round(float(np.percentile(ms, 50)), 1) if len(ms) else None,
           "p99_ms": round(float(np.percentile(ms, 99)), 1) if len(ms) else None,
           "mean_batch_size": round(mean_batch, 2) if mean_batch else None}
    log(f"batching {'on ' if batching else 'off'}: {row['throughput_rps']} req/s  "
        f"p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  batch {row['mean_batch_size']}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, help="index to serve (default: build the sample)")
    ap.add_argument("--work", type=Path, default=Path("runs/serve_load"))
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=4.0, help="load time per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per setting (alternating)")
    ap.add_argument("--mode", default=None, help="dense | graph (default: the index's)")
    ap.add_argument("-k", "--k", type=int, default=5)
    ap.add_argument("--window-ms", type=float, default=2.0)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0,
                    help="GPURAG_THREADS for the servers (0: leave as is); 1 suits a busy CPU")
    ap.add_argument("--keepalive", type=int, default=0, metavar="N",
                    help="also time N sequential requests kept-alive and N on fresh "
                    "connections per server")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args()
    index = args.index
    if index is None:
        from gpurag import Index

        index = args.work / "sample_index"
        if not (index / "manifest.json").exists():
            log(f"indexing the sample corpus into {index}")
            Index.build(REPO / "examples/sample/corpus.jsonl", index, show_progress=False)
    load_before = os.getloadavg()
    servers = {on: start_server(index, on, args) for on in (True, False)}
    totals = {on: ([], 0, 0.0) for on in servers}
    try:
        for r in range(args.rounds):
            for on, (_, url) in servers.items():
                lat, errors, wall = asyncio.run(load(url, args.clients, args.seconds,
                                                     questions(), args.mode, args.k))
                old = totals[on]
                totals[on] = (old[0] + lat, old[1] + errors, old[2] + wall)
                log(f"round {r + 1} batching {'on ' if on else 'off'}: "
                    f"{len(lat) / wall:.1f} req/s")
        rows = [summarize(on, *totals[on], batch_mean(servers[on][1])) for on in servers]
        if args.keepalive:
            for row, (on, (_, url)) in zip(rows, servers.items(), strict=True):
                row["sequential"] = keepalive(url, args.keepalive, questions(), args.mode,
                                              args.k)
                log(f"batching {'on ' if on else 'off'} sequential: {row['sequential']}")
    finally:
        for proc, _ in servers.values():
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    from gpurag import __version__

    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gpurag": __version__, "python": platform.python_version(),
        "cpu_count": os.cpu_count(), "index": index.name,
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "runs": rows,
        "throughput_ratio_on_off": (round(rows[0]["throughput_rps"] / rows[1]["throughput_rps"],
                                          2) if rows[1]["throughput_rps"] else None),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
