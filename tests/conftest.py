"""Fixtures every test shares."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No progress bars, and no stray user settings leaking into the tests."""
    monkeypatch.setenv("GPURAG_PROGRESS", "0")
    for name in list(os.environ):
        if name.startswith(("GPURAG_INDEX_", "GPURAG_QUERY_")) or name in (
                "GPURAG_CONFIG", "GPURAG_THREADS"):
            monkeypatch.delenv(name)
