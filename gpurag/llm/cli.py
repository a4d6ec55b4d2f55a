"""``gpurag llm serve|check`` and the ``--llm-*`` options other commands share.

The main CLI calls ``add_llm_commands(subparsers)``; commands that use an LLM call
``add_llm_options(parser)`` and build their config with ``config_from_args(args)``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from gpurag.llm.config import STRUCTURED_MODES, LLMConfig
from gpurag.settings import current


def add_llm_options(parser: argparse.ArgumentParser) -> None:
    """``--llm-url``, ``--llm-model``, ``--llm-concurrency``, ``--llm-timeout``,
    ``--llm-max-tokens``, ``--llm-cache-dir``, ``--llm-structured``,
    ``--llm-max-failure-rate`` (``GPURAG_LLM_*`` otherwise)."""
    group = parser.add_argument_group("LLM server (any OpenAI-compatible one)")
    group.add_argument("--llm-url", action="append",
                       help="base URL, e.g. http://127.0.0.1:8000/v1 (env GPURAG_LLM_URL); "
                       "a pool of servers: repeat it, separate URLs by commas, or give a file "
                       "of URLs (one a line); the API key comes from $OPENAI_API_KEY")
    group.add_argument("--llm-model", help="model name (default: the server's first model)")
    group.add_argument("--llm-concurrency", type=int, help="requests in flight (default 256)")
    group.add_argument("--llm-timeout", type=float, help="seconds per request (default 300)")
    group.add_argument("--llm-max-tokens", type=int, help="tokens per answer (default 1024)")
    group.add_argument("--llm-cache-dir", help="response cache directory ('none' disables)")
    group.add_argument("--llm-structured", choices=STRUCTURED_MODES,
                       help="how JSON Schemas are sent (default auto)")
    group.add_argument("--llm-max-failure-rate", type=float, metavar="SHARE",
                       help="share of extraction calls that may fail before the build stops "
                       "(default 0.05; 0 tolerates none)")


def config_from_args(args: argparse.Namespace) -> LLMConfig:
    """``LLMConfig.from_env`` overridden by whichever ``--llm-*`` options were given."""
    cache_dir: Any = getattr(args, "llm_cache_dir", None)
    overrides: dict[str, Any] = {
        "url": ",".join(getattr(args, "llm_url", None) or []) or None,
        "model": getattr(args, "llm_model", None),
        "concurrency": getattr(args, "llm_concurrency", None),
        "timeout_s": getattr(args, "llm_timeout", None),
        "max_tokens": getattr(args, "llm_max_tokens", None),
        "structured": getattr(args, "llm_structured", None),
        "max_failure_rate": getattr(args, "llm_max_failure_rate", None),
    }
    config = LLMConfig.from_env(**overrides)
    if cache_dir is not None:
        config.cache_dir = None if cache_dir.lower() in ("none", "off") else cache_dir
    return config


def add_llm_commands(subparsers: Any) -> None:
    """Register ``llm serve`` and ``llm check`` on the main CLI's subparsers."""
    llm = subparsers.add_parser("llm", help="start or check the LLM server")
    sub = llm.add_subparsers(dest="llm_command", required=True)

    p = sub.add_parser("serve", help="start vLLM's OpenAI server tuned for batch extraction")
    p.add_argument("--model", required=True, help="Hugging Face name or local path")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--served-model-name", help="name clients send (default: --model)")
    p.add_argument("--max-num-seqs", type=int, default=256,
                   help="sequences batched at once (default 256)")
    p.add_argument("--max-model-len", type=int, default=8192, help="context length (8192)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85,
                   help="share of GPU memory for vLLM (0.85; lower it to leave room for "
                   "gpurag on the same GPU)")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--wait", type=float, default=1800.0, help="seconds to wait for health")
    p.add_argument("--log", help="file for the server's output (default: this terminal)")
    p.add_argument("--vllm-bin", default=None,
                   help="vllm executable (env GPURAG_VLLM_BIN)")
    p.add_argument("--vllm-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for vllm serve (repeatable), e.g. --vllm-arg=--dtype=half")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("check", help="ask a running server for its models and one JSON answer")
    add_llm_options(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("cache", help="show or prune the on-disk LLM response cache")
    p.add_argument("action", choices=("info", "prune"))
    p.add_argument("--cache-dir", help="cache folder (default: $GPURAG_LLM_CACHE_DIR, else "
                   "the user cache folder)")
    p.add_argument("--older-than", type=float, metavar="DAYS",
                   help="prune: remove the answers written more than DAYS days ago")
    p.set_defaults(func=cmd_cache)


def cmd_cache(args: argparse.Namespace) -> int:
    """``gpurag llm cache info|prune``: entries and size, or remove old answers."""
    from gpurag.llm.cache import ResponseCache
    from gpurag.llm.config import default_cache_dir

    if args.action == "info" and args.older_than is not None:
        print("gpurag: error: --older-than goes with prune", file=sys.stderr)
        return 2
    where = args.cache_dir or current().llm.get("cache_dir") or default_cache_dir()
    if where.strip().lower() in ("none", "null", "off"):
        print("the LLM response cache is off (GPURAG_LLM_CACHE_DIR)")
        return 0
    folder = Path(where).expanduser()
    if not (folder / "responses.sqlite").is_file():
        print(f"no LLM response cache at {folder}")
        return 0
    with ResponseCache(folder) as cache:
        if args.action == "prune":
            if args.older_than is None or args.older_than < 0:
                print("gpurag: error: prune needs --older-than DAYS (>= 0)", file=sys.stderr)
                return 2
            removed = cache.prune(time.time() - args.older_than * 86400.0)
            print(f"removed {removed} answers written more than {args.older_than:g} days ago")
        st = cache.stats()
    def when(t: float | None) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"

    print(f"{folder}: {st['entries']} answers, {st['bytes'] / 2**20:.1f} MiB, "
          f"oldest {when(st['oldest'])}, newest {when(st['newest'])}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Start vLLM, print its URL, keep it up until Ctrl-C or SIGTERM, then stop it."""
    from gpurag.llm.server import ServerError, serve_vllm

    stop = {"now": False}

    def on_term(signum: int, frame: Any) -> None:
        stop["now"] = True

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        try:
            server = serve_vllm(
                args.model, args.port, host=args.host, wait_s=args.wait, log=args.log,
                served_model_name=args.served_model_name, max_num_seqs=args.max_num_seqs,
                max_model_len=args.max_model_len,
                gpu_memory_utilization=args.gpu_memory_utilization,
                enable_prefix_caching=not args.no_prefix_caching,
                extra_args=args.vllm_arg, vllm_bin=args.vllm_bin or current().vllm_bin or "vllm")
        except ServerError as exc:
            print(f"gpurag: error: {exc}", file=sys.stderr)
            return 2
        print(f"LLM server ready: {server.url}", flush=True)
        print(f"  export GPURAG_LLM_URL={server.url}", flush=True)
        try:
            while not stop["now"] and server.process is not None \
                    and server.process.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        exited = server.process is not None and server.process.poll() is not None
        code = server.stop()
        if exited and not stop["now"]:
            print(f"gpurag: the server exited on its own (code {code})", file=sys.stderr)
            return 1
        print("LLM server stopped", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_check(args: argparse.Namespace) -> int:
    """Print the server's models and the time of one small schema-constrained answer."""
    from gpurag.llm.client import ChatRequest, LLMClient, LLMError

    config = config_from_args(args).replace(cache_dir=None, max_retries=1)
    client = LLMClient(config)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    request = ChatRequest([{"role": "user", "content": 'Answer with JSON: {"ok": true}'}],
                          schema=schema, max_tokens=16, tag="check")
    try:
        models = client.list_models()
        started = time.monotonic()
        result = client.complete(request)
    except LLMError as exc:
        print(f"gpurag: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"url": config.url, "models": models, "model": client.model,
                      "answer": result.content, "seconds": round(time.monotonic() - started, 3),
                      "structured": client.structured_mode}, indent=2))
    return 0
