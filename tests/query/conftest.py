"""The sample questions as strings (the graph index is the session's, in ``tests/conftest.py``)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SAMPLE


@pytest.fixture(scope="session")
def questions() -> list[str]:
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["question"] for line in lines if line.strip()]
