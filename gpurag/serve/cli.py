"""``gpurag serve INDEX``: options, startup checks, and uvicorn with graceful shutdown."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
from typing import Any

from gpurag.serve.config import ServeConfig

log = logging.getLogger(__name__)
# ServeConfig fields as the command line spells them (for error messages).
FLAGS = {"request_timeout_s": "--timeout", "header_timeout_s": "--header-timeout",
         "body_timeout_s": "--body-timeout", "batch_window_ms": "--batch-window-ms",
         "reload_poll_s": "--reload-poll", "port": "--port", "max_batch": "--max-batch",
         "max_queue": "--max-queue", "max_body_bytes": "--max-body-bytes",
         "max_question_chars": "--max-question-chars", "max_questions": "--max-questions",
         "max_k": "--max-k"}


def add_serve_command(subparsers: Any) -> None:
    """Register ``serve`` on the main CLI's subparsers."""
    from gpurag.llm.cli import add_llm_options

    d = ServeConfig()
    p = subparsers.add_parser("serve", help="HTTP query service over an index (micro-batched)")
    p.add_argument("index", help="index directory (a new version committed there is picked up)")
    p.add_argument("--host", default=d.host, help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=d.port, help="port (default 8080; 0: any free)")
    p.add_argument("--api-keys-file", help="bearer API keys, one a line (also $GPURAG_API_KEYS, "
                   "comma-separated)")
    p.add_argument("--insecure-no-auth", action="store_true",
                   help="no API keys at all; refused unless --host is a loopback address")
    p.add_argument("--no-batching", action="store_true",
                   help="one query_batch call per request (no micro-batching)")
    p.add_argument("--batch-window-ms", type=float, default=d.batch_window_ms,
                   help="how long a batch waits for more requests (default 2)")
    p.add_argument("--max-batch", type=int, default=d.max_batch,
                   help="questions per batch at most (default 64)")
    p.add_argument("--max-queue", type=int, default=d.max_queue,
                   help="questions waiting at most; beyond, 503 + Retry-After (default 256)")
    p.add_argument("--timeout", type=float, default=d.request_timeout_s,
                   help="seconds a request may wait for its results; then 504 (default 30)")
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes,
                   help="request body limit; beyond, 413 (default 1 MiB)")
    p.add_argument("--max-question-chars", type=int, default=d.max_question_chars,
                   help="characters per question; beyond, 413 (default 4000)")
    p.add_argument("--max-questions", type=int, default=d.max_questions,
                   help="questions per request (default 256)")
    p.add_argument("--max-k", type=int, default=d.max_k, help="largest k allowed (default 100)")
    p.add_argument("--cors-origin", action="append", default=[],
                   help="allow browser calls from this origin (repeatable; CORS is off without)")
    p.add_argument("--reload-poll", type=float, default=d.reload_poll_s,
                   help="seconds between checks for a new index version (0: only "
                   "POST /v1/admin/reload; default 2)")
    p.add_argument("--header-timeout", type=float, default=d.header_timeout_s,
                   help="seconds a client may take to send its request headers (default 10)")
    p.add_argument("--body-timeout", type=float, default=d.body_timeout_s,
                   help="seconds a client may take to send a request body; then 408 "
                        "(default 30)")
    p.add_argument("--config", help="TOML file whose [query] table sets the query defaults "
                                    "(as GPURAG_CONFIG does)")
    p.add_argument("--no-access-log", action="store_true",
                   help="no access log line per request (on stderr, Common Log Format)")
    add_llm_options(p)
    p.set_defaults(func=cmd_serve)


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    from gpurag.errors import ConfigError
    from gpurag.serve.auth import check_auth_setup, load_api_keys

    keys = load_api_keys(args.api_keys_file)
    check_auth_setup(args.host, keys, args.insecure_no_auth)
    try:
        return ServeConfig(
            host=args.host, port=args.port, batching=not args.no_batching,
            batch_window_ms=args.batch_window_ms, max_batch=args.max_batch,
            max_queue=args.max_queue, request_timeout_s=args.timeout,
            max_body_bytes=args.max_body_bytes, max_question_chars=args.max_question_chars,
            max_questions=args.max_questions, max_k=args.max_k, api_keys=keys,
            insecure_no_auth=args.insecure_no_auth, cors_origins=args.cors_origin,
            reload_poll_s=args.reload_poll,
            header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout)
    except ValueError as exc:
        message = str(exc)
        for name, flag in FLAGS.items():
            if message.startswith(name + " "):
                message = f"{flag} ({name}){message[len(name):]}"
        raise ConfigError(f"gpurag serve: {message}") from None


def _llm_client(args: argparse.Namespace) -> Any:
    """An LLM client when one is configured (``--llm-url`` or ``$GPURAG_LLM_URL``), else None."""
    from gpurag.llm.config import LLMConfig

    if not (getattr(args, "llm_url", None) or LLMConfig.configured()):
        return None
    from gpurag.llm.cli import config_from_args as llm_config
    from gpurag.llm.client import LLMClient

    return LLMClient(llm_config(args))


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound listening socket (so the real port is known before uvicorn starts).

    Made with ``IPPROTO_TCP`` named: asyncio turns Nagle off (``TCP_NODELAY``) only on
    connections whose socket says TCP, and without it every keep-alive request waited ~40 ms
    for a delayed ACK (uvicorn writes the response head and body apart)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited where supported
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        from gpurag.errors import ConfigError

        raise ConfigError(f"cannot listen on {host}:{port}: {exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as exc:
        from gpurag.errors import ConfigError

        raise ConfigError(f"gpurag serve needs the serve extra ({exc.name} is missing): "
                          "pip install 'gpurag[serve]'") from None
    from gpurag.serve.app import create_app
    from gpurag.serve.holder import IndexHolder

    config = config_from_args(args)
    if getattr(args, "config", None):  # checked now; every (re)opened index reads it
        from gpurag.config import load_config
        from gpurag.settings import export

        load_config(args.config)
        export("GPURAG_CONFIG", str(args.config))
    # reloads and the access log at INFO on stderr (the root logger shows warnings only)
    logging.getLogger("gpurag.serve").setLevel(logging.INFO)
    if getattr(args, "no_access_log", False):
        logging.getLogger("gpurag.serve.access").setLevel(logging.WARNING)
    holder = IndexHolder(args.index)  # fails here, with a clear error, on a bad index
    app = create_app(holder, config, llm=_llm_client(args))
    sock = listen_socket(config.host, config.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"gpurag serve: http://{shown}:{port}  index {holder.path.name} version "
          f"{holder.current.version}  batching {'on' if config.batching else 'off'}  "
          f"auth {'on' if config.api_keys else 'OFF (loopback only)'}", flush=True)
    from gpurag.serve.guards import header_timeout_protocol

    server = uvicorn.Server(uvicorn.Config(
        app, log_level="debug" if args.verbose else "warning", access_log=False,
        timeout_graceful_shutdown=config.request_timeout_s + 5, server_header=False,
        http=header_timeout_protocol(config.header_timeout_s)))
    # uvicorn handles SIGTERM (stop accepting, finish in-flight requests, shut down) and then
    # re-raises it to the handler that was installed before: a no-op here, so the exit is 0.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0
