"""The old names keep working: ``gpurag.score`` (now ``gpurag.rerank``)."""

from __future__ import annotations

import importlib
import subprocess
import sys


def test_gpurag_score_is_the_rerank_package_and_warns():
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n    import gpurag.score\nexcept DeprecationWarning as w:\n    print('warned', w)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert "warned" in out.stdout and "gpurag.rerank" in out.stdout
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("gpurag.score.subgraph")
        from gpurag.score import get_reranker
    new = importlib.import_module("gpurag.rerank.subgraph")
    assert old is new
    from gpurag.rerank import get_reranker as current

    assert get_reranker is current
