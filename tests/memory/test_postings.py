"""Postings: ``merged`` gives every entry as one run (pending ones too), which ``set_run``
takes back unchanged (what the snapshot of the scale index saves and reads)."""

from __future__ import annotations

import numpy as np

from gpurag.memory.postings import Postings


def _filled(seed: int = 0) -> tuple[Postings, list[tuple[int, int, float]]]:
    rng = np.random.default_rng(seed)
    post = Postings(seal=5)  # several runs, merges and a pending tail
    entries = []
    row = 0
    for _ in range(41):
        m = int(rng.integers(1, 5))
        keys = rng.integers(0, 7, m)
        vals = rng.random(m).astype(np.float32)
        post.add(keys, np.full(m, row), vals)
        entries += [(int(k), row, float(v)) for k, v in zip(keys, vals, strict=True)]
        row += int(rng.integers(0, 3))
    return post, entries


def test_merged_holds_every_entry_sorted_by_key_with_rows_in_order():
    post, entries = _filled()
    assert post._pending  # (some entries are not sealed yet: merged includes them)
    keys, rows, vals = post.merged()
    truth = sorted(entries, key=lambda e: e[0])  # stable: rows stay in arrival order
    assert keys.tolist() == [k for k, _, _ in truth]
    assert rows.tolist() == [r for _, r, _ in truth]
    assert np.array_equal(vals, np.asarray([v for _, _, v in truth], np.float32))


def test_a_run_set_from_merged_answers_every_lookup_the_same():
    post, _ = _filled(1)
    again = Postings()
    again.set_run(*post.merged())
    ask = np.arange(9)
    for got, want in zip(again.get(ask), post.get(ask), strict=True):
        assert np.array_equal(got, want)
    assert again.count(ask).tolist() == post.count(ask).tolist()
    assert again.size == post.size


def test_merged_of_empty_postings_is_empty():
    keys, rows, vals = Postings().merged()
    assert len(keys) == len(rows) == len(vals) == 0
