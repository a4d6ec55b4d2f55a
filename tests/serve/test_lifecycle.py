"""Hot reload under a stream of requests, SIGTERM draining, and the auth startup guard."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gpurag.errors import ConfigError
from gpurag.serve.auth import KeyChecker, check_auth_setup, load_api_keys
from tests.serve.conftest import REPO, SAMPLE_CORPUS

NEW_DOC = {"id": "zz-new", "title": "Vantor Beacon",
           "text": "The Vantor Beacon is a zebra-striped tower on the island of Quillmere, "
                   "lit by the engineer Odalys Brenn in 1932."}


def test_reload_during_a_stream_of_requests_loses_none(graph_index_path, tmp_path,
                                                       start_server):
    from gpurag import Index
    from gpurag.serve.holder import IndexHolder

    path = tmp_path / "index"
    shutil.copytree(graph_index_path, path)
    holder = IndexHolder(path)
    old = holder.current.version
    live = start_server(holder, insecure_no_auth=True, reload_poll_s=0.1)
    seen: list[list[tuple[int, str | None]]] = [[], [], []]
    stop = threading.Event()

    def stream(mine: list) -> None:
        with httpx.Client(base_url=live.url, timeout=60) as c:
            for i in range(2000):  # bounded; stopped once the new version has been served
                if stop.is_set():
                    break
                r = c.post("/v1/query", json={"question": f"Who lit the lighthouse? {i % 7}"})
                mine.append((r.status_code, r.headers.get("x-gpurag-index-version")))

    with ThreadPoolExecutor(3) as pool:
        streams = [pool.submit(stream, mine) for mine in seen]
        corpus = tmp_path / "corpus.jsonl"
        corpus.write_text(SAMPLE_CORPUS.read_text(encoding="utf-8") + json.dumps(NEW_DOC) + "\n",
                          encoding="utf-8")
        Index.build(corpus, path, graph=False, show_progress=False)  # commits in place
        for _ in range(1200):  # bounded: 60 s for the poller to swap and a stream to see it
            if any(mine and mine[-1][1] not in (None, old) for mine in seen):
                break
            time.sleep(0.05)
        stop.set()
        for s in streams:
            s.result()
    new = holder.current.version
    assert new != old
    served = [x for mine in seen for x in mine]
    assert served and all(status == 200 for status, _ in served), served
    assert {v for _, v in served} == {old, new}
    for mine in seen:  # each client's requests are sequential: old ones, then new ones
        versions = [v for _, v in mine]
        assert versions == sorted(versions, key=lambda v: v == new), versions
    r = httpx.post(f"{live.url}/v1/query", json={"question": "Who lit the Vantor Beacon?",
                                                   "k": 1})
    assert r.json()["results"][0]["passages"][0]["doc_id"] == "zz-new"
    assert httpx.get(f"{live.url}/v1/info").json()["index_version"] == new
    assert httpx.post(f"{live.url}/v1/admin/reload").json() == {"reloaded": False,
                                                                "index_version": new}
    assert 'gpurag_index_reloads_total{outcome="swapped"} 1' in httpx.get(
        f"{live.url}/metrics").text


def test_admin_reload_swaps_and_a_broken_index_keeps_the_old(graph_index_path, tmp_path,
                                                            start_server):
    from gpurag.serve.holder import IndexHolder

    path = tmp_path / "index"
    shutil.copytree(graph_index_path, path)
    holder = IndexHolder(path)
    old = holder.current.version
    live = start_server(holder, insecure_no_auth=True)  # no polling
    manifest = path / "manifest.json"
    data = json.loads(manifest.read_text())
    data["files"]["tables/chunks.parquet"]["bytes"] += 1  # a corrupt "new version"
    manifest.write_text(json.dumps(data))
    r = httpx.post(f"{live.url}/v1/admin/reload")
    assert r.status_code == 409 and "still serving" in r.json()["detail"]
    assert str(path) not in r.text
    assert httpx.post(f"{live.url}/v1/query", json={"question": "Who?"}).status_code == 200
    assert holder.current.version == old
    data["files"]["tables/chunks.parquet"]["bytes"] -= 1
    data["extra"]["note"] = "a new version"  # any committed change is a new version
    manifest.write_text(json.dumps(data))
    r = httpx.post(f"{live.url}/v1/admin/reload")
    assert r.status_code == 200 and r.json()["reloaded"] is True
    assert r.json()["index_version"] != old
    assert httpx.get(f"{live.url}/readyz").json()["index_version"] == r.json()["index_version"]


def _read_port(proc: subprocess.Popen) -> int:
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        first = lines.get(timeout=120)
    except queue.Empty:
        proc.kill()
        raise AssertionError("gpurag serve printed nothing") from None
    assert first.startswith("gpurag serve: http://127.0.0.1:"), first
    return int(first.split("127.0.0.1:")[1].split()[0])


def test_sigterm_finishes_in_flight_requests_and_exits_0(graph_index_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpurag", "serve", str(graph_index_path), "--port", "0",
         "--insecure-no-auth", "--batch-window-ms", "1500", "--reload-poll", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        url = f"http://127.0.0.1:{_read_port(proc)}"
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(httpx.post, f"{url}/v1/query",
                                   json={"question": f"Who designed it? {i}"}, timeout=60)
                       for i in range(3)]
            for _ in range(300):  # bounded: until all three wait in the batch window
                if "gpurag_queue_depth 3" in httpx.get(f"{url}/metrics").text:
                    break
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            statuses = [f.result().status_code for f in futures]
        assert statuses == [200, 200, 200]
        assert proc.wait(timeout=60) == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/healthz")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_auth_is_required_unless_explicitly_off_on_loopback(monkeypatch, tmp_path, capsys):
    with pytest.raises(ConfigError, match="no API keys"):
        check_auth_setup("127.0.0.1", [], insecure_no_auth=False)
    for host in ("0.0.0.0", "192.168.1.5", "::", "example.org"):
        with pytest.raises(ConfigError, match="loopback"):
            check_auth_setup(host, [], insecure_no_auth=True)
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_auth_setup(host, [], insecure_no_auth=True)
    check_auth_setup("0.0.0.0", ["k"], insecure_no_auth=False)

    from gpurag.cli import main

    assert main(["serve", str(tmp_path), "--host", "0.0.0.0", "--insecure-no-auth"]) == 2
    assert "loopback" in capsys.readouterr().err
    assert main(["serve", str(tmp_path)]) == 2
    assert "GPURAG_API_KEYS" in capsys.readouterr().err


def test_keys_from_env_and_file(monkeypatch, tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_text("# ops\nfile-key\n\n  other-key  \n", encoding="utf-8")
    monkeypatch.setenv("GPURAG_API_KEYS", "env-a, env-b,,")
    keys = load_api_keys(keys_file)
    assert keys == ["env-a", "env-b", "file-key", "other-key"]
    checker = KeyChecker(keys)
    assert checker.allows("Bearer other-key") and checker.allows("bearer env-a")
    assert not checker.allows("Bearer other") and not checker.allows(None)
    assert not checker.allows("other-key") and not checker.allows("Bearer ")
    with pytest.raises(ConfigError, match="cannot read API keys file"):
        load_api_keys(tmp_path / "missing")
