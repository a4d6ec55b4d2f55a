"""Device selection and installed-package probes.

``cuda`` when a GPU is usable, else ``cpu``; asking for ``cuda`` without a usable GPU is an
error. The runtime (:mod:`gpurag.runtime`) passes the requested device (``GPURAG_DEVICE``) in;
what each build ran is recorded per build there. Imports nothing of gpurag's.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from functools import lru_cache

VALID_DEVICES = ("cpu", "cuda")


def _settings():
    from gpurag.settings import current

    return current()


def _probe_asked() -> bool:
    """``GPURAG_PROBE_CUDA=1`` (False on an environment that does not read: ``gpurag info``
    reports on a broken one, every other command has stopped on it already)."""
    from gpurag.errors import ConfigError

    try:
        return bool(_settings().probe_cuda)
    except ConfigError:
        return False


class DeviceError(RuntimeError):
    """The requested device cannot be used."""


@lru_cache(maxsize=1)
def cuda_available() -> bool:
    """True when CuPy or torch can see at least one CUDA device (no driver: False, fast)."""
    if not (os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl")
            or _probe_asked()):
        return False
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return True
    except Exception:
        pass
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def resolve_device(requested: str | None = None) -> str:
    """The device to run on: ``requested``, else ``$GPURAG_DEVICE``, else auto-detected."""
    choice = (requested or _settings().device or "auto").strip().lower()
    if choice == "auto":
        return "cuda" if cuda_available() else "cpu"
    if choice not in VALID_DEVICES:
        raise DeviceError(f"GPURAG_DEVICE must be one of cpu, cuda or auto, not {choice!r}")
    if choice == "cuda" and not cuda_available():
        raise DeviceError(
            "GPURAG_DEVICE=cuda but no usable CUDA GPU was found (neither CuPy nor torch sees "
            "one); install the 'gpu' extra on a machine with a GPU, or use GPURAG_DEVICE=cpu"
        )
    return choice


def has_module(name: str) -> bool:
    """True when ``name`` imports."""
    try:
        importlib.import_module(name)
    except Exception:
        return False
    return True


def package_version(dist: str) -> str | None:
    """Installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_label(*dists: str) -> str | None:
    """``"dist VERSION"`` of the first installed of ``dists``, or None when none is."""
    for dist in dists:
        version = package_version(dist)
        if version:
            return f"{dist} {version}"
    return None
