"""backends/topk.torch_topk: ties broken as the host's numpy_topk breaks them (lower id)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpurag.backends.topk import torch_topk  # noqa: E402
from gpurag.graph.ppr_top import numpy_topk  # noqa: E402


@pytest.mark.parametrize("k", [1, 3, 5, 9])
def test_torch_topk_breaks_ties_as_the_host(k):
    """Rows full of ties, also across the cut: the same ids, in the same order, as NumPy."""
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, size=(50, 40)).astype(np.float32)  # many equal values
    scores[3] = 1.0  # a row of one value: the first k ids
    values, ids = torch_topk(torch.from_numpy(scores), k)
    want_v, want_i = numpy_topk(scores, k)
    np.testing.assert_array_equal(ids.numpy(), want_i)
    np.testing.assert_array_equal(values.numpy(), want_v)
    assert ids[3].tolist() == list(range(k))


def test_torch_topk_pads_past_the_row():
    values, ids = torch_topk(torch.tensor([[0.5, 0.5]]), 4)
    assert ids.tolist() == [[0, 1, -1, -1]] and torch.isinf(values[0, 2:]).all()
