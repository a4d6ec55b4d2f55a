"""A graph index of the bundled sample corpus, built once per test session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample"


@pytest.fixture(scope="session")
def sample_questions() -> list[dict]:
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture(scope="session")
def graph_index(tmp_path_factory):
    from gpurag import Index

    out = tmp_path_factory.mktemp("graph") / "sample.index"
    return Index.build(SAMPLE / "corpus.jsonl", out, show_progress=False)
