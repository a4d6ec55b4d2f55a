"""bench/chain_misses.py: the miss classes and the cross-validation that picks settings."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_chain_misses",
                                               REPO / "bench" / "chain_misses.py")
chain_misses = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = chain_misses
_before = list(sys.path)
_spec.loader.exec_module(chain_misses)
_after = list(sys.path)
crossval, miss_class = chain_misses.crossval, chain_misses.miss_class


def test_loading_the_script_leaves_sys_path_alone():
    assert _after == _before  # the pytest session's imports stay the same


def test_question_vectors_are_cached_per_embedder_and_questions(tmp_path):
    cache = chain_misses.qvec_cache
    a = cache(tmp_path, "musique_train100", "onnx-minilm-l6-v2-int8:model.onnx", ["q1", "q2"])
    assert a.parent == tmp_path and a.name.startswith("musique_train100.")
    assert a == cache(tmp_path, "musique_train100", "onnx-minilm-l6-v2-int8:model.onnx",
                      ["q1", "q2"])
    assert a != cache(tmp_path, "musique_train100", "st:other-model", ["q1", "q2"])
    assert a != cache(tmp_path, "musique_train100", "onnx-minilm-l6-v2-int8:model.onnx",
                      ["q1", "q3"])
    assert cache(tmp_path, "s", "st:a/b", []).parent == tmp_path  # a name with a slash


def test_miss_classes_follow_the_links_to_the_missing_page():
    # rows 0-3; row 0 links to row 2 by title
    bridge = sp.csr_array((np.ones(1), ([0], [2])), shape=(4, 4))
    top = np.array([0, 1, 3])
    assert miss_class(2, [0], top, 5, bridge, [], False, False) == "bridged, outranked"
    assert miss_class(2, [0], top, 0, bridge, [], False, False) == "bridged, source low"
    assert miss_class(2, [1], top, 5, bridge, [1], False, False) == "backlink, outranked"
    assert miss_class(2, [3], top, 1, bridge, [], False, True) == "named, not linked"
    assert miss_class(2, [3], top, 5, bridge, [], False, False) == "content page"
    assert miss_class(2, [0], top, 5, bridge, [], True, False) == "first hop"


def test_crossval_scores_the_setting_picked_on_the_other_folds():
    n = 50
    good = np.ones((n, 3))
    table = {"a": {"off": np.zeros((n, 3)), "on": good}, "b": {"off": np.zeros((n, 3)),
                                                              "on": good * 0.5}}
    res = crossval(table, folds=5, seeds=2)
    assert res["picks"] == {"on": 10}
    assert np.allclose(res["held_out"]["a"], 1.0) and np.allclose(res["held_out"]["b"], 0.5)
    # a setting that wins on one set and loses more on the other is not picked
    table["b"]["on"] = -2 * good
    assert crossval(table, folds=5, seeds=2)["picks"] == {"off": 10}
