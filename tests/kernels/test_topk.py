"""Dense and segmented top-k against their NumPy references."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpurag.kernels.topk import (  # noqa: E402
    segmented_topk,
    segmented_topk_reference,
    topk_dense,
    topk_dense_reference,
)
from tests.kernels import device_params  # noqa: E402

DEVICES = device_params()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 7, 50, 300])
def test_dense_matches_reference(device, largest, k):
    rng = np.random.default_rng(1000 * k + int(largest))
    rows = int(rng.integers(1, 20))
    # distinct values (a random permutation, scaled): float32 normals can tie, rarely
    scores = (rng.permutation(rows * 200).reshape(rows, 200) / 7.0 - 1000.0).astype(np.float32)
    v, i = topk_dense(torch.as_tensor(scores, device=device), k, largest)
    rv, ri = topk_dense_reference(scores, k, largest)
    assert v.shape == i.shape == (scores.shape[0], k)
    np.testing.assert_array_equal(i.cpu().numpy(), ri)  # distinct values: no ties
    np.testing.assert_array_equal(v.cpu().numpy(), rv)


def random_segments(rng: np.random.Generator, skewed: bool) -> tuple[np.ndarray, np.ndarray]:
    s = int(rng.integers(1, 40))
    if skewed:  # one huge segment, many tiny or empty ones: the sort strategy's case
        lengths = rng.integers(0, 4, s)
        lengths[rng.integers(0, s)] = 3000
    else:
        lengths = rng.integers(0, 60, s)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = (rng.permutation(int(offsets[-1])) / 7.0 - 500.0).astype(np.float32)  # no ties
    return values, offsets


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strategy", ["auto", "pad", "sort"])
@pytest.mark.parametrize("skewed", [False, True])
@pytest.mark.parametrize("largest", [True, False])
def test_segmented_matches_reference(device, strategy, skewed, largest):
    rng = np.random.default_rng(0)
    values, offsets = random_segments(rng, skewed)
    for k in (1, 5, 64):
        v, i = segmented_topk(
            torch.as_tensor(values, device=device), torch.as_tensor(offsets, device=device),
            k, largest, strategy,
        )
        rv, ri = segmented_topk_reference(values, offsets, k, largest)
        np.testing.assert_array_equal(i.cpu().numpy(), ri)
        np.testing.assert_array_equal(v.cpu().numpy(), rv)


@pytest.mark.parametrize("device", DEVICES)
def test_segmented_padding_and_empty_cases(device):
    values = torch.tensor([3.0, 1.0, 2.0, 5.0], device=device)
    offsets = torch.tensor([0, 3, 3, 4], device=device)
    v, i = segmented_topk(values, offsets, 2)
    assert i.cpu().tolist() == [[0, 2], [-1, -1], [3, -1]]
    assert v.cpu().tolist() == [[3.0, 2.0], [float("-inf")] * 2, [5.0, float("-inf")]]
    v, i = segmented_topk(values, offsets, 0)
    assert v.shape == i.shape == (3, 0)
    v, i = segmented_topk(values[:0], torch.tensor([0, 0], device=device), 3)
    assert i.cpu().tolist() == [[-1, -1, -1]]


def test_sort_strategy_breaks_ties_by_position():
    values = torch.tensor([1.0, 2.0, 2.0, 1.0, 2.0, 0.0])
    offsets = torch.tensor([0, 3, 6])
    _, i = segmented_topk(values, offsets, 3, strategy="sort")
    assert i.tolist() == [[1, 2, 0], [4, 3, 5]]
    _, ri = segmented_topk_reference(values.numpy(), offsets.numpy(), 3)
    assert ri.tolist() == i.tolist()


def test_rejects_bad_offsets():
    values = torch.arange(5.0)
    with pytest.raises(ValueError, match="end at"):
        segmented_topk(values, torch.tensor([0, 2, 4]), 2)
    with pytest.raises(ValueError, match="nondecreasing"):
        segmented_topk(values, torch.tensor([0, 3, 2, 5]), 2)
    with pytest.raises(ValueError, match="strategy"):
        segmented_topk(values, torch.tensor([0, 5]), 2, strategy="bogus")
    with pytest.raises(ValueError, match="2-D"):
        topk_dense(values, 2)
