"""``POST /v1/answer`` against the session's real local LLM server (``llm_url``, skips without
it)."""

from __future__ import annotations

import httpx
import pytest

from gpurag.llm.client import LLMClient
from gpurag.llm.config import LLMConfig

pytestmark = pytest.mark.llm


def test_answer_retrieves_then_answers_citing_retrieved_passages(holder, start_server, llm_url,
                                                                tmp_path):
    config = LLMConfig(url=llm_url, cache_dir=str(tmp_path / "cache"), max_tokens=24,
                       timeout_s=120, max_retries=1)
    with LLMClient(config) as client:
        live = start_server(holder, insecure_no_auth=True, llm=client)
        r = httpx.post(f"{live.url}/v1/answer", timeout=180,
                       json={"questions": ["Who designed the Corven Lighthouse?",
                                           "Where is Tarnwick?"], "k": 2})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["question"] for x in results] == ["Who designed the Corven Lighthouse?",
                                                 "Where is Tarnwick?"]
    for x in results:
        assert len(x["passages"]) == 2
        assert isinstance(x["answer"], str) or x["error"]
        assert set(x["citations"]) <= {p["doc_id"] for p in x["passages"]}
