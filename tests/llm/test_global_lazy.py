"""Lazy global search against the real tiny server: LLM calls only for the communities the
extractive ranking puts first (as LazyGraphRAG does), never one report per community."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from gpurag.cli import main as gpurag_main
from gpurag.llm.client import LLMClient

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"
THEMES = "What are the main themes of this corpus?"


@pytest.fixture(scope="module")
def sample_index(graph_index):
    return graph_index  # the sample corpus with its graph, built once (tests/conftest.py)


def test_lazy_global_calls_only_the_top_communities(sample_index, llm_config):
    from gpurag.query.generate import global_answers

    n_communities = sample_index.dir.table("tables/communities.parquet")["community"].nunique()
    client = LLMClient(llm_config.replace(max_tokens=24))
    [result] = global_answers(sample_index, [THEMES], client, level=0, communities=2,
                              report_max_tokens=24, answer_max_tokens=24)
    assert result.error is None, result.error
    assert isinstance(result.answer, str) and result.answer.strip()
    # the extractive ranking is kept, and only its two communities got a report
    extractive = sample_index.query(THEMES, mode="global", communities=2)
    assert [h.community for h in result.communities] == \
        [h.community for h in extractive.communities]
    assert all(h.report for h in result.communities)
    # two reports, the map calls over them (one group fits both) and one reduce
    calls = client.usage.requests
    assert 3 <= calls <= 2 + 2 + 1 < n_communities
    # a second run is served from the cache: the reports are not written again
    again = LLMClient(llm_config.replace(max_tokens=24))
    global_answers(sample_index, [THEMES], again, level=0, communities=2,
                   report_max_tokens=24, answer_max_tokens=24)
    assert again.usage.requests == 0 and again.usage.cache_hits == calls


def test_cli_global_with_server_is_lazy(sample_index, llm_url, tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = gpurag_main(["-q", "query", str(sample_index.path), THEMES, "--mode", "global",
                          "--communities", "1", "--json", "--llm-url", llm_url,
                          "--llm-cache-dir", str(tmp_path / "cache"), "--llm-max-tokens", "24"])
    assert rc == 0
    [result] = json.loads(out.getvalue())
    assert result["answer"] and result["error"] is None
    assert len(result["communities"]) == 1 and result["communities"][0]["report"]
