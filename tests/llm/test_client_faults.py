"""Error paths of the client against fault doubles: HTTP errors, garbage, hangs, no server."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from gpurag.llm.client import ChatRequest, LLMClient, LLMError
from gpurag.llm.config import LLMConfig

OK_BODY = {"choices": [{"message": {"content": '{"ok": true}'}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 7, "completion_tokens": 3}}


def config(url: str = "http://double.test/v1", **kw) -> LLMConfig:
    defaults = dict(url=url, model="m", cache_dir=None, max_retries=3, backoff_s=0.01,
                    backoff_max_s=0.05, timeout_s=5, concurrency=4)
    return LLMConfig(**{**defaults, **kw})


def request(text: str = "hi", **kw) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], **kw)


class Script:
    """A transport double answering from a list of (status, body) steps, then OK."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.calls = []

    def __call__(self, req: httpx.Request) -> httpx.Response:
        self.calls.append(json.loads(req.content) if req.content else None)
        if self.steps:
            status, body, *headers = self.steps.pop(0)
            return httpx.Response(status, content=body if isinstance(body, bytes) else
                                  json.dumps(body).encode(),
                                  headers=headers[0] if headers else None)
        return httpx.Response(200, json=OK_BODY)


def client_for(script, **kw) -> LLMClient:
    return LLMClient(config(**kw), transport=httpx.MockTransport(script))


def test_transient_errors_are_retried_then_succeed():
    script = Script((500, {"error": "boom"}), (503, {"error": "busy"}),
                    (429, {"error": "slow down"}, {"Retry-After": "0.01"}),
                    (200, b"this is not json"))
    client = client_for(script, max_retries=4)
    result = client.complete(request())
    assert result.content == '{"ok": true}' and not result.cached
    assert len(script.calls) == 5
    assert client.usage.retries == 4 and client.usage.requests == 1
    assert (client.usage.prompt_tokens, client.usage.completion_tokens) == (7, 3)


def test_persistent_500_gives_error_after_max_retries():
    script = Script(*[(500, {"error": "down"})] * 10)
    client = client_for(script, max_retries=2)
    with pytest.raises(LLMError) as info:
        client.complete(request(tag="chunk-7"))
    assert info.value.status == 500 and info.value.tag == "chunk-7"
    assert len(script.calls) == 3 and client.usage.errors == 1


def test_client_errors_are_not_retried():
    script = Script((400, {"error": "bad request"}))
    client = client_for(script)
    result = client.complete_batch([request()])[0]
    assert isinstance(result, LLMError) and result.status == 400
    assert len(script.calls) == 1


def test_partial_failures_stay_per_item():
    def handler(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        if "bad" in body["messages"][0]["content"]:
            return httpx.Response(500, json={"error": "nope"})
        return httpx.Response(200, json=OK_BODY)

    client = LLMClient(config(max_retries=1), transport=httpx.MockTransport(handler))
    results = client.complete_batch([request("a"), request("bad"), request("c")])
    assert [isinstance(r, LLMError) for r in results] == [False, True, False]
    assert client.usage.requests == 2 and client.usage.errors == 1


def test_missing_choices_is_a_bad_response():
    client = client_for(Script((200, {"unexpected": 1})))
    result = client.complete_batch([request()])[0]
    assert isinstance(result, LLMError) and result.kind == "bad_response"


def test_identical_requests_in_a_batch_are_sent_once():
    calls = []

    async def slow(req: httpx.Request) -> httpx.Response:
        calls.append(json.loads(req.content))
        await asyncio.sleep(0.05)
        return httpx.Response(200, json=OK_BODY)

    client = LLMClient(config(), transport=httpx.MockTransport(slow))
    results = client.complete_batch([request("same")] * 5 + [request("other")])
    assert all(r.content == '{"ok": true}' for r in results)
    assert len(calls) == 2
    assert client.usage.deduplicated == 4 and sum(r.cached for r in results) == 4


def test_auto_structured_mode_falls_back_to_json_object():
    def handler(req: httpx.Request) -> httpx.Response:
        fmt = json.loads(req.content).get("response_format", {})
        if fmt.get("type") == "json_schema":
            return httpx.Response(500, json={"error": {"message": "response_format.type: "
                                                        "Input should be 'text' or 'json_object'"}})
        assert fmt == {"type": "json_object", "schema": {"type": "object"}}
        return httpx.Response(200, json=OK_BODY)

    client = LLMClient(config(max_retries=0), transport=httpx.MockTransport(handler))
    assert client.structured_mode == "json_schema"
    results = client.complete_batch([request(str(i), schema={"type": "object"}) for i in range(3)])
    assert not any(isinstance(r, LLMError) for r in results)
    assert client.structured_mode == "json_object"


def test_json_schema_payload_shape():
    script = Script()
    client = LLMClient(config(structured="json_schema", seed=3, extra_body={"top_k": 5}),
                       transport=httpx.MockTransport(script))
    client.complete(request(schema={"type": "object"}, schema_name="things", max_tokens=9))
    sent = script.calls[0]
    assert sent["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "things", "schema": {"type": "object"}}}
    assert (sent["max_tokens"], sent["seed"], sent["top_k"], sent["model"]) == (9, 3, 5, "m")


def test_hung_server_times_out(silent_server):
    client = LLMClient(config(silent_server.url, timeout_s=0.3, max_retries=1))
    started = time.monotonic()
    results = client.complete_batch([request("a"), request("b")])
    elapsed = time.monotonic() - started
    assert all(isinstance(r, LLMError) and r.kind == "timeout" for r in results)
    assert elapsed < 3
    assert silent_server.accepted >= 2
    assert client.usage.in_flight == 0


def test_server_down_fails_fast(dead_url):
    client = LLMClient(config(dead_url, max_retries=2, concurrency=1))
    started = time.monotonic()
    results = client.complete_batch([request(str(i)) for i in range(50)])
    assert all(isinstance(r, LLMError) for r in results)
    kinds = [r.kind for r in results]
    # The first request to reach the dead server fails with "connect" (at most one per worker
    # in flight); every later one fails fast as "unavailable", in whatever order they ran.
    assert 1 <= kinds.count("connect") <= 2
    assert kinds.count("unavailable") == len(kinds) - kinds.count("connect")
    assert client.usage.retries <= 4
    assert time.monotonic() - started < 5


def test_model_is_discovered_from_the_server():
    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "served-model"}]})
        assert json.loads(req.content)["model"] == "served-model"
        return httpx.Response(200, json=OK_BODY)

    client = LLMClient(config(model=""), transport=httpx.MockTransport(handler))
    client.complete(request())
    assert client.model == "served-model"


def test_ctrl_c_cancels_in_flight_requests(silent_server, tmp_path: Path):
    """SIGINT during a batch: the call raises KeyboardInterrupt promptly, nothing in flight."""
    script = textwrap.dedent(f"""
        import sys
        from gpurag.llm.client import ChatRequest, LLMClient
        from gpurag.llm.config import LLMConfig
        cfg = LLMConfig(url={silent_server.url!r}, model="m", cache_dir=None, timeout_s=60)
        client = LLMClient(cfg)
        reqs = [ChatRequest([{{"role": "user", "content": str(i)}}]) for i in range(20)]
        print("ready", flush=True)
        try:
            client.complete_batch(reqs)
        except KeyboardInterrupt:
            print("interrupted", client.usage.in_flight, client.usage.peak_in_flight, flush=True)
            sys.exit(130)
        print("finished", flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 20
    while silent_server.accepted < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert silent_server.accepted == 20
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=15)
    assert time.monotonic() - started < 5
    assert proc.returncode == 130, err
    assert out.split() == ["interrupted", "0", "20"]


def _answer(content: str) -> dict:
    return {"choices": [{"message": {"content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3}}


def test_malformed_schema_answers_are_errors_and_never_cached(tmp_path: Path):
    script = Script((200, _answer("Sorry, I cannot produce JSON.")), (200, _answer("[1, 2")))
    client = client_for(script, cache_dir=str(tmp_path), max_retries=0)
    first = client.complete_batch([request(schema={"type": "object"}, tag="t1")])[0]
    assert isinstance(first, LLMError) and first.kind == "malformed" and not first.retriable
    assert first.reason == "malformed JSON" and first.content.startswith("Sorry")
    assert len(client.cache) == 0 and client.usage.requests == 1 and client.usage.errors == 1
    second = client.complete(request(schema={"type": "object"}))  # asked again: repaired
    assert second.parsed == [1, 2] and len(client.cache) == 1 and len(script.calls) == 2


def test_validate_decides_what_is_cached_and_a_bad_cached_answer_is_asked_again(tmp_path: Path):
    def needs_ok(result):
        value = json.loads(result.content)
        if value.get("ok") is not True:
            raise ValueError("ok is not true")
        return value

    req = request(schema={"type": "object"}, validate=needs_ok)
    script = Script((200, _answer('{"ok": false}')))
    client = client_for(script, cache_dir=str(tmp_path), max_retries=0)
    bad = client.complete_batch([req])[0]
    assert isinstance(bad, LLMError) and bad.reason == "answer off schema"
    # an answer cached before answers were checked (or by an older gpurag) is not served
    client.cache.put(client.request_key(req, "m"), {"content": '{"ok": false}',
                                                    "finish_reason": "stop", "usage": {}})
    good = client.complete(req)
    assert good.parsed == {"ok": True} and not good.cached
    assert client.usage.dropped_cache_entries == 1 and client.usage.cache_hits == 0
    again = client.complete(req)
    assert again.cached and again.parsed == {"ok": True} and len(script.calls) == 2


def test_failure_reasons_group_errors():
    script = Script((500, {"error": "x"}), (200, b"<html>502</html>"), (200, {"choices": []}))
    client = client_for(script, max_retries=0)
    results = client.complete_batch([request("a"), request("b"), request("c")])
    assert sorted(r.reason for r in results) == ["HTTP 500", "body not JSON", "no choices"]


def test_failed_description_merges_keep_the_joined_text_and_are_reported(caplog):
    import pandas as pd

    from gpurag.llm.reports import merge_descriptions

    def answer(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        if "Curie" in json.dumps(body["messages"]):
            return httpx.Response(400, json={"error": "bad request"})
        return httpx.Response(200, json={**OK_BODY, "choices": [
            {"message": {"content": "no json here"}, "finish_reason": "stop"}]})

    descriptions = pd.DataFrame({
        "name": ["Marie Curie"] * 2 + ["Warsaw"] * 2 + ["Paris"],
        "description": ["A physicist.", "A chemist.", "A city.", "Capital of Poland.",
                        "Capital of France."]})
    client = LLMClient(config(), transport=httpx.MockTransport(answer))
    with caplog.at_level("WARNING", logger="gpurag.llm.reports"):
        merged = merge_descriptions(client, descriptions, threshold=1).set_index("name")
    assert merged.loc["Marie Curie", "description"] == "A physicist. A chemist."
    assert merged.loc["Warsaw", "description"] == "A city. Capital of Poland."
    assert not merged["merged"].any()
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "2 of 2 description merges failed" in warning
    assert "'Warsaw': malformed" in warning and "'Marie Curie': HTTP 400" in warning
