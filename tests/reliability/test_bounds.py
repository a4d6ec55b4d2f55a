"""Settings that size work are bounded (issue 28, items 12 and 13): thread and worker counts
by the machine's cores; LLM model discovery by one call within ``--llm-timeout``, done once.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpurag.config import machine_cores, threads_from_env
from gpurag.llm.client import ChatRequest, LLMClient, LLMError
from gpurag.llm.config import LLMConfig
from gpurag.pipeline.extract_pool import pool_workers


def test_threads_setting_is_bounded_by_the_cores(caplog):
    with caplog.at_level(logging.INFO, logger="gpurag.config"):
        assert threads_from_env({"GPURAG_THREADS": "100000"}) == machine_cores()
    assert "more than the" in caplog.text
    assert threads_from_env({"GPURAG_THREADS": "1"}) == 1
    assert threads_from_env({}) == 0


def test_extract_workers_are_bounded_by_the_cores(monkeypatch):
    class CPUBound:
        cpu_bound = True

    monkeypatch.setenv("GPURAG_EXTRACT_WORKERS", "100000")
    assert pool_workers(CPUBound(), n_batches=10**6) == machine_cores()


class ModelsServer:
    """``/v1/models`` that hangs (``mode="hang"``) or answers junk; counts the calls."""

    def __init__(self, mode: str) -> None:
        self.calls = 0
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server.calls += 1
                if mode == "hang":
                    server.release.wait(30)
                    body = b'{"data": []}'
                else:
                    body = json.dumps([1, 2, 3] if mode == "list" else {"data": "junk"}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(params=["hang", "list", "dict"])
def models_server(request) -> Iterator[ModelsServer]:
    server = ModelsServer(request.param)
    yield server
    server.close()


def test_model_discovery_is_one_bounded_call_with_a_clear_error(models_server, tmp_path):
    cfg = LLMConfig(url=models_server.url, model="", timeout_s=0.5, max_retries=2,
                    backoff_s=0.01, backoff_max_s=0.02, cache_dir=None, concurrency=4)
    client = LLMClient(cfg)
    requests = [ChatRequest(messages=[{"role": "user", "content": f"q{i}"}]) for i in range(6)]
    results = client.complete_batch(requests)
    assert all(isinstance(r, LLMError) for r in results)
    assert models_server.calls == 1  # once, not per request and not retried
    message = str(results[0])
    assert "cannot find out which model to use" in message and "--llm-model" in message
    assert all(str(r) == message for r in results)
