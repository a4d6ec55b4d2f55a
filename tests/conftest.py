"""Fixtures every test shares."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No progress bars, and no stray user settings leaking into the tests."""
    monkeypatch.setenv("GPURAG_PROGRESS", "0")
    # The default embedding cache beside each index is off in tests (a test's own
    # GPURAG_EMBED_CACHE, or its removal, turns it on): folder listings stay exact.
    monkeypatch.setenv("GPURAG_EMBED_CACHE", "off")
    for name in list(os.environ):
        if name.startswith(("GPURAG_INDEX_", "GPURAG_QUERY_")) or name in (
                "GPURAG_CONFIG", "GPURAG_THREADS"):
            monkeypatch.delenv(name)
