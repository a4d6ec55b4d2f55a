"""Fixtures of the serve tests: one sample index with a graph, and live uvicorn servers on
ephemeral loopback ports."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

REPO = Path(__file__).resolve().parents[2]
SAMPLE_CORPUS = REPO / "examples" / "sample" / "corpus.jsonl"
STRAY = ("GPURAG_INDEX_", "GPURAG_QUERY_", "GPURAG_API_KEYS", "GPURAG_LLM_URL", "GPURAG_CONFIG")


def _clean_env(mp: pytest.MonkeyPatch) -> None:
    mp.setenv("GPURAG_PROGRESS", "0")
    for name in list(os.environ):
        if name.startswith(STRAY):
            mp.delenv(name)


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch):
    """No progress bars, and no stray user settings (keys, LLM, query defaults)."""
    _clean_env(monkeypatch)


@pytest.fixture(scope="session")
def holder(graph_index_path):
    """The served index (opened and warmed once, shared by servers that do not reload)."""
    from gpurag.serve.holder import IndexHolder

    with pytest.MonkeyPatch.context() as mp:
        _clean_env(mp)
        return IndexHolder(graph_index_path)


class LiveServer:
    """A real uvicorn server in a thread, on 127.0.0.1 and a port the OS picked."""

    def __init__(self, app) -> None:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       daemon=True)
        self.thread.start()
        for _ in range(600):  # bounded: 30 s
            if self.server.started:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("test server did not start")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)


@pytest.fixture
def start_server():
    """``start_server(holder, **ServeConfig fields)`` -> a running LiveServer, stopped after."""
    from gpurag.serve.app import create_app
    from gpurag.serve.config import ServeConfig

    servers = []

    def start(holder, llm=None, **fields) -> LiveServer:
        fields.setdefault("reload_poll_s", 0)
        server = LiveServer(create_app(holder, ServeConfig(**fields), llm=llm))
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def comparable(result: dict) -> dict:
    """A result without its timings (which differ call to call) and with rounded scores and
    confidence (a question embedded in a batch differs from one embedded alone in the last
    float digits)."""
    out = {k: v for k, v in result.items() if k != "timings_ms"}
    if out.get("confidence") is not None:
        out["confidence"] = round(out["confidence"], 4)
    out["passages"] = [{**p, "score": round(p["score"], 4)} for p in result["passages"]]
    out["seeds"] = [{**s, "score": round(s["score"], 4)} for s in result["seeds"]]
    return out
