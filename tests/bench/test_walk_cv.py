"""bench/walk_cv.py: per-question metrics count documents, as ``gpurag.metrics`` does."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_walk_cv", REPO / "bench" / "walk_cv.py")
walk_cv = importlib.util.module_from_spec(_spec)
_before = list(sys.path)
_spec.loader.exec_module(walk_cv)
_after = list(sys.path)


def test_loading_the_script_leaves_sys_path_alone():
    assert _after == _before  # the pytest session's imports stay the same


def test_a_documents_repeated_passages_count_once():
    # doc a's two passages take ranks 1-2: by documents b is second, so R@2 is 1.0
    docs = [["a", "a", "b", "c"], ["x", "y", "z", "x", "x", "x", "x", "x", "w"]]
    gold = [["a", "b"], ["w", "x"]]
    got = walk_cv.per_question(docs, gold)
    # question 2: documents x, y, z, w -> w is 4th (passage 9): all-gold@8 holds
    assert np.allclose(got, [[1.0, 1.0, 1.0], [0.5, 1.0, 1.0]])
