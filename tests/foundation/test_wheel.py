"""The wheel holds one top-level package, ``gpurag`` (the torch kernels as ``gpurag.kernels``,
not a top-level ``kernels`` that would collide with the unrelated PyPI package), and no tests."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> list[str]:
    pytest.importorskip("hatchling")
    from hatchling.builders.wheel import WheelBuilder

    out = tmp_path_factory.mktemp("wheel")
    built = list(WheelBuilder(str(REPO)).build(directory=str(out), versions=["standard"]))
    assert len(built) == 1
    with zipfile.ZipFile(built[0]) as whl:
        return whl.namelist()


def test_wheel_has_only_the_gpurag_package(wheel_names):
    tops = {name.split("/")[0] for name in wheel_names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"gpurag"}


def test_wheel_ships_the_kernels_inside_gpurag(wheel_names):
    for mod in ("__init__", "knn", "ppr_batched", "ppr_reference", "topk"):
        assert f"gpurag/kernels/{mod}.py" in wheel_names
    assert not [n for n in wheel_names if n.startswith(("tests/", "kernels/"))]
    assert any(n.startswith("gpurag/examples/sample/") for n in wheel_names)  # the demo's
