"""The LLM extractor passes the extractor contract against the real local server."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from gpurag.contracts import check_extractor
from gpurag.extract.llm import LLMExtractor

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample" / "corpus.jsonl"


def test_llm_extractor_contract(llm_config):
    recs = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()
            if line.strip()][:3]
    chunks = pd.DataFrame({"chunk_id": [r["id"] for r in recs],
                           "title": [r.get("title", "") for r in recs],
                           "text": [r["text"] for r in recs]})
    check_extractor(lambda: LLMExtractor(llm_config, progress=False), chunks)
