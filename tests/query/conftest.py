"""A graph index of the bundled sample corpus and its questions, built once per session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"


@pytest.fixture(scope="session")
def questions() -> list[str]:
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["question"] for line in lines if line.strip()]


@pytest.fixture(scope="session")
def graph_index(tmp_path_factory):
    from gpurag import Index

    out = tmp_path_factory.mktemp("graph") / "sample.index"
    return Index.build(SAMPLE / "corpus.jsonl", out, show_progress=False)
