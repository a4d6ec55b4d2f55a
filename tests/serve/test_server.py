"""``gpurag serve`` over HTTP: a real uvicorn server on an ephemeral loopback port."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.serve.conftest import comparable

KEYS = ["key-one", "key-two"]
AUTH = {"Authorization": f"Bearer {KEYS[0]}"}
QUESTIONS = ["Who designed the Corven Lighthouse?", "Where is Tarnwick?",
             "When was the lighthouse automated?", "Who was Anselm Greyhaven?",
             "What did Henning Ask build?", "Which harbour walls did Ask build?"]


@pytest.fixture(scope="module")
def server(holder):
    from gpurag.serve.app import create_app
    from gpurag.serve.config import ServeConfig
    from tests.serve.conftest import LiveServer

    live = LiveServer(create_app(holder, ServeConfig(api_keys=KEYS, reload_poll_s=0,
                                                     max_k=20, max_questions=8,
                                                     max_question_chars=200,
                                                     max_body_bytes=4096)))
    yield live
    live.stop()


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as c:
        yield c


def post(client, body, path="/v1/query", **kw):
    return client.post(path, json=body, **kw)


def test_results_equal_the_python_api(client, holder):
    index = holder.current.index
    for mode in (None, "dense", "graph"):
        r = post(client, {"question": QUESTIONS[0], "k": 4, "mode": mode})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["index_version"] == holder.current.version
        assert r.headers["x-gpurag-index-version"] == holder.current.version
        [got] = body["results"]
        assert comparable(got) == comparable(index.query(QUESTIONS[0], k=4, mode=mode).to_dict())
    r = post(client, {"questions": QUESTIONS[:3], "k": 2, "dense_head": 0})
    assert r.status_code == 200, r.text
    direct = index.query_batch(QUESTIONS[:3], k=2, dense_head=0)
    assert [comparable(x) for x in r.json()["results"]] == \
        [comparable(x.to_dict()) for x in direct]


def test_concurrent_requests_each_get_their_own_result_and_errors_stay_isolated(client,
                                                                                holder):
    index = holder.current.index
    bodies = [{"question": q, "k": 2 + i % 2} for i, q in enumerate(QUESTIONS)]
    bodies.insert(3, {"question": "a question in an unknown mode", "mode": "bogus"})
    with ThreadPoolExecutor(len(bodies)) as pool:
        responses = list(pool.map(lambda b: post(client, b), bodies))
    for body, r in zip(bodies, responses, strict=True):
        if body.get("mode") == "bogus":
            assert r.status_code == 400
            assert "unknown query mode 'bogus'" in r.json()["detail"]
            continue
        assert r.status_code == 200, r.text
        [got] = r.json()["results"]
        assert got["question"] == body["question"]
        assert comparable(got) == comparable(index.query(body["question"], k=body["k"]).to_dict())


def test_api_keys(server, client):
    anon = httpx.Client(base_url=server.url, timeout=30)
    body = {"question": QUESTIONS[0]}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEYS[0]}"},
                    {"Authorization": f"Bearer {KEYS[0]}x"}):
        r = anon.post("/v1/query", json=body, headers=headers)
        assert r.status_code == 401, headers
        assert r.headers["www-authenticate"] == "Bearer"
    for path in ("/v1/info", "/metrics"):
        assert anon.get(path).status_code == 401
    assert anon.post("/v1/admin/reload").status_code == 401
    for key in KEYS:
        r = anon.post("/v1/query", json=body, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200
    assert anon.get("/healthz").json() == {"status": "ok", "index_version": None}
    assert anon.get("/readyz").status_code == 200
    anon.close()


def test_limits_and_malformed_input(client):
    cases = [
        ({"question": "x" * 201}, 413, "characters"),
        ({"questions": ["q"] * 9}, 413, "questions"),
        ({"question": "q", "k": 0}, 400, None),
        ({"question": "q", "k": 21}, 400, "limit is 20"),
        ({"question": "q", "k": "five"}, 400, None),
        ({"question": "q", "color": "red"}, 400, None),
        ({"question": "q", "questions": ["q"]}, 400, "exactly one"),
        ({}, 400, "exactly one"),
        ({"question": "   "}, 400, "empty"),
        ({"question": "q", "damping": 2}, 400, None),
    ]
    for body, status, text in cases:
        r = post(client, body)
        assert r.status_code == status, (body, r.text)
        if text:
            assert text in json.dumps(r.json()["detail"]), (body, r.text)
    r = post(client, {"question": "many words " * 500})  # over max_body_bytes=4096
    assert r.status_code == 413 and "4096 bytes" in r.json()["detail"]

    def chunked():  # no Content-Length: counted while streaming
        for _ in range(10):
            yield b" " * 1000

    r = client.post("/v1/query", content=chunked(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    r = client.post("/v1/query", content=b'{"question": "q",',
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json() == {"detail": "malformed JSON body"}
    r = post(client, {"question": "q", "mode": "graph", "rerank": "no-such-reranker"})
    assert r.status_code in (400, 422, 500)
    assert "Traceback" not in r.text and 'File "' not in r.text


def test_info_metrics_openapi(client, holder):
    info = client.get("/v1/info").json()
    assert info["index_version"] == holder.current.version
    assert info["index"]["counts"]["chunks"] > 0 and "path" not in info["index"]
    assert "components" in info["environment"] and info["serve"]["batching"] is True
    post(client, {"question": QUESTIONS[1]})
    post(client, {"question": "q", "k": 0})
    text = client.get("/metrics").text
    assert 'gpurag_http_requests_total{route="/v1/query",method="POST",status="200"}' in text
    assert 'gpurag_http_requests_total{route="/v1/query",method="POST",status="400"}' in text
    assert 'gpurag_http_request_duration_seconds_bucket{route="/v1/query",le="+Inf"}' in text
    assert 'gpurag_batch_size_bucket{le="1"}' in text and "gpurag_batch_size_count" in text
    assert "gpurag_queue_depth 0" in text
    assert f'gpurag_index_info{{version="{holder.current.version}"}} 1' in text
    schema = client.get("/openapi.json").json()
    op = schema["paths"]["/v1/query"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/QueryRequest")
    assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/QueryResponse")
    assert {"400", "401", "413", "503", "504"} <= set(op["responses"])
    assert op["security"] == [{"HTTPBearer": []}]
    assert "QueryResult" in schema["components"]["schemas"]


def test_answer_without_llm_is_503(client):
    r = post(client, {"question": QUESTIONS[0]}, path="/v1/answer")
    assert r.status_code == 503 and "no LLM is configured" in r.json()["detail"]


def test_cors_off_by_default(server, holder, start_server):
    pre = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    r = httpx.options(f"{server.url}/v1/query", headers=pre)
    assert "access-control-allow-origin" not in r.headers
    live = start_server(holder, api_keys=KEYS, cors_origins=["https://app.example"])
    r = httpx.options(f"{live.url}/v1/query", headers=pre)
    assert r.headers["access-control-allow-origin"] == "https://app.example"


def test_full_queue_sheds_with_503_and_retry_after(holder, start_server):
    live = start_server(holder, api_keys=KEYS, max_queue=2, batch_window_ms=1500)
    with httpx.Client(base_url=live.url, headers=AUTH, timeout=60) as c, \
            ThreadPoolExecutor(1) as pool:
        first = pool.submit(post, c, {"questions": QUESTIONS[:2]})
        for _ in range(200):  # bounded: until the first request waits in the queue
            if "gpurag_queue_depth 2" in c.get("/metrics").text:
                break
            time.sleep(0.01)
        r = post(c, {"question": QUESTIONS[2]})
        assert r.status_code == 503
        assert r.headers["retry-after"] == "1" and "overloaded" in r.json()["detail"]
        assert first.result().status_code == 200
        assert "gpurag_shed_total 1" in c.get("/metrics").text
        r = post(c, {"questions": QUESTIONS[:3]})  # could never fit: refused, not shed
        assert r.status_code == 413 and "limit is 2" in r.json()["detail"]


def test_slow_request_times_out_with_504(holder, start_server):
    live = start_server(holder, api_keys=KEYS, batch_window_ms=1000, request_timeout_s=0.05)
    r = httpx.post(f"{live.url}/v1/query", json={"question": QUESTIONS[0]}, headers=AUTH)
    assert r.status_code == 504 and "no answer within" in r.json()["detail"]


def test_response_schema_mirrors_query_result():
    """The OpenAPI models list exactly the fields of the Python API's result dataclasses."""
    import dataclasses

    from gpurag.query import results
    from gpurag.serve import schemas

    for name in ("QueryResult", "Passage", "SeedEntity", "EntityPath"):
        python = [f.name for f in dataclasses.fields(getattr(results, name))]
        assert list(getattr(schemas, name).model_fields) == python, name


def test_global_mode_over_http(client, holder):
    """``mode: global`` answers without an LLM: the communities ranked for the question, as
    the Python API gives them."""
    body = {"question": "What are the main themes of this corpus?", "mode": "global",
            "communities": 3, "k": 4}
    r = post(client, body)
    assert r.status_code == 200, r.text
    [got] = r.json()["results"]
    direct = holder.current.index.query(body["question"], k=4, mode="global", communities=3)
    assert [c["community"] for c in got["communities"]] == \
        [h.community for h in direct.communities]
    assert got["communities"][0]["entities"] and got["communities"][0]["summary"]
    assert [p["chunk_id"] for p in got["passages"]] == direct.chunk_ids
    r = post(client, {**body, "damping": 0.5})
    assert r.status_code == 400 and "not valid with mode='global'" in r.json()["detail"]


def test_confidence_and_min_confidence_over_http(client, holder):
    """Each result has the Python API's confidence; ``min_confidence`` returns no passages
    for a question below it."""
    qs = ["Who founded Kestrel Dynamics Ltd.?", "What is the capital of France?"]
    direct = holder.current.index.query_batch(qs, k=3)
    r = post(client, {"questions": qs, "k": 3})
    assert r.status_code == 200, r.text
    got = r.json()["results"]
    assert [x["confidence"] for x in got] == [d.confidence for d in direct]
    assert got[0]["chains"]  # the evidence chains travel too
    cut = (direct[0].confidence + direct[1].confidence) / 2
    r = post(client, {"questions": qs, "k": 3, "min_confidence": cut})
    held = r.json()["results"]
    assert held[0]["passages"] and held[1]["passages"] == []
    assert post(client, {"question": qs[0], "min_confidence": 2}).status_code in (400, 422)
