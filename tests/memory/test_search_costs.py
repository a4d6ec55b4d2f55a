"""The indexed search's cheaper paths (issue 31, 1M-trace search): each gives the answer of
the path it replaces, and is the one taken."""

from __future__ import annotations

import numpy as np

from gpurag.memory import consistency
from gpurag.memory.postings import Postings
from gpurag.memory.scale import ScaleIndex
from gpurag.vectors import faiss_setup


def _entries(seed: int = 0, n: int = 400) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.integers(0, 150, n))
    return rng.integers(0, 30, n), rows, rng.random(n).astype(np.float32)


def test_one_run_lookup_equals_the_many_run_lookup():
    keys, rows, vals = _entries()
    many = Postings(seal=16)  # many runs
    for lo in range(0, len(keys), 9):
        many.add(keys[lo:lo + 9], rows[lo:lo + 9], vals[lo:lo + 9])
        many.get(np.asarray([0]))  # seals each batch into a run
    one = Postings()
    one.set_run(*many.merged())
    assert many.n_runs > 1 and one.n_runs == 1
    ask = np.asarray([29, 3, 0, 77, 3, 11])
    for a, b in zip(many.get(ask), one.get(ask), strict=True):
        assert a.dtype == b.dtype
        assert np.array_equal(a, b)


def test_a_text_without_a_claim_word_skips_the_claim_patterns(monkeypatch):
    said = consistency.assertions("Rosa: my phone number is 555 1234.")
    assert [(a.subject, a.attribute, a.value) for a in said] == [
        ("rosa", "phone number", "555 1234")]
    for text, attr in (("Ann's job is nurse.", "job"), ("We moved to Oslo.", "residence"),
                       ("Kim relocated to Rome.", "residence"),
                       ("Bo lives in Lund now.", "residence"), ("My address is 5 Elm Road.",
                                                                "residence")):
        assert [a.attribute for a in consistency.assertions(text, "s")] == [attr], text

    class _Refuse:
        def finditer(self, text):
            raise AssertionError("the claim patterns ran on a text that holds no claim word")

    monkeypatch.setattr(consistency, "_PATTERNS", [_Refuse()] * 4)
    assert consistency.assertions("Ann12 Berg7 met Ann3 Berg9 at Porto4 about the plan.") == []


def test_a_one_question_ivf_search_runs_on_the_calling_thread(monkeypatch):
    rng = np.random.default_rng(0)
    vec = rng.standard_normal((400, 16)).astype(np.float32)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)

    class _Src:
        n = 400
        vectors = type("V", (), {"take": staticmethod(lambda i: vec[i]),
                                 "__getitem__": lambda self, s: vec[s]})()

    index = ScaleIndex(16, nlist=4, nprobe=2)
    index._add_dense(_Src())
    index.n = 400
    batch = index.dense_ids(vec[:40], 10)  # (the same rows, searched as a batch)
    calls = []
    real = faiss_setup.on_one_thread

    def spy(fn, *args, **kwargs):
        calls.append(fn)
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(faiss_setup, "on_one_thread", spy)
    one = [index.dense_ids(vec[i:i + 1], 10)[0] for i in range(40)]
    assert len(calls) == 40
    assert all(np.array_equal(a, b) for a, b in zip(one, batch, strict=True))




_FRESH = """
import argparse, gc
import gpurag.memory
from gpurag.memory import cli

def stop(*args, **kwargs):  # the command's first step after the freeze
    print(gc.get_freeze_count(), gc.isenabled())
    raise SystemExit(0)

gpurag.memory.Memory.open = stop
print(gc.get_freeze_count())
cli.cmd_add(argparse.Namespace(memory="m", text="Ann Berg met Bo Lund.", file=None,
                               corpus=None, lock_timeout=1.0))
"""


def test_memory_add_freezes_its_startup_objects_and_the_library_does_not(tmp_path):
    import gc
    import os
    import subprocess
    import sys

    from gpurag.memory import Memory

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    res = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True,
                         env=env, check=True, cwd=tmp_path)
    before, frozen, enabled = res.stdout.split()
    assert before == "0" and int(frozen) > 1000 and enabled == "True"
    was = gc.get_freeze_count()  # (this process: the library alone freezes nothing)
    with Memory.create(tmp_path / "lib", embedder=_E()) as mem:
        mem.add_many(["Ann Berg met Bo Lund."], vectors=np.eye(4, dtype=np.float32)[:1])
    assert gc.get_freeze_count() == was


class _E:
    name, dim, max_tokens = "e", 4, 64

    def encode(self, texts, batch_size=64):
        raise AssertionError("vectors are given")
