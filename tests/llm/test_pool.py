"""A pool of LLM servers: balanced by requests in flight, a dead server taken out and tried
again later, one content-addressed cache whichever server answered."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpurag.errors import ConfigError
from gpurag.llm import pool as pool_mod
from gpurag.llm.client import ChatRequest, ChatResult, LLMClient
from gpurag.llm.config import LLMConfig, normalize_url
from gpurag.llm.pool import ServerPool, split_urls
from gpurag.llm.server import ServerProcess, free_port, llama_cpp_command

from .conftest import server_missing, smollm2_gguf


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_requests_go_to_the_server_with_fewest_in_flight():
    pool = ServerPool(["a", "b", "c"], clock=Clock())
    picked = [pool.pick().url for _ in range(3)]
    assert sorted(picked) == ["a", "b", "c"]  # one each
    pool.release(pool.servers[1])  # b finished its request
    assert pool.pick().url == "b"
    assert [s.outstanding for s in pool.servers] == [1, 1, 1]


def test_a_server_taken_out_is_tried_again_later_and_waits_longer_each_time():
    clock = Clock()
    pool = ServerPool(["a", "b"], clock=clock)
    a, b = pool.servers
    assert pool.take_out(a)
    assert not pool.take_out(a)  # its other requests failing do not count again
    assert {pool.pick().url for _ in range(4)} == {"b"}
    clock.now += pool_mod.RETRY_AFTER_S
    assert a.up(clock.now)  # tried again: one more failure doubles its time out
    assert pool.take_out(a)
    clock.now += pool_mod.RETRY_AFTER_S
    assert not a.up(clock.now)
    clock.now += pool_mod.RETRY_AFTER_S
    assert a.up(clock.now)
    pool.answered(a)
    assert a.failures == 0
    pool.take_out(a)
    pool.take_out(b)
    assert not pool.any_up()
    assert pool.pick() is a  # all out: the one due first


def test_urls_come_as_a_list_or_a_file(tmp_path):
    assert split_urls("h1:8000, http://h2:8000/v1/ h1:8000", normalize_url) == [
        "http://h1:8000/v1", "http://h2:8000/v1"]
    f = tmp_path / "servers.txt"
    f.write_text("# the pool\nhttp://h1:8000\n\nh2:9000/v1  # second\n")
    assert split_urls(str(f), normalize_url) == ["http://h1:8000/v1", "http://h2:9000/v1"]
    assert LLMConfig(url="@" + str(f), cache_dir=None).urls == [
        "http://h1:8000/v1", "http://h2:9000/v1"]
    (tmp_path / "empty.txt").write_text("# none\n")
    with pytest.raises(ConfigError, match=r"empty\.txt: no URL"):
        split_urls(str(tmp_path / "empty.txt"), normalize_url)
    with pytest.raises(ConfigError, match=r"missing\.txt: cannot read"):
        split_urls("@" + str(tmp_path / "missing.txt"), normalize_url)


def test_the_command_line_takes_several_urls():
    from gpurag.cli import build_parser
    from gpurag.llm.cli import config_from_args

    args = build_parser().parse_args(["query", "ix", "q", "--llm-url", "h1:8000",
                                      "--llm-url", "h2:8000,h3:8000"])
    assert config_from_args(args).urls == ["http://h1:8000/v1", "http://h2:8000/v1",
                                           "http://h3:8000/v1"]


def test_a_dead_server_in_the_pool_costs_no_request():
    """Connection refused by one server: each request goes to the other at once."""
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.port == 9:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={
            "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    cfg = LLMConfig(url="http://127.0.0.1:9/v1,http://127.0.0.1:10/v1", model="m",
                    cache_dir=None, max_retries=0, concurrency=4)
    client = LLMClient(cfg, transport=httpx.MockTransport(handler))
    results = client.complete_batch([ChatRequest([{"role": "user", "content": str(i)}])
                                     for i in range(8)])
    assert all(isinstance(r, ChatResult) for r in results)  # max_retries=0: no retry spent
    dead, live = client.pool.servers
    assert (dead.taken_out, live.answered) == (1, 8)


@pytest.fixture
def second_server(tmp_path):
    """A second real llama.cpp server (the first is the session's ``llm_url``)."""
    reason = server_missing()
    if reason or os.environ.get("GPURAG_TEST_LLM") == "0":
        pytest.skip(reason or "real-server LLM tests turned off")
    port = free_port()
    server = ServerProcess(llama_cpp_command(smollm2_gguf(), port=port, n_threads=1, n_ctx=1024),
                           f"http://127.0.0.1:{port}/v1", log=tmp_path / "second.log")
    server.start(timeout_s=180)
    yield server
    server.stop(grace_s=5)


def test_two_real_servers_one_killed_mid_run(llm_url, second_server, tmp_path: Path,
                                             monkeypatch):
    monkeypatch.setattr(pool_mod, "RETRY_AFTER_S", 0.2)
    cache = str(tmp_path / "cache")
    cfg = LLMConfig(url=f"{llm_url},{second_server.url}", cache_dir=cache, max_tokens=4,
                    concurrency=4, timeout_s=120, max_retries=2, backoff_s=0.05)
    client = LLMClient(cfg)
    requests = [ChatRequest([{"role": "user", "content": f"Say {i}."}], tag=f"r{i}")
                for i in range(10)]
    first, second = client.pool.servers
    killed = []

    def on_result(i, result) -> None:
        if not killed and second.answered >= 1 and first.answered + second.answered >= 3:
            second_server.process.kill()  # SIGKILL, requests in flight on it
            killed.append(second.answered)

    results = client.complete_batch(requests, on_result)
    assert killed, "the second server answered nothing before the first finished"
    assert all(isinstance(r, ChatResult) for r in results)
    assert first.answered + second.answered == 10 + 1  # and the /models call naming the model
    assert second.answered == killed[0] and second.taken_out >= 1
    # tried again once its time out is over: still dead, taken out again; A answers
    taken = second.taken_out
    time.sleep(max(0.0, second.down_until - time.monotonic()) + 0.05)
    more = client.complete_batch([ChatRequest([{"role": "user", "content": f"Say {i}!"}])
                                  for i in (10, 11)])  # two at once: one goes to each
    assert all(isinstance(r, ChatResult) for r in more) and second.taken_out == taken + 1
    client.close()
    # the cache is keyed by content, not server: the first server alone answers all from it
    alone = LLMClient(LLMConfig(url=llm_url, cache_dir=cache, max_tokens=4, concurrency=4))
    again = alone.complete_batch(requests)
    assert [r.content for r in again] == [r.content for r in results]
    assert (alone.usage.cache_hits, alone.usage.requests) == (10, 0)
    alone.close()


def test_an_llm_extractor_travels_to_a_cluster_worker_with_its_pool_and_cache(tmp_path):
    """Pickled as the distributed build sends it: the same servers, the same cache."""
    import pickle

    from gpurag.config import IndexConfig
    from gpurag.pipeline.graph_stage import make_stage_extractor

    cfg = LLMConfig(url="h1:8000,h2:8000", cache_dir=str(tmp_path / "c"))
    sent = make_stage_extractor(IndexConfig(extractor="llm"), cfg)
    sent.primary.client.cache.put("k", {"content": "x"})
    got = pickle.loads(pickle.dumps(sent)).primary.client
    assert [s.url for s in got.pool.servers] == ["http://h1:8000/v1", "http://h2:8000/v1"]
    assert got.cache.get("k") == {"content": "x"}
