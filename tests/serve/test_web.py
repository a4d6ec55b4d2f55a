"""What a browser gets from the service: the question page at ``/`` (tested in headless
Chromium against a real ``gpurag serve``: type a question, see the ranked passages), the API
docs at ``/docs`` and ``/redoc`` from bundled assets (no CDN), the access log, reloads at INFO."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time

import httpx
import pytest

from .cdp import CHROMIUM, Browser
from .conftest import REPO

QUESTION = "Where is the headquarters of the company founded by the inventor of the Pellucid cell?"


def test_docs_and_redoc_are_served_from_bundled_assets(holder, start_server):
    pytest.importorskip("fastapi_offline")
    live = start_server(holder, api_keys=["k1"])
    docs = httpx.get(f"{live.url}/docs")  # no key needed to read the docs
    assert docs.status_code == 200 and "text/html" in docs.headers["content-type"]
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", docs.text) + re.findall(
        r"""url:\s*['"]([^'"]+)['"]""", docs.text)
    assert "/docs/assets/swagger-ui-bundle.js" in urls and "/openapi.json" in urls
    assert not [u for u in urls if u.startswith(("http:", "https:", "//"))], urls
    for url in ("/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"):
        asset = httpx.get(f"{live.url}{url}")
        assert asset.status_code == 200 and len(asset.content) > 10_000, url
    redoc = httpx.get(f"{live.url}/redoc")
    assert redoc.status_code == 200 and "/docs/assets/redoc.standalone.js" in redoc.text
    assert "fonts.googleapis" not in redoc.text
    assert httpx.get(f"{live.url}/openapi.json").json()["paths"]["/v1/query"]
    page = httpx.get(f"{live.url}/")
    assert page.status_code == 200 and 'id="question"' in page.text
    assert httpx.get(f"{live.url}/ui/app.js").status_code == 200
    assert httpx.post(f"{live.url}/v1/query", json={"question": "x"}).status_code == 401


def test_access_log_has_one_common_log_format_line_per_request(holder, start_server, caplog):
    live = start_server(holder, api_keys=["secret-key"])
    with caplog.at_level(logging.INFO, logger="gpurag.serve.access"):
        httpx.get(f"{live.url}/healthz")
        httpx.post(f"{live.url}/v1/query?token=hidden", json={"question": QUESTION, "k": 2},
                   headers={"Authorization": "Bearer secret-key"})
        httpx.get(f"{live.url}/nowhere")
    lines = [r.getMessage() for r in caplog.records if r.name == "gpurag.serve.access"]
    assert len(lines) == 3, lines
    clf = re.compile(r'^127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000\] '
                     r'"(GET|POST) (\S+) HTTP/1\.1" (\d{3}) (\d+) \d+\.\d{3}$')
    parsed = [clf.match(line) for line in lines]
    assert all(parsed), lines
    assert [(m[1], m[2], m[3]) for m in parsed] == [
        ("GET", "/healthz", "200"), ("POST", "/v1/query", "200"), ("GET", "/nowhere", "404")]
    assert int(parsed[1][4]) > 100  # the response's bytes
    assert not any("secret-key" in line or "hidden" in line for line in lines)


def test_a_reload_is_logged_at_info(tmp_path, caplog):
    from gpurag import Index
    from gpurag.serve.holder import IndexHolder

    out = tmp_path / "idx"
    Index.build(["The first version of a tiny index."], out, show_progress=False, graph=False)
    served = IndexHolder(out)
    Index.build(["The second version of the tiny index."], out, show_progress=False,
                graph=False)
    with caplog.at_level(logging.DEBUG, logger="gpurag.serve"):
        swapped, _ = served.reload()
    assert swapped
    reloads = [r for r in caplog.records if "serving index version" in r.getMessage()]
    assert [r.levelno for r in reloads] == [logging.INFO]


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium installed")
def test_web_page_answers_a_typed_question_in_headless_chromium(graph_index_path, tmp_path):
    """A real ``gpurag serve``; Chromium opens ``/``, the question is typed into the box and
    Enter pressed; the page lists the passages the API returns, in order, with evidence."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpurag", "serve", str(graph_index_path), "--port", "0",
         "--insecure-no-auth", "--reload-poll", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    browser = None
    try:
        for _ in range(1200):  # bounded: 120 s for the first line
            if lines or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert lines and lines[0].startswith("gpurag serve: http://127.0.0.1:"), lines
        url = f"http://127.0.0.1:{int(lines[0].split('127.0.0.1:')[1].split()[0])}"
        expected = httpx.post(f"{url}/v1/query", json={"question": QUESTION, "k": 5},
                              timeout=120).json()["results"][0]
        browser = Browser(str(tmp_path / "profile"))
        browser.open(f"{url}/")
        browser.wait_for("document.readyState === 'complete' && "
                         "!!document.getElementById('question')")
        browser.evaluate("document.getElementById('question').focus()")
        browser.type_text(QUESTION)
        assert browser.evaluate("document.getElementById('question').value") == QUESTION
        browser.press_enter()
        shown = browser.wait_for(
            "document.querySelectorAll('li.passage').length && Array.from("
            "document.querySelectorAll('li.passage')).map(li => ({rank: li.dataset.rank, "
            "doc: li.dataset.docId, text: li.textContent}))")
        assert [p["doc"] for p in shown] == [p["doc_id"] for p in expected["passages"]]
        assert [p["rank"] for p in shown] == [str(i) for i in range(1, len(shown) + 1)]
        top = expected["passages"][0]
        assert top["title"] in shown[0]["text"]
        status = browser.evaluate("document.getElementById('status').textContent")
        assert f"{len(shown)} passages, graph mode" in status
        if expected["paths"]:  # evidence chains and the graph are drawn
            assert "evidence: " in " ".join(p["text"] for p in shown)
            assert browser.evaluate("document.querySelectorAll('#graph circle').length") > 2
    finally:
        if browser is not None:
            browser.close()
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=30)
    out = "".join(lines)
    access = [line for line in lines if "gpurag.serve.access" in line]
    assert any('"GET / HTTP/1.1" 200' in line for line in access), out[-2000:]
    assert any('"POST /v1/query HTTP/1.1" 200' in line for line in access), out[-2000:]


def test_http_takes_the_bm25_mode_like_python(holder, start_server):
    live = start_server(holder, insecure_no_auth=True)
    r = httpx.post(f"{live.url}/v1/query", json={"question": QUESTION, "k": 3, "mode": "bm25"})
    assert r.status_code == 200, r.text
    got = r.json()["results"][0]
    want = holder.current.index.query(QUESTION, k=3, mode="bm25")
    assert got["mode"] == "bm25"
    assert [p["chunk_id"] for p in got["passages"]] == [p.chunk_id for p in want.passages]
