"""The micro-batcher on its own: grouping, one call per group, error isolation, the queue bound.

Requests are submitted in one step of the event loop, so what lands in one batch is
deterministic. The index is the real sample index; a thin wrapper records (and, for fault
injection, fails) ``query_batch`` calls.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from gpurag.errors import ConfigError
from gpurag.serve.batcher import MicroBatcher, OverloadedError
from gpurag.serve.metrics import Metrics
from tests.serve.conftest import comparable


class Recording:
    """The real index; records each ``query_batch`` call and fails batches holding a poison
    question (fault injection)."""

    def __init__(self, index, poison: str | None = None) -> None:
        self.index = index
        self.poison = poison
        self.calls: list[tuple[list[str], int, str | None]] = []

    def query_batch(self, questions, k=5, mode=None, **options):
        self.calls.append((list(questions), k, mode))
        if self.poison is not None and self.poison in questions:
            raise RuntimeError("poisoned question")
        return self.index.query_batch(questions, k=k, mode=mode, **options)


def run_batch(index, submissions, **kwargs):
    """Submit every (questions, k, mode, options) in one loop step; gather the outcomes."""

    async def main():
        served = SimpleNamespace(index=index, version="v1")
        batcher = MicroBatcher(lambda: served, Metrics(), **kwargs)
        batcher.start()
        try:
            futures = [batcher.submit(*s) for s in submissions]
            return await asyncio.gather(*futures, return_exceptions=True)
        finally:
            await batcher.stop()

    return asyncio.run(main())


QUESTIONS = ["Who designed the Corven Lighthouse?", "Where is Tarnwick?",
             "When was the lighthouse automated?", "Who was Anselm Greyhaven?",
             "What did Henning Ask build?"]


def test_same_settings_share_one_call_and_each_caller_gets_its_own(holder):
    index = holder.current.index
    rec = Recording(index)
    subs = [([q], 3, None, {}) for q in QUESTIONS] + [(QUESTIONS[:2], 2, "dense", {})]
    outcomes = run_batch(rec, subs, window_s=0.05)
    assert sorted(len(c[0]) for c in rec.calls) == [2, 5]  # two groups, two calls
    for (questions, k, mode, _), (version, results, _) in zip(subs, outcomes, strict=True):
        assert version == "v1"
        direct = index.query_batch(questions, k=k, mode=mode)
        assert [comparable(r.to_dict()) for r in results] == \
            [comparable(r.to_dict()) for r in direct]


def test_a_failing_request_does_not_fail_its_batch(holder):
    rec = Recording(holder.current.index, poison="POISON")
    subs = [([q], 3, None, {}) for q in QUESTIONS[:3]] + [(["POISON"], 3, None, {})]
    outcomes = run_batch(rec, subs, window_s=0.05)
    assert isinstance(outcomes[3], RuntimeError)
    for q, outcome in zip(QUESTIONS[:3], outcomes[:3], strict=True):
        assert not isinstance(outcome, BaseException)
        assert outcome[1][0].question == q
    # the shared call failed, then each request ran alone
    assert [len(c[0]) for c in rec.calls] == [4, 1, 1, 1, 1]


def test_engine_errors_reach_only_their_request(holder):
    rec = Recording(holder.current.index)
    subs = [([QUESTIONS[0]], 3, None, {}), ([QUESTIONS[1]], 3, "bogus", {}),
            ([QUESTIONS[2]], 3, None, {"damping": "x"})]
    outcomes = run_batch(rec, subs, window_s=0.05)
    assert outcomes[0][1][0].question == QUESTIONS[0]
    assert isinstance(outcomes[1], ConfigError) and "bogus" in str(outcomes[1])
    assert isinstance(outcomes[2], ConfigError) and "damping" in str(outcomes[2])


def test_batching_off_is_one_call_per_request(holder):
    rec = Recording(holder.current.index)
    outcomes = run_batch(rec, [([q], 3, None, {}) for q in QUESTIONS], batching=False)
    assert len(rec.calls) == len(QUESTIONS)
    assert [o[1][0].question for o in outcomes] == QUESTIONS


def test_max_batch_splits_batches(holder):
    rec = Recording(holder.current.index)
    run_batch(rec, [([q], 3, None, {}) for q in QUESTIONS], window_s=0.05, max_batch=2)
    assert [len(c[0]) for c in rec.calls] == [2, 2, 1]


def test_full_queue_refuses_instead_of_growing(holder):
    async def main():
        served = SimpleNamespace(index=holder.current.index, version="v1")
        metrics = Metrics()
        batcher = MicroBatcher(lambda: served, metrics, window_s=0.05, max_queue=3)
        batcher.start()
        try:
            first = batcher.submit(QUESTIONS[:2], 3, None, {})
            assert metrics.queue_depth == 2
            with pytest.raises(OverloadedError):
                batcher.submit(QUESTIONS[2:4], 3, None, {})
            assert metrics.shed == 1
            third = batcher.submit(QUESTIONS[4:5], 3, None, {})  # still fits
            await asyncio.gather(first, third)
            assert metrics.queue_depth == 0
        finally:
            await batcher.stop()

    asyncio.run(main())


def test_a_request_given_up_is_skipped(holder):
    rec = Recording(holder.current.index)

    async def main():
        served = SimpleNamespace(index=rec, version="v1")
        batcher = MicroBatcher(lambda: served, Metrics(), window_s=0.05)
        batcher.start()
        try:
            kept = batcher.submit([QUESTIONS[0]], 3, None, {})
            dropped = batcher.submit([QUESTIONS[1]], 3, None, {})
            dropped.cancel()  # as a timed-out handler does
            await kept
        finally:
            await batcher.stop()

    asyncio.run(main())
    assert rec.calls and rec.calls[0][0] == [QUESTIONS[0]]


def test_deferred_fields_are_filled_on_the_worker_thread(holder):
    """Confidence and evidence chains are computed once per batch on the worker thread: the
    event loop's response only reads values (it once ran the batch's chains itself)."""
    from gpurag.query.deferred import Pending

    index = holder.current.index
    outcomes = run_batch(index, [([q], 5, "graph", {}) for q in QUESTIONS[:3]])
    results = [r for _, rs, _ in outcomes for r in rs]
    assert len(results) == 3
    for r in results:
        assert not any(isinstance(v, Pending) for v in vars(r).values())
    assert any(r.chains for r in results) and all(r.confidence is not None for r in results)


def test_a_reload_between_settings_groups_does_not_split_one_batch():
    """A batch of two settings groups reads the served index once: a reload that lands while
    its first group runs (here: swapped in by that group's own query) is seen by the next
    batch, not by the batch's second group."""

    class Swapping:
        def __init__(self, name: str) -> None:
            self.name = name

        def query_batch(self, questions, k=5, mode=None, **options):
            holder["current"] = new  # a hot reload lands while this group runs
            return [SimpleNamespace(resolve_deferred=lambda: None) for _ in questions]

    old = SimpleNamespace(index=Swapping("old"), version="v1")
    new = SimpleNamespace(index=Swapping("new"), version="v2")
    holder = {"current": old}

    async def main():
        batcher = MicroBatcher(lambda: holder["current"], Metrics(), window_s=0.05)
        batcher.start()
        try:
            futures = [batcher.submit(["a"], 3, None, {}), batcher.submit(["b"], 2, None, {})]
            return await asyncio.gather(*futures)
        finally:
            await batcher.stop()

    outcomes = asyncio.run(main())
    assert [o[0] for o in outcomes] == ["v1", "v1"]  # one batch, one index version
    assert [o[2].name for o in outcomes] == ["old", "old"]
