"""ONNX Runtime's batch session waits without spinning unless OpenMP's policy is ACTIVE."""

from __future__ import annotations

import pytest

from gpurag._openmp import threads_spin
from gpurag.embed.onnx_minilm import SPIN_KEY, OnnxMiniLMEmbedder


def test_threads_spin_only_when_openmp_is_active():
    assert threads_spin({}) is False  # gpurag's default, PASSIVE
    assert threads_spin({"OMP_WAIT_POLICY": "PASSIVE"}) is False
    assert threads_spin({"OMP_WAIT_POLICY": " active "}) is True


@pytest.mark.parametrize(("policy", "entry"), [("PASSIVE", "0"), ("ACTIVE", "1")])
def test_the_batch_session_follows_the_policy(monkeypatch, policy, entry):
    monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    emb = OnnxMiniLMEmbedder()
    assert emb._session.get_session_options().get_session_config_entry(SPIN_KEY) == entry
