"""Plumbing against a real OpenAI-compatible server (llama-cpp-python + SmolLM2-135M).

The model is tiny and answers poorly: these tests check schema-constrained JSON, concurrency,
caching, resume after a kill and partial failures, never the quality of the answers.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpurag.cli import main as gpurag_main
from gpurag.llm.cache import ResponseCache
from gpurag.llm.client import ChatRequest, LLMClient, LLMError

pytestmark = pytest.mark.llm

COLORS = {"type": "object",
          "properties": {"color": {"type": "string", "enum": ["red", "green", "blue"]},
                         "bright": {"type": "boolean"}},
          "required": ["color", "bright"]}


def small(i: int, max_tokens: int = 4) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": f"Count to {i}."}], max_tokens=max_tokens,
                       tag=f"small-{i}")


def test_schema_constrained_json(llm_config):
    with LLMClient(llm_config) as client:
        result = client.complete(ChatRequest(
            [{"role": "user", "content": "What color is the sky? Answer in JSON."}],
            schema=COLORS, max_tokens=40))
    value = json.loads(result.content)  # strict: grammar-constrained output needs no repair
    assert value["color"] in {"red", "green", "blue"} and isinstance(value["bright"], bool)
    assert set(value) == {"color", "bright"}
    assert client.structured_mode == "json_object"  # llama.cpp's form, detected automatically
    assert result.prompt_tokens > 0 and result.completion_tokens > 0


def test_concurrency_then_every_answer_from_cache(llm_config):
    requests = [small(i) for i in range(8)]
    with LLMClient(llm_config) as client:
        first = client.complete_batch(requests)
        assert not any(isinstance(r, LLMError) for r in first)
        assert client.usage.peak_in_flight == 8
        assert client.usage.requests == 8 and client.usage.cache_hits == 0
    with LLMClient(llm_config) as again:
        second = again.complete_batch(requests)
        assert again.usage.requests == 0 and again.usage.cache_hits == 8
        assert again.usage.saved_completion_tokens == sum(r.completion_tokens for r in first)
    assert [r.content for r in second] == [r.content for r in first]
    assert all(r.cached for r in second)


def test_resume_after_kill_repeats_no_finished_call(llm_config):
    """A batch killed with SIGKILL part-way resumes: finished calls come from the cache."""
    script = textwrap.dedent(f"""
        from gpurag.llm.client import ChatRequest, LLMClient
        from gpurag.llm.config import LLMConfig
        cfg = LLMConfig(url={llm_config.url!r}, cache_dir={llm_config.cache_dir!r},
                        max_tokens=16, concurrency=1)
        reqs = [ChatRequest([{{"role": "user", "content": f"Name a fruit, {{i}}."}}])
                for i in range(8)]
        print("ready", flush=True)
        LLMClient(cfg).complete_batch(reqs)
        print("finished", flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout.readline().strip() == "ready"
    cache = ResponseCache(llm_config.cache_dir)
    deadline = time.monotonic() + 300  # the tiny server is slow on a loaded 2-core machine
    while len(cache) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    exited_early = proc.poll()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    done = len(cache)
    cache.close()
    assert exited_early is None or done == 8, f"batch process exited early ({exited_early})"
    assert 2 <= done < 8, f"kill landed too late or too early to test resume ({done} done)"
    reqs = [ChatRequest([{"role": "user", "content": f"Name a fruit, {i}."}]) for i in range(8)]
    with LLMClient(llm_config.replace(max_tokens=16)) as client:
        results = client.complete_batch(reqs)
    assert not any(isinstance(r, LLMError) for r in results)
    assert client.usage.cache_hits == done
    assert client.usage.requests == 8 - done
    assert [r.cached for r in results].count(True) == done


def test_partial_failures_in_a_real_batch(llm_config):
    """The server rejects one malformed request; the rest of the batch is answered."""
    bad = ChatRequest([{"role": "nobody", "content": "?"}], tag="bad-one")
    with LLMClient(llm_config.replace(max_retries=1)) as client:
        results = client.complete_batch([small(1), bad, small(2)])
    assert not isinstance(results[0], LLMError) and not isinstance(results[2], LLMError)
    assert isinstance(results[1], LLMError) and results[1].tag == "bad-one"
    assert results[1].status is not None and results[1].status >= 400
    assert client.usage.requests == 2 and client.usage.errors == 1


def test_cli_check(llm_url, capsys):
    assert gpurag_main(["llm", "check", "--llm-url", llm_url]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["models"] and report["model"] == report["models"][0]
    assert json.loads(report["answer"]) in ({"ok": True}, {"ok": False})
