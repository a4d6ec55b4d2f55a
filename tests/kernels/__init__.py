"""Tests of the kernels against their NumPy references, on CPU and (marked ``gpu``) on CUDA."""

from __future__ import annotations

import pytest


def cuda_available() -> bool:
    """True when torch sees a CUDA device (False without torch)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def device_params() -> list:
    """``["cpu", "cuda"]`` as pytest params; the cuda one is marked ``gpu`` and skips without
    a GPU."""
    return [
        pytest.param("cpu", id="cpu"),
        pytest.param(
            "cuda",
            id="cuda",
            marks=[pytest.mark.gpu,
                   pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")],
        ),
    ]
