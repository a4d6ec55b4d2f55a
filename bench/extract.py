"""LLM extraction throughput against a running OpenAI-compatible server, and the ceiling.

1. ``ours``: ``LLMExtractor`` on the first ``--n`` passages of a corpus, with a fresh response
   cache (no hits): chunks/s and tokens/s in and out, wall time, malformed answers.
2. ``ceiling``: every request our run sent (recorded payloads, both stages and gleaning),
   replayed with a bare async HTTP client, all at once up to ``--ceiling-concurrency``, no
   cache, no parsing, no stage barriers: the server's raw throughput on the same prompts.
3. ``ratio``: ours / ceiling for tokens/s (in + out) and for output tokens/s.

The replay runs second; a short nonce before each first message keeps it from reusing our
run's prompts in the server's prefix cache, while its requests still share prefixes among
themselves exactly as ours did. Temperature 0 and a fixed seed keep answer lengths close.

    gpurag llm serve --model Qwen/Qwen2.5-7B-Instruct &     # or any OpenAI-compatible server
    python bench/extract.py --llm-url http://127.0.0.1:8000/v1 --n 2000 --out bench/results

Prints one JSON object; ``--out DIR`` also writes ``extract_<date>.json`` there.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpurag.extract.llm import LLMExtractor  # noqa: E402
from gpurag.llm.client import LLMClient  # noqa: E402
from gpurag.llm.config import LLMConfig  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "data" / "enwiki_passages" / "passages.jsonl.gz"


def load_chunks(path: Path, n: int) -> pd.DataFrame:
    """The first ``n`` passages of a ``{"id", "title", "text"}`` JSONL (optionally gzipped)."""
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if len(rows) >= n:
                break
            doc = json.loads(line)
            rows.append({"chunk_id": str(doc["id"]), "title": doc.get("title", ""),
                         "text": doc["text"]})
    return pd.DataFrame(rows)


def run_ours(config: LLMConfig, chunks: pd.DataFrame, gleaning: bool,
             ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Extraction through our pipeline; returns its numbers and the payloads it sent."""
    client = LLMClient(config, record=True)
    # every failure allowed: the benchmark reports failed calls instead of stopping
    extractor = LLMExtractor(client=client, gleaning=gleaning, progress=True, max_failure_rate=1.0)
    started = time.perf_counter()
    result = extractor.extract(chunks)
    wall = time.perf_counter() - started
    stats = result.stats
    tin, tout = stats["llm_prompt_tokens"], stats["llm_completion_tokens"]
    ours = {
        "chunks": len(chunks), "wall_s": wall, "requests": stats["llm_requests"],
        "chunks_per_s": len(chunks) / wall, "prompt_tokens": tin, "completion_tokens": tout,
        "prompt_tokens_per_s": tin / wall, "completion_tokens_per_s": tout / wall,
        "tokens_per_s": (tin + tout) / wall, "entities": int(stats["entities"]),
        "relations": int(stats["relations"]), "malformed_answers": int(stats["malformed_answers"]),
        "repaired_answers": int(stats["repaired_answers"]),
        "truncated_answers": int(stats["truncated_answers"]),
        "failed_calls": int(stats["llm_failed_calls"]), "peak_in_flight":
            client.usage.peak_in_flight, "structured": client.structured_mode,
        "model": client.model,
    }
    client.close()
    return ours, list(client.sent or [])


def with_nonce(payloads: list[dict[str, Any]], nonce: str) -> list[dict[str, Any]]:
    """The payloads with ``[nonce]`` before the first message: the replay shares prefixes
    among its own requests as our run did, but none with our run's (cached) prompts."""
    out = []
    for payload in payloads:
        messages = [dict(m) for m in payload["messages"]]
        messages[0]["content"] = f"[{nonce}] " + messages[0]["content"]
        out.append({**payload, "messages": messages})
    return out


async def replay(config: LLMConfig, payloads: list[dict[str, Any]],
                 concurrency: int) -> dict[str, Any]:
    """Send every payload with a bare client at full concurrency; count tokens."""
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    sem = asyncio.Semaphore(concurrency)
    totals = {"prompt_tokens": 0, "completion_tokens": 0, "failed": 0}
    async with httpx.AsyncClient(base_url=config.url, headers=headers, limits=limits,
                                 timeout=httpx.Timeout(config.timeout_s)) as http:
        async def one(payload: dict[str, Any]) -> None:
            async with sem:
                try:
                    response = await http.post("/chat/completions", json=payload)
                    response.raise_for_status()
                    usage = response.json().get("usage") or {}
                except (httpx.HTTPError, ValueError):
                    totals["failed"] += 1
                    return
            totals["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
            totals["completion_tokens"] += int(usage.get("completion_tokens") or 0)

        started = time.perf_counter()
        await asyncio.gather(*(one(p) for p in payloads))
        wall = time.perf_counter() - started
    tin, tout = totals["prompt_tokens"], totals["completion_tokens"]
    return {"requests": len(payloads), "failed": totals["failed"], "wall_s": wall,
            "concurrency": concurrency, "prompt_tokens": tin, "completion_tokens": tout,
            "prompt_tokens_per_s": tin / wall, "completion_tokens_per_s": tout / wall,
            "tokens_per_s": (tin + tout) / wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm-url", required=True, help="OpenAI-compatible base URL")
    parser.add_argument("--model", default="", help="model name (default: the server's first)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help="JSONL(.gz) of {id, title, text} (default: shared enwiki passages)")
    parser.add_argument("--n", type=int, default=500, help="passages to extract")
    parser.add_argument("--concurrency", type=int, default=256, help="our requests in flight")
    parser.add_argument("--ceiling-concurrency", type=int, default=1024,
                        help="replay requests in flight")
    parser.add_argument("--max-tokens", type=int, default=1024, help="tokens per answer")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    parser.add_argument("--gleaning", action="store_true", help="add the gleaning turn")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the raw replay")
    parser.add_argument("--out", type=Path, help="directory for extract_<date>.json")
    args = parser.parse_args(argv)

    chunks = load_chunks(args.corpus, args.n)
    with tempfile.TemporaryDirectory(prefix="gpurag-bench-cache-") as cache_dir:
        config = LLMConfig.from_env(url=args.llm_url, model=args.model or None,
                                    concurrency=args.concurrency, max_tokens=args.max_tokens,
                                    timeout_s=args.timeout, cache_dir=cache_dir)
        ours, payloads = run_ours(config, chunks, args.gleaning)
    report: dict[str, Any] = {
        "bench": "extract", "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "url": config.url, "corpus": str(args.corpus), "gleaning": args.gleaning,
        "max_tokens": args.max_tokens, "ours": ours,
    }
    if not args.no_ceiling and payloads:
        nonce = f"replay-{time.time_ns() % 10**9}"
        ceiling = asyncio.run(replay(config, with_nonce(payloads, nonce),
                                     args.ceiling_concurrency))
        report["ceiling"] = ceiling
        report["ratio"] = {
            "tokens_per_s": ours["tokens_per_s"] / max(ceiling["tokens_per_s"], 1e-9),
            "completion_tokens_per_s": ours["completion_tokens_per_s"]
            / max(ceiling["completion_tokens_per_s"], 1e-9),
        }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"extract_{dt.datetime.now():%Y%m%d_%H%M%S}.json"
        (args.out / name).write_text(text + "\n")
    print(text)
    if "ratio" in report:
        print(f"ours/ceiling: {report['ratio']['tokens_per_s']:.2f} (tokens/s), "
              f"{report['ratio']['completion_tokens_per_s']:.2f} (output tokens/s)",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
