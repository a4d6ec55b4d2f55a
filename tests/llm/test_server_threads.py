"""The local test server's default thread count (tests/llm/conftest.py): two where the process
may use two or more cores, one beside other pytest-xdist workers, also where the OS has no
``sched_getaffinity`` (macOS, Windows)."""

from __future__ import annotations

import os

from tests.llm.conftest import default_server_threads


def test_two_threads_on_two_allowed_cores_and_one_beside_xdist_workers(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert default_server_threads() == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert default_server_threads() == 1
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert default_server_threads() == 1


def test_without_sched_getaffinity_the_cpu_count_decides(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # as on macOS
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert default_server_threads() == 2
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert default_server_threads() == 1
