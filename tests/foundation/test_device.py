"""Device selection from GPURAG_DEVICE."""

from __future__ import annotations

import pytest

from gpurag.device import DeviceError, cuda_available, resolve_device
from gpurag.runtime import BuildRecord


@pytest.mark.parametrize("value", ["cpu", "CPU", " cpu "])
def test_cpu_forced(monkeypatch, value):
    monkeypatch.setenv("GPURAG_DEVICE", value)
    assert resolve_device() == "cpu"


def test_auto(monkeypatch):
    monkeypatch.delenv("GPURAG_DEVICE", raising=False)
    assert resolve_device() == ("cuda" if cuda_available() else "cpu")
    monkeypatch.setenv("GPURAG_DEVICE", "auto")
    assert resolve_device() == ("cuda" if cuda_available() else "cpu")


def test_argument_beats_environment(monkeypatch):
    monkeypatch.setenv("GPURAG_DEVICE", "bogus")
    assert resolve_device("cpu") == "cpu"


@pytest.mark.skipif(cuda_available(), reason="a GPU is present")
def test_cuda_without_gpu_is_clear_error(monkeypatch):
    monkeypatch.setenv("GPURAG_DEVICE", "cuda")
    with pytest.raises(DeviceError) as info:
        resolve_device()
    msg = str(info.value)
    assert "GPURAG_DEVICE=cuda" in msg and "no usable CUDA GPU" in msg
    assert "GPURAG_DEVICE=cpu" in msg, "the message says how to get going"


@pytest.mark.parametrize("value", ["gpu", "cuda:0", "tpu"])
def test_invalid_value(monkeypatch, value):
    monkeypatch.setenv("GPURAG_DEVICE", value)
    with pytest.raises(DeviceError, match="must be one of cpu, cuda or auto") as info:
        resolve_device()
    assert repr(value) in str(info.value)


def test_build_with_invalid_device_fails_before_writing(monkeypatch, tmp_path):
    from gpurag import Index
    from tests.conftest import SAMPLE_CORPUS

    monkeypatch.setenv("GPURAG_DEVICE", "gpu")
    with pytest.raises(DeviceError):
        Index.build(SAMPLE_CORPUS, tmp_path / "out", graph=False, show_progress=False)
    assert list(tmp_path.iterdir()) == []


def test_build_record():
    reg = BuildRecord()
    reg.record("embed", "a")
    reg.record("embed", "b")
    d = reg.as_dict()
    assert d == {"embed": "b"}
    d["x"] = "y"
    assert reg.as_dict() == {"embed": "b"}


def _fake_cupy(devices: int):
    """A CuPy module that sees ``devices`` GPUs: stands in for the hardware, to observe
    whether the probe asks it."""
    import types

    runtime = types.SimpleNamespace(getDeviceCount=lambda: devices)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))


def test_probe_cuda_asks_the_libraries_where_no_driver_file_exists(monkeypatch):
    """``GPURAG_PROBE_CUDA=1`` (README: containers without /proc/driver/nvidia) probes CuPy
    and torch anyway; without it, no driver file means no GPU and no library is imported."""
    import sys

    import gpurag.device as device

    monkeypatch.setattr(device.os.path, "exists", lambda path: False)
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(1))
    monkeypatch.delenv("GPURAG_PROBE_CUDA", raising=False)
    device.cuda_available.cache_clear()
    try:
        assert device.cuda_available() is False
        monkeypatch.setenv("GPURAG_PROBE_CUDA", "1")
        device.cuda_available.cache_clear()
        assert device.cuda_available() is True
        monkeypatch.setenv("GPURAG_PROBE_CUDA", "0")
        device.cuda_available.cache_clear()
        assert device.cuda_available() is False
    finally:
        device.cuda_available.cache_clear()
