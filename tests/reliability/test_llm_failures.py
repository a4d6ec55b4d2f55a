"""LLM failures never pass as success (issue 17, items 3-5).

A fake OpenAI-compatible HTTP server injects the faults (HTTP 500, truncated bodies, HTML, no
``choices``, garbage answers); everything else is real: the CLI, the build pipeline with its
work directory, the on-disk response cache, the embedder.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from gpurag.cli import main as gpurag_main
from gpurag.extract.llm import LLMExtractionError, LLMExtractor
from gpurag.llm.cache import ResponseCache
from gpurag.llm.config import LLMConfig
from gpurag.llm.global_search import NO_ANSWER
from gpurag.llm.server import free_port

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"
NAME = re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*")
FAULTS = ("500", "truncated", "html", "no_choices", "garbage")


class FakeLLM:
    """An OpenAI-compatible server: ``mode`` "good" answers extraction requests with the
    capitalised names of the chunk, any other mode injects that fault. With ``only_for`` set,
    the fault hits only requests whose last message contains that text. ``texts`` keeps the
    last message of every chat request received."""

    def __init__(self) -> None:
        self.mode = "good"
        self.only_for: str | None = None
        self.texts: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # /v1/models
                self._send(200, {"object": "list", "data": [{"id": "fake"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = body["messages"][-1]["content"]
                fake.texts.append(text)
                mode = fake.mode if fake.only_for is None or fake.only_for in text else "good"
                if mode == "500":
                    self._send(500, {"error": {"message": "internal error"}})
                elif mode == "truncated":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "400")
                    self.end_headers()
                    self.wfile.write(b'{"choices": [{"message": {"con')
                    self.wfile.flush()
                    self.close_connection = True
                elif mode == "html":
                    self._send(200, b"<html><body><h1>502 Bad Gateway</h1></body></html>",
                               "text/html")
                elif mode == "no_choices":
                    self._send(200, {"id": "x", "object": "chat.completion", "choices": []})
                else:
                    content = ("Sure! The entities are Paris and more." if mode == "garbage"
                               else json.dumps(_good_answer(body, text)))
                    self._send(200, {"choices": [{"message": {"role": "assistant",
                                                              "content": content},
                                                  "finish_reason": "stop"}],
                                     "usage": {"prompt_tokens": 10, "completion_tokens": 5}})

            def _send(self, status: int, payload: object, ctype: str = "application/json"
                      ) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _good_answer(body: dict, text: str) -> dict:
    fmt = body.get("response_format") or {}
    schema = fmt.get("json_schema", {}).get("schema") or fmt.get("schema") or {}
    props = schema.get("properties", {})
    if "relations" in props:
        names = props["relations"]["items"]["properties"]["head"]["enum"]
        return {"relations": [{"head": names[0], "relation": "related to", "tail": names[1],
                               "strength": 5}]}
    if "entities" in props:
        chunk = text.split("\n", 2)[2] if text.startswith("Text:") else ""
        names = list(dict.fromkeys(NAME.findall(chunk)))[:4]
        return {"entities": [{"name": n, "type": "other", "description": f"{n}."}
                             for n in names]}
    return {"answer": "fake", "citations": []}


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    server = FakeLLM()
    yield server
    server.close()


@pytest.fixture
def llm_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Quick retries, a fresh response cache; the CLI's --llm-* options write GPURAG_LLM_*
    variables, so they are set here first and monkeypatch restores them afterwards."""
    cache = tmp_path / "llm-cache"
    for var, value in {"URL": "http://127.0.0.1:9/v1", "MODEL": "fake", "CACHE_DIR": str(cache),
                       "MAX_RETRIES": "1", "BACKOFF_S": "0.01", "BACKOFF_MAX_S": "0.02",
                       "TIMEOUT_S": "20", "CONCURRENCY": "4", "MAX_FAILURE_RATE": "0.05",
                       "MAX_TOKENS": "256", "STRUCTURED": "auto"}.items():
        monkeypatch.setenv(f"GPURAG_LLM_{var}", value)
    monkeypatch.setenv("GPURAG_PROGRESS", "0")
    return cache


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    lines = (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:4]
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _index(corpus: Path, out: Path, url: str, *extra: str) -> int:
    return gpurag_main(["-q", "index", str(corpus), "-o", str(out), "--extractor", "llm",
                        "--llm-url", url, *extra])


def _counts(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))["counts"]


# -- item 3: a failure policy for extraction ----------------------------------------------------

@pytest.mark.parametrize("fault", FAULTS)
def test_build_fails_when_every_extraction_call_fails(fault, fake_llm, llm_env, corpus,
                                                      tmp_path, capsys):
    fake_llm.mode = fault
    out = tmp_path / "idx"
    assert _index(corpus, out, fake_llm.url) == 2
    err = capsys.readouterr().err
    reason = {"500": "HTTP 500", "truncated": "broken connection", "html": "body not JSON",
              "no_choices": "no choices", "garbage": "malformed JSON"}[fault]
    assert re.search(rf"(\d+) of \1 LLM extraction calls failed \({reason}: \1\)", err), err
    assert "rerun" in err
    assert not (out / "manifest.json").exists()  # nothing committed


def test_failed_build_resumes_paying_only_for_the_failed_calls(fake_llm, llm_env, corpus,
                                                               tmp_path, capsys):
    flaky = json.loads(corpus.read_text(encoding="utf-8").splitlines()[1])["title"]
    fake_llm.mode, fake_llm.only_for = "500", flaky
    out = tmp_path / "idx"
    assert _index(corpus, out, fake_llm.url) == 2  # 1 of ~8 calls failed: above 5%
    assert "1 of" in capsys.readouterr().err
    assert not (out / "manifest.json").exists()
    fake_llm.mode, sent_before = "good", len(fake_llm.texts)
    assert _index(corpus, out, fake_llm.url) == 0
    resent = fake_llm.texts[sent_before:]
    assert resent and all(flaky in text for text in resent)  # only the failed chunk's calls
    counts = _counts(out)
    assert counts["entities"] > 0 and counts.get("extract_llm_failed_calls", 0) == 0


def test_failures_below_the_threshold_are_reported_not_silent(fake_llm, llm_env, corpus,
                                                              tmp_path, capsys, caplog):
    flaky = json.loads(corpus.read_text(encoding="utf-8").splitlines()[1])["title"]
    fake_llm.mode, fake_llm.only_for = "500", flaky
    out = tmp_path / "idx"
    with caplog.at_level(logging.WARNING, logger="gpurag.extract.llm"):
        assert _index(corpus, out, fake_llm.url, "--llm-max-failure-rate", "0.5") == 0
    counts = _counts(out)
    assert counts["extract_llm_failed_calls"] == counts["extract_llm_failed_http_500"] == 1
    assert counts["extract_llm_calls"] > 1 and counts["entities"] > 0
    assert "extract_llm_failed_calls: 1" in capsys.readouterr().out
    assert "1 of" in caplog.text and "HTTP 500: 1" in caplog.text


def test_zero_threshold_tolerates_no_failure(fake_llm, tmp_path):
    flaky = "Paris"
    chunks = pd.DataFrame({"chunk_id": [f"c{i}" for i in range(20)], "title": [""] * 20,
                           "text": [f"Alice Smith met Bob Jones in {'Paris' if i == 7 else 'Rome'}."
                                    for i in range(20)]})
    fake_llm.mode, fake_llm.only_for = "no_choices", flaky
    config = LLMConfig(url=fake_llm.url, model="fake", cache_dir=str(tmp_path / "c"),
                       max_retries=0)
    result = LLMExtractor(config, progress=False, max_failure_rate=0.1).extract(chunks)
    assert result.stats["llm_failed_no_choices"] >= 1
    with pytest.raises(LLMExtractionError) as info:
        LLMExtractor(config.replace(max_failure_rate=0.0), progress=False).extract(chunks)
    assert info.value.reasons == {"no choices": info.value.failed}
    assert 1 <= info.value.failed < info.value.calls


# -- item 4: only well-formed answers are cached ------------------------------------------------

def test_garbage_answers_are_not_cached_and_a_rerun_asks_again(fake_llm, llm_env, corpus,
                                                               tmp_path):
    fake_llm.mode = "garbage"
    out = tmp_path / "idx"
    assert _index(corpus, out, fake_llm.url) == 2
    with ResponseCache(llm_env) as cache:
        assert len(cache) == 0
    fake_llm.mode, sent_before = "good", len(fake_llm.texts)
    assert _index(corpus, out, fake_llm.url) == 0
    assert len(fake_llm.texts) - sent_before >= 4  # every chunk asked again
    assert _counts(out)["entities"] > 0


# -- item 5: LLM errors surface in every mode's result and exit code ---------------------------

@pytest.fixture(scope="module")
def plain_index(graph_index_path: Path) -> Path:
    return graph_index_path  # the session's (tests/conftest.py): fast extractor, no LLM


def _query(index: Path, url: str, cache: Path, *options: str) -> tuple[int, list[dict]]:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        rc = gpurag_main(["-q", "query", str(index), "Who founded Kestrel Dynamics?", "--json",
                          "--llm-url", url, "--llm-cache-dir", str(cache), *options])
    return rc, json.loads(buffer.getvalue())


@pytest.mark.parametrize("server", ["dead", "500", "garbage"])
def test_global_mode_reports_llm_failures(server, plain_index, fake_llm, llm_env, tmp_path,
                                          capsys):
    url = f"http://127.0.0.1:{free_port()}/v1" if server == "dead" else fake_llm.url
    fake_llm.mode = server
    rc, results = _query(plain_index, url, llm_env, "--mode", "global")
    assert rc == 1
    assert results[0]["error"] and results[0]["answer"] in (None, "")
    assert results[0]["answer"] != NO_ANSWER
    assert "answers failed" in capsys.readouterr().err


def test_answer_against_dead_server_fails(plain_index, llm_env):
    rc, results = _query(plain_index, f"http://127.0.0.1:{free_port()}/v1", llm_env, "--answer")
    assert rc == 1
    assert results[0]["error"] and results[0]["answer"] is None
    assert results[0]["passages"]  # retrieval itself worked


def test_eval_answers_against_dead_server_count_errors(plain_index, llm_env, tmp_path, capsys):
    data = tmp_path / "ds"
    data.mkdir()
    shutil.copy(SAMPLE / "corpus.jsonl", data / "corpus.jsonl")
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    (data / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = tmp_path / "eval.json"
    rc = gpurag_main(["-q", "eval", str(data), "--modes", "dense", "--index", str(plain_index),
                      "--answer", "--json", str(report), "--llm-url",
                      f"http://127.0.0.1:{free_port()}/v1"])
    assert rc == 1
    captured = capsys.readouterr()
    assert "(3 failed)" in captured.out and "3 LLM answers failed" in captured.err
    assert json.loads(report.read_text())["modes"]["dense"]["answer_errors"] == 3
