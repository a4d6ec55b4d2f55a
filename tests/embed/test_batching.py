"""Host embedding batches are bounded by memory budgets: many short texts share a batch, a few
long ones do, and results do not depend on how texts were batched."""

from __future__ import annotations

import itertools

import numpy as np

from gpurag.backends.embed import load_embedder
from gpurag.embed.tokens import ATTENTION_BUDGET, TOKEN_BUDGET, length_batches


def test_length_batches_cover_everything_within_the_budgets():
    rng = np.random.default_rng(0)
    lengths = np.sort(rng.integers(1, 513, size=3000))
    slices = length_batches(lengths, max_rows=300, attention_budget=50_000, token_budget=2_000)
    assert slices[0][0] == 0 and slices[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(slices))  # contiguous
    for start, stop in slices:
        rows, longest = stop - start, int(lengths[stop - 1])
        assert 1 <= rows <= 300
        assert rows == 1 or (rows * longest**2 <= 50_000 and rows * longest <= 2_000)
        if stop < len(lengths):  # greedy: one more row would break a budget or the cap
            nxt = int(lengths[stop])
            assert (rows + 1 > 300 or (rows + 1) * nxt**2 > 50_000
                    or (rows + 1) * nxt > 2_000)


def test_long_runs_of_one_length_get_unpadded_batches():
    """A batch of 64 questions was padded to its one long outlier (3x the work): runs of
    ``min_run`` equal lengths now get batches of their own."""
    lengths = np.sort(np.r_[np.full(20, 21), np.full(9, 24), [22, 23, 25, 26, 69]])
    slices = length_batches(lengths, max_rows=64, min_run=8)
    assert slices[0][0] == 0 and slices[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(slices))
    widths = [set(lengths[a:b].tolist()) for a, b in slices]
    assert {21} in widths and {24} in widths  # the runs stand apart, unpadded
    assert not any(69 in w and len(w) > 1 and 22 in w for w in widths)
    for a, b in slices:  # the texts between runs still share batches within the budgets
        assert b - a <= 64
    assert length_batches(lengths, max_rows=64) == [(0, len(lengths))]  # off: one batch
    assert length_batches(lengths, max_rows=8, min_run=8) == [  # a run cut by the row cap
        (0, 8), (8, 16), (16, 20), (20, 22), (22, 30), (30, 31), (31, 34)]


def test_onnx_batches_stay_within_the_memory_budgets():
    embedder = load_embedder("onnx-minilm")
    long_text = " ".join(f"word{i} alpha beta" for i in range(300))  # truncated at 512 tokens
    texts = [long_text] * 6 + [f"name {i}" for i in range(700)] + ["a medium sentence " * 20] * 30
    shapes: list[tuple[int, int]] = []
    session = embedder._session
    run = session.run

    class Spy:
        def run(self, names, feeds):
            shapes.append(feeds["input_ids"].shape)
            return run(names, feeds)

    embedder._session = Spy()
    try:
        got = embedder.encode(texts, batch_size=512)
    finally:
        embedder._session = session
    assert sum(r for r, _ in shapes) == len(texts)
    for rows, width in shapes:
        assert rows == 1 or (rows * width**2 <= ATTENTION_BUDGET and rows * width <= TOKEN_BUDGET)
    assert max(r for r, _ in shapes) > 64  # short names share large batches
    assert max(r for r, w in shapes if w >= 512) < 6  # long texts do not
    # Bitwise: a text's vector does not depend on its batch's size, padding or session.
    one_by_one = np.vstack([embedder.encode([t]) for t in texts[::50]])
    np.testing.assert_array_equal(got[::50], one_by_one)


def test_model_inputs_tokenize_a_block_at_a_time_with_the_same_ids(monkeypatch):
    """Each Encoding holds tokens, offsets and masks: tokenizing 35k facts at once held ~200 MB
    at the build's peak, so ``model_inputs`` keeps one block of them alive at a time."""
    import gpurag.embed.tokens as tokens_mod

    embedder = load_embedder("onnx-minilm")
    texts = [f"name {i} " + "word " * (i % 7) for i in range(23)] + ["", "a" * 3000]
    whole = embedder.tokenizer.encode_batch(texts, add_special_tokens=True)
    sizes: list[int] = []
    real = embedder.tokenizer

    class Spy:
        def encode_batch(self, batch, add_special_tokens):
            sizes.append(len(batch))
            return real.encode_batch(batch, add_special_tokens=add_special_tokens)

    monkeypatch.setattr(tokens_mod, "TOKENIZE_BLOCK", 5)
    monkeypatch.setattr(embedder, "tokenizer", Spy())
    flat, lengths = embedder.model_inputs(texts)
    assert max(sizes) <= 5 and sum(sizes) == len(texts)
    np.testing.assert_array_equal(lengths, [len(e.ids) for e in whole])
    np.testing.assert_array_equal(flat, np.concatenate([e.ids for e in whole]))
    assert flat.dtype == lengths.dtype == np.int64
