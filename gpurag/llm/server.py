"""Start and stop a local OpenAI-compatible server (vLLM for real work, any command for tests)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Self

import httpx

from gpurag.llm.config import normalize_url
from gpurag.settings import child_environ, secret


class ServerError(RuntimeError):
    """The server did not come up (exited, or not healthy in time)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def vllm_command(model: str, *, host: str = "127.0.0.1", port: int = 8000,
                 served_model_name: str | None = None, max_num_seqs: int = 256,
                 max_model_len: int = 8192, gpu_memory_utilization: float = 0.85,
                 enable_prefix_caching: bool = True, max_num_batched_tokens: int | None = None,
                 extra_args: Sequence[str] = (), vllm_bin: str = "vllm") -> list[str]:
    """The ``vllm serve`` command line tuned for batch extraction.

    Prefix caching lets every request share the KV cache of the common system prompt;
    ``max_num_seqs`` sets how many sequences continuous batching runs at once (our client keeps
    that many in flight); ``max_model_len`` bounds the context so more KV blocks fit;
    ``gpu_memory_utilization`` leaves the rest of the GPU to gpurag itself. Structured output
    (JSON Schema via ``response_format``) is on by default in vLLM's OpenAI server.
    """
    cmd = [vllm_bin, "serve", model, "--host", host, "--port", str(port),
           "--max-num-seqs", str(max_num_seqs),
           "--max-model-len", str(max_model_len),
           "--gpu-memory-utilization", f"{gpu_memory_utilization:g}"]
    if enable_prefix_caching:
        cmd.append("--enable-prefix-caching")
    if served_model_name:
        cmd += ["--served-model-name", served_model_name]
    if max_num_batched_tokens:
        cmd += ["--max-num-batched-tokens", str(max_num_batched_tokens)]
    cmd += list(extra_args)
    return cmd


def llama_cpp_command(model_path: str | Path, *, host: str = "127.0.0.1", port: int = 8000,
                      n_threads: int = 1, n_ctx: int = 2048,
                      extra_args: Sequence[str] = ()) -> list[str]:
    """The command that starts llama-cpp-python's OpenAI-compatible server on a GGUF file."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path),
            "--host", host, "--port", str(port), "--n_threads", str(n_threads),
            "--n_threads_batch", str(n_threads), "--n_ctx", str(n_ctx), *extra_args]


def probe(url: str, timeout_s: float = 2.0, api_key: str | None = None) -> bool:
    """True when ``url`` answers ``/health`` or ``/v1/models`` with HTTP 200."""
    base = normalize_url(url)
    root = base[: -len("/v1")]
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    for target in (root + "/health", base + "/models"):
        try:
            if httpx.get(target, timeout=timeout_s, headers=headers).status_code == 200:
                return True
        except httpx.HTTPError:
            continue
    return False


def wait_healthy(url: str, timeout_s: float = 600.0, *, process: subprocess.Popen | None = None,
                 interval_s: float = 0.5, api_key: str | None = None) -> None:
    """Block until the server at ``url`` is healthy; raise ``ServerError`` when ``process``
    exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.poll() is not None:
            raise ServerError(f"server exited with code {process.returncode} before it was ready")
        if probe(url, api_key=api_key):
            return
        if time.monotonic() >= deadline:
            raise ServerError(f"server at {url} not healthy after {timeout_s:g}s")
        time.sleep(interval_s)


def stop_process(process: subprocess.Popen, grace_s: float = 30.0) -> int:
    """Stop a server started by ``ServerProcess``: SIGINT, then SIGTERM, then SIGKILL to its
    process group. Returns the exit code."""
    if process.poll() is not None:
        return int(process.returncode)
    for sig, wait in ((signal.SIGINT, grace_s * 0.7), (signal.SIGTERM, grace_s * 0.3),
                      (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            return int(process.wait(timeout=wait))
        except subprocess.TimeoutExpired:
            continue
    return int(process.wait())


class ServerProcess:
    """A server subprocess in its own process group, with its OpenAI base URL.

    Use as a context manager, or call ``start()`` then ``stop()``.
    """

    def __init__(self, command: Sequence[str], url: str, *, env: Mapping[str, str] | None = None,
                 log: IO[str] | str | Path | None = None, api_key: str | None = None) -> None:
        self.command = list(command)
        self.url = normalize_url(url)
        self.env = dict(env) if env is not None else None
        self.api_key = api_key
        self._log_target = log
        self._log_file: IO[str] | None = None
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 900.0) -> Self:
        """Launch the command and wait until the server is healthy."""
        if shutil.which(self.command[0]) is None and not Path(self.command[0]).exists():
            raise ServerError(f"{self.command[0]!r} not found on PATH")
        out: IO[str] | int | None = None
        if isinstance(self._log_target, (str, Path)):
            self._log_file = open(self._log_target, "a", encoding="utf-8")  # noqa: SIM115
            out = self._log_file
        elif self._log_target is not None:
            out = self._log_target
        env = child_environ(self.env) if self.env is not None else None
        self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT
                                        if out is not None else None, stdin=subprocess.DEVNULL,
                                        env=env, start_new_session=True)
        try:
            wait_healthy(self.url, timeout_s, process=self.process, api_key=self.api_key)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace_s: float = 30.0) -> int | None:
        """Stop the server (no-op if it is not running)."""
        code = None
        if self.process is not None:
            code = stop_process(self.process, grace_s)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code

    def __enter__(self) -> Self:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_vllm(model: str, port: int = 8000, *, host: str = "127.0.0.1",
               wait_s: float = 1800.0, api_key_env: str = "OPENAI_API_KEY",
               log: IO[str] | str | Path | None = None, **flags: object) -> ServerProcess:
    """Start ``vllm serve`` (flags as in ``vllm_command``) and wait until it is healthy.

    The API key, if ``api_key_env`` is set, reaches vLLM as ``VLLM_API_KEY`` (never on argv).
    Returns the running ``ServerProcess``; its ``url`` is the OpenAI base URL.
    """
    command = vllm_command(model, host=host, port=port, **flags)  # type: ignore[arg-type]
    api_key = secret(api_key_env)
    env = {"VLLM_API_KEY": api_key} if api_key else {}
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}/v1"
    return ServerProcess(command, url, env=env, log=log, api_key=api_key).start(wait_s)
