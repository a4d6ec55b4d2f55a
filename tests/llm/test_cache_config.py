import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from gpurag.errors import ConfigError
from gpurag.llm.cache import ResponseCache, cache_key
from gpurag.llm.config import LLMConfig, normalize_url

MSGS = [{"role": "user", "content": "hi"}]


def test_cache_key_depends_on_everything_that_shapes_the_answer():
    base = cache_key("m", MSGS, {"temperature": 0, "max_tokens": 8})
    assert base == cache_key("m", [dict(MSGS[0])], {"max_tokens": 8, "temperature": 0})
    assert base != cache_key("m2", MSGS, {"temperature": 0, "max_tokens": 8})
    assert base != cache_key("m", [{"role": "user", "content": "hi!"}],
                             {"temperature": 0, "max_tokens": 8})
    assert base != cache_key("m", MSGS, {"temperature": 0, "max_tokens": 9})
    assert base != cache_key("m", MSGS, {"temperature": 0, "max_tokens": 8, "schema": {}})


def test_cache_round_trip_and_persistence(tmp_path):
    with ResponseCache(tmp_path) as cache:
        assert cache.get("k") is None
        cache.put("k", {"content": "é", "usage": {"prompt_tokens": 1}})
        cache.put("k2", {"content": "b"})
        assert "k" in cache and len(cache) == 2
        assert cache.get_many(["k", "missing", "k2"]) == {
            "k": {"content": "é", "usage": {"prompt_tokens": 1}}, "k2": {"content": "b"}}
    with ResponseCache(tmp_path) as cache:
        assert cache.get("k")["content"] == "é"
        cache.clear()
        assert len(cache) == 0


def test_cache_survives_kill_mid_write(tmp_path):
    """A writer SIGKILLed mid-stream leaves a sound database with every committed entry."""
    script = textwrap.dedent(f"""
        import sys
        from gpurag.llm.cache import ResponseCache
        cache = ResponseCache({str(tmp_path)!r})
        i = 0
        while True:
            cache.put(f"key{{i}}", {{"content": "x" * 2000, "i": i}})
            if i == 50:
                print("ready", flush=True)
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    with ResponseCache(tmp_path) as cache:
        n = len(cache)
        assert n > 50
        for i in range(n):
            assert cache.get(f"key{i}") == {"content": "x" * 2000, "i": i}
    conn = sqlite3.connect(tmp_path / "responses.sqlite")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_config_from_env_and_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv("GPURAG_LLM_URL", "localhost:9000")
    monkeypatch.setenv("GPURAG_LLM_CONCURRENCY", "64")
    monkeypatch.setenv("GPURAG_LLM_TIMEOUT_S", "2.5")
    monkeypatch.setenv("GPURAG_LLM_SEED", "none")
    monkeypatch.setenv("GPURAG_LLM_CACHE_DIR", "off")
    monkeypatch.setenv("GPURAG_LLM_EXTRA_BODY", '{"top_k": 20}')
    monkeypatch.setenv("MY_KEY", "secret")
    cfg = LLMConfig.from_env(model="qwen", api_key_env="MY_KEY", max_tokens=None)
    assert cfg.url == "http://localhost:9000/v1"
    assert (cfg.concurrency, cfg.timeout_s, cfg.seed, cfg.cache_dir) == (64, 2.5, None, None)
    assert cfg.extra_body == {"top_k": 20} and cfg.model == "qwen" and cfg.max_tokens == 1024
    assert cfg.api_key == "secret" and LLMConfig.configured()
    assert cfg.fingerprint() != cfg.replace(model="other").fingerprint()
    monkeypatch.setenv("GPURAG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GPURAG_LLM_CACHE_DIR")
    assert LLMConfig.from_env().cache_dir == str(tmp_path / "llm")


def test_config_validates():
    assert normalize_url("http://h:1/v1/") == "http://h:1/v1"
    with pytest.raises(ValueError):
        LLMConfig(structured="xml")
    with pytest.raises(ValueError):
        LLMConfig(concurrency=0)
    for rate in (-0.1, 1.5, float("nan")):
        with pytest.raises(ConfigError, match="max_failure_rate"):
            LLMConfig(max_failure_rate=rate)


def test_bad_llm_settings_are_clear_errors_not_tracebacks(monkeypatch, capsys):
    from gpurag.cli import main

    monkeypatch.setenv("GPURAG_LLM_MAX_FAILURE_RATE", "abc")
    with pytest.raises(ConfigError, match="GPURAG_LLM_MAX_FAILURE_RATE='abc'"):
        LLMConfig.from_env()
    monkeypatch.setenv("GPURAG_LLM_MAX_FAILURE_RATE", "0.1")
    assert LLMConfig.from_env().max_failure_rate == 0.1
    assert main(["llm", "check", "--llm-url", "http://127.0.0.1:9", "--llm-max-failure-rate",
                 "2"]) == 2
    assert "max_failure_rate must be within [0, 1]" in capsys.readouterr().err



def test_many_processes_open_one_cache_at_once_while_another_writes(tmp_path):
    """Opening the cache from many processes at the same instant, while one writes and others
    close, never reports 'database is locked' (the race that made resume tests flaky)."""
    n_procs, opens_each = 10, 15
    start_at = time.time() + 2.0
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from gpurag.llm.cache import ResponseCache
        cache = ResponseCache({str(tmp_path)!r})
        i = 0
        while time.time() < {start_at + 8.0!r}:
            cache.put(f"w{{i}}", {{"i": i}})
            i += 1
        cache.close()
    """)], stderr=subprocess.PIPE, text=True)
    script = textwrap.dedent(f"""
        import sys, time
        from gpurag.llm.cache import ResponseCache
        while time.time() < {start_at!r}:
            time.sleep(0.0005)
        for j in range({opens_each}):
            with ResponseCache({str(tmp_path)!r}) as cache:
                cache.put(f"p{{sys.argv[1]}}-{{j}}", {{"j": j}})
                len(cache)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(i)],
                              stderr=subprocess.PIPE, text=True) for i in range(n_procs)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in [*procs, writer]]
    failed = [err for rc, err in results if rc != 0]
    assert not failed, failed[0][-600:]
    with ResponseCache(tmp_path) as cache:
        keys = cache.get_many(f"p{i}-{j}" for i in range(n_procs) for j in range(opens_each))
        assert len(keys) == n_procs * opens_each


def test_open_waits_for_a_connection_that_holds_a_lock(tmp_path):
    """A fresh cache opened while another connection holds a write lock waits for it instead of
    failing at once with 'database is locked' (switching to WAL ignores the busy timeout)."""
    script = textwrap.dedent(f"""
        import sqlite3, time
        conn = sqlite3.connect({str(tmp_path / "responses.sqlite")!r}, isolation_level=None)
        conn.execute("CREATE TABLE other (x)")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO other VALUES (1)")
        print("locked", flush=True)
        time.sleep(1.0)
        conn.execute("COMMIT")
    """)
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    with ResponseCache(tmp_path) as cache:
        cache.put("k", {"v": 1})
        assert cache.get("k") == {"v": 1}
        mode = cache._conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    assert holder.wait(timeout=30) == 0
