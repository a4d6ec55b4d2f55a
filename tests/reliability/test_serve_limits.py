"""The service against hostile clients (issue 28 items 14, 15, 17): bounded /metrics labels,
header and body read timeouts, auth before a body is read, no NaN timeout, no ``k: true``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from gpurag.errors import ConfigError
from gpurag.serve.config import ServeConfig

REPO = Path(__file__).resolve().parents[2]
TEXTS = ["Skerryvore lighthouse was designed by Alan Stevenson.",
         "Bell Rock lighthouse stands on the Inchcape reef."]


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory) -> Path:
    from gpurag import Index

    out = tmp_path_factory.mktemp("serve-limits") / "idx"
    Index.build(TEXTS, out, show_progress=False, graph=False)
    return out


class Live:
    """``create_app`` under uvicorn with the same protocol class as ``gpurag serve``."""

    def __init__(self, index: Path, **fields) -> None:
        import uvicorn

        from gpurag.serve.app import create_app
        from gpurag.serve.guards import header_timeout_protocol
        from gpurag.serve.holder import IndexHolder

        config = ServeConfig(reload_poll_s=0, **fields)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(
            create_app(IndexHolder(index), config), log_level="warning",
            http=header_timeout_protocol(config.header_timeout_s)))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       daemon=True)
        self.thread.start()
        for _ in range(600):
            if self.server.started:
                break
            time.sleep(0.05)

    def raw(self, data: bytes, wait_s: float = 20.0) -> bytes:
        """Send ``data`` on a fresh connection; everything the server sends until it closes
        the connection (or ``wait_s`` passes: then what came so far)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=wait_s) as s:
            s.sendall(data)
            out = b""
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                try:
                    chunk = s.recv(65536)
                except TimeoutError:
                    break
                if not chunk:
                    return out + b"<closed>"
                out += chunk
            return out

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def live(tiny_index):
    servers: list[Live] = []

    def start(**fields) -> Live:
        servers.append(Live(tiny_index, **fields))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_metrics_label_made_up_methods_as_one_value(live):
    server = live(insecure_no_auth=True)
    with httpx.Client() as client:
        for i in range(60):
            client.request(f"MADEUP{i}", f"{server.url}/healthz")
        text = client.get(f"{server.url}/metrics").text
    assert "MADEUP" not in text
    series = [line for line in text.splitlines() if line.startswith("gpurag_http_requests")
              and 'method="other"' in line]
    assert series and sum(float(line.rsplit(" ", 1)[1]) for line in series) == 60


def test_headers_sent_too_slowly_close_the_connection(live):
    server = live(insecure_no_auth=True, header_timeout_s=0.5)
    got = server.raw(b"POST /v1/query HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    assert got.endswith(b"<closed>"), got


def test_body_sent_too_slowly_is_answered_408(live):
    server = live(insecure_no_auth=True, body_timeout_s=0.5)
    got = server.raw(b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 100\r\n\r\n{\"question\": ")
    assert got.startswith(b"HTTP/1.1 408 "), got
    assert b"request body not received within 0.5 s" in got


def test_auth_is_checked_before_the_body_is_read(live):
    server = live(api_keys=["the-key"], body_timeout_s=30)
    # headers announce a large body that never comes: the answer must not wait for it
    got = server.raw(b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 900000\r\n\r\n", wait_s=15)
    assert got.startswith(b"HTTP/1.1 401 "), got
    assert b"missing or invalid API key" in got
    ok = httpx.post(f"{server.url}/v1/query", json={"question": "Skerryvore?", "k": 1},
                    headers={"Authorization": "Bearer the-key"})
    assert ok.status_code == 200


def test_boolean_k_and_settings_are_refused(live):
    server = live(insecure_no_auth=True)
    for body in ({"question": "Skerryvore?", "k": True},
                 {"question": "Skerryvore?", "damping": True}):
        r = httpx.post(f"{server.url}/v1/query", json=body)
        assert r.status_code == 400, (body, r.text)
        assert "expected a number" in r.text and "true" in r.text
    r = httpx.post(f"{server.url}/v1/query", json={"question": "Skerryvore?", "k": 1})
    assert r.status_code == 200 and len(r.json()["results"][0]["passages"]) == 1


@pytest.mark.parametrize("field", ["request_timeout_s", "batch_window_ms", "reload_poll_s",
                                   "header_timeout_s", "body_timeout_s"])
def test_non_finite_serve_settings_are_refused(field):
    for value in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=field):
            ServeConfig(**{field: value})


@pytest.mark.parametrize(("args", "needle"), [
    (["--timeout", "nan"], "--timeout (request_timeout_s) must be a finite number"),
    (["--header-timeout", "0"], "--header-timeout (header_timeout_s) must be > 0"),
    (["--port", "70000"], "--port (port) must be 0 to 65535"),
])
def test_serve_refuses_bad_numbers_with_one_line(tiny_index, args, needle, capsys,
                                                 monkeypatch):
    """In this process (argument checks; a real ``gpurag serve`` process's exit and stderr:
    test_serve_takes_a_config_file): the console script's ``main``, stopped with an error
    should the settings pass and the service start opening its index."""
    from gpurag.cli import main
    from gpurag.serve import holder

    def started(*a, **k):
        raise AssertionError("gpurag serve accepted the settings and started")

    monkeypatch.setattr(holder, "IndexHolder", started)
    assert main(["serve", str(tiny_index), "--insecure-no-auth", *args]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], err
    assert ConfigError.__name__ not in err


def test_serve_takes_a_config_file(tiny_index, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    bad = tmp_path / "bad.toml"
    bad.write_text("[query]\nk = 0\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "gpurag", "serve", str(tiny_index),
                           "--insecure-no-auth", "--config", str(bad)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "[query] k" in proc.stderr and str(bad) in proc.stderr
    good = tmp_path / "good.toml"
    good.write_text("[query]\nk = 1\n", encoding="utf-8")
    server = subprocess.Popen([sys.executable, "-m", "gpurag", "serve", str(tiny_index),
                               "--insecure-no-auth", "--port", "0", "--reload-poll", "0",
                               "--config", str(good)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
    try:
        first = server.stdout.readline()
        assert first.startswith("gpurag serve: http://127.0.0.1:"), first
        url = f"http://127.0.0.1:{int(first.split('127.0.0.1:')[1].split()[0])}"
        r = httpx.post(f"{url}/v1/query", json={"question": "Skerryvore?"}, timeout=60)
        assert r.status_code == 200 and len(r.json()["results"][0]["passages"]) == 1
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
