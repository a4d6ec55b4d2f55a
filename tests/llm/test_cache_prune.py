"""`gpurag llm cache info|prune`: the response cache can be inspected and trimmed by age."""

from __future__ import annotations

import time

from gpurag.cli import main as gpurag_main
from gpurag.llm.cache import ResponseCache


def test_prune_removes_only_answers_written_before_the_cutoff(tmp_path):
    with ResponseCache(tmp_path) as cache:
        for i in range(300):  # ~6 MB: past SQLite's automatic WAL checkpoint, into the file
            cache.put(f"old{i}", {"answer": str(i) * 20_000})
        cache.put("old", {"answer": "x" * 50_000})
        time.sleep(0.02)
        cutoff = time.time()
        time.sleep(0.02)
        cache.put("new", {"answer": "y"})
        before = cache.stats()
        assert before["entries"] == 302 and before["oldest"] < cutoff < before["newest"]
        assert cache.path.stat().st_size > 4 * 2**20
        assert cache.prune(cutoff) == 301
        assert "old" not in cache and cache.get("new") == {"answer": "y"}
        after = cache.stats()
        assert after["entries"] == 1
        # the space is given back while the cache is open, not on close
        assert after["bytes"] < 2**20 and cache.path.stat().st_size < 2**20
        assert cache.prune(cutoff) == 0


def test_cli_info_and_prune(tmp_path, capsys):
    with ResponseCache(tmp_path) as cache:
        for i in range(3):
            cache.put(f"k{i}", {"i": i})
    assert gpurag_main(["llm", "cache", "info", "--cache-dir", str(tmp_path)]) == 0
    assert "3 answers" in capsys.readouterr().out
    assert gpurag_main(["llm", "cache", "prune", "--cache-dir", str(tmp_path)]) == 2
    assert "--older-than" in capsys.readouterr().err
    assert gpurag_main(["llm", "cache", "prune", "--older-than", "1",
                        "--cache-dir", str(tmp_path)]) == 0  # nothing a day old
    assert "removed 0 answers" in capsys.readouterr().out
    assert gpurag_main(["llm", "cache", "prune", "--older-than", "0",
                        "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "removed 3 answers" in out and "0 answers" in out
    with ResponseCache(tmp_path) as cache:
        assert len(cache) == 0
    empty = tmp_path / "none"
    assert gpurag_main(["llm", "cache", "info", "--cache-dir", str(empty)]) == 0
    assert "no LLM response cache" in capsys.readouterr().out and not empty.exists()
