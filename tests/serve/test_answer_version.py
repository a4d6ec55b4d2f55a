"""``/v1/answer`` answers on the index that ranked, even when a reload lands in between
(review Q, bug 2). No LLM: the answer steps are recorded, not run."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

import gpurag.query.generate as generate
from gpurag.serve import batcher as batcher_mod
from gpurag.serve.holder import IndexHolder, open_warm


@pytest.mark.parametrize("mode", ["graph", "global"])
def test_answer_uses_the_ranking_index_across_a_reload(graph_index_path, start_server,
                                                       monkeypatch, mode):
    holder = IndexHolder(graph_index_path)  # private: the test swaps its current version
    ranked, other = holder.current, open_warm(holder.path, holder.runtime)
    other = dataclasses.replace(other, version=other.version + "-reloaded")
    answered_on: list = []

    def fake_global(index, questions, client, level=0, results=None, **kw):
        answered_on.append(index)
        return results

    monkeypatch.setattr(generate, "global_answers", fake_global)
    monkeypatch.setattr(generate, "answer_results",
                        lambda index, results, client: answered_on.append(index))
    execute = batcher_mod.MicroBatcher._execute

    def execute_then_reload(self, served, settings, jobs):
        out = execute(self, served, settings, jobs)
        holder.current = other  # a reload (admin thread) completing right after this batch
        return out

    monkeypatch.setattr(batcher_mod.MicroBatcher, "_execute", execute_then_reload)
    try:
        live = start_server(holder, insecure_no_auth=True, llm=object())
        r = httpx.post(f"{live.url}/v1/answer", timeout=120,
                       json={"question": "Who designed the Corven Lighthouse?", "mode": mode})
        assert r.status_code == 200, r.text
        assert r.json()["index_version"] == ranked.version
        assert holder.current is other  # the reload did land before the answer step
        assert len(answered_on) == 1 and answered_on[0] is ranked.index
    finally:
        ranked.index.close()
        other.index.close()
