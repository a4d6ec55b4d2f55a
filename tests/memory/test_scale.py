"""The indexed read path of a large memory (gpurag.memory.scale) against the small path's scans.

Each view is pinned on a fixture: the inverted lists return what a scan finds, BM25 over the
lists scores as bm25s does, the temporal view and the coverage deficit are the small path's to
float precision, the push PPR ranks like power iteration, and the IVF with one list returns the
flat top-k; end to end, a memory read through the index returns the small path's top-5.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpurag.memory import Memory
from gpurag.memory.postings import Postings
from gpurag.memory.scale import ScaleIndex, lookup
from gpurag.memory.views import anchor_hits, coverage_deficit, temporal_scores

DIM = 16


class _Precomputed:
    name = "precomputed"
    dim = DIM
    max_tokens = 256

    def encode(self, texts, batch_size=64):
        raise AssertionError("vectors are given")


def _traces(n: int, seed: int = 0) -> tuple[list[dict], np.ndarray]:
    rng = np.random.default_rng(seed)
    people = [f"Ann{i} Berg{j}" for i, j in zip(rng.permutation(60), rng.permutation(60),
                                                strict=True)]
    places = [f"Porto{i}" for i in range(15)]
    rows = []
    for i in range(n):
        a, b = rng.integers(0, len(people), 2)
        rows.append({"text": f"{people[a]} met {people[b]} at {places[i % 15]} about the "
                             f"{['budget', 'trip', 'garden', 'band'][i % 4]} plan.",
                     "session": f"s{i // 12}", "turn": i % 12, "time": float(i)})
    vec = rng.standard_normal((n, DIM)).astype(np.float32)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    return rows, vec


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The same 360 traces in a small-path memory and in an indexed one (one IVF list: the
    dense candidates are exact)."""
    rows, vec = _traces(360)
    out = []
    for name, scale_from in (("small", 10**9), ("indexed", 0)):
        mem = Memory.create(tmp_path_factory.mktemp(name) / "m", embedder=_Precomputed(),
                            scale_from=scale_from)
        if scale_from == 0:
            mem._index = ScaleIndex(DIM, nlist=1)
        mem.add_many(rows[:240], vectors=vec[:240])
        mem._refresh()  # the indexed memory is synced, then appended to: incremental
        mem.add_many(rows[240:], vectors=vec[240:])
        mem._refresh()
        out.append(mem)
    yield (*out, rows, vec)
    for mem in out:
        mem.close()


def _questions(rows, vec, n=25):
    rng = np.random.default_rng(3)
    pick = rng.integers(0, len(rows), n)
    qs = [f"When did {rows[i]['text'].split(' met ')[0]} meet "
          f"{rows[i]['text'].split(' met ')[1].split(' at ')[0]}?" for i in pick]
    qv = vec[pick] + 0.05 * rng.standard_normal((n, DIM)).astype(np.float32)
    return qs, qv


def test_postings_return_what_a_scan_finds():
    rng = np.random.default_rng(0)
    post = Postings(seal=7)  # many runs and merges
    truth: dict[int, list[tuple[int, float]]] = {}
    row = 0
    for _ in range(60):
        m = int(rng.integers(1, 6))
        keys = rng.integers(0, 9, m)
        vals = rng.random(m).astype(np.float32)
        post.add(keys, np.full(m, row), vals)
        for k, v in zip(keys.tolist(), vals.tolist(), strict=True):
            truth.setdefault(k, []).append((row, v))
        row += int(rng.integers(0, 2))  # rows repeat or increase
        if rng.random() < 0.2:
            post.get(np.asarray([0]))  # a lookup seals the pending rows
    assert post.n_runs < 10  # merged: logarithmic, not one run per seal
    ask = np.asarray([3, 0, 8, 5, 42])
    owner, rows, vals = post.get(ask)
    for j, k in enumerate(ask.tolist()):
        got = list(zip(rows[owner == j].tolist(), vals[owner == j].tolist(), strict=True))
        assert [r for r, _ in got] == [r for r, _ in truth.get(k, [])]
        assert np.allclose([v for _, v in got], [v for _, v in truth.get(k, [])])
    assert post.count(ask).tolist() == [len(truth.get(k, [])) for k in ask.tolist()]


def test_lexical_scores_are_bm25s_scores(pair):
    small, indexed, rows, vec = pair
    from gpurag.eval.bm25 import BM25Retriever

    ref = BM25Retriever(pd.DataFrame({"title": [""] * len(small),
                                      "text": [small.lexical_text(i)
                                               for i in range(len(small))]}))
    qs, _ = _questions(rows, vec, 10)
    qs += ["budget plan at Porto3", "the garden"]
    got = indexed._index.lexical(qs, 20)
    scores, ids = ref.search(qs, 20)
    for g, srow, irow in zip(got, scores, ids, strict=True):
        want = {int(i): float(s) for i, s in zip(irow, srow, strict=True) if i >= 0 and s > 0}
        assert set(g) == set(want)
        assert np.allclose([g[i] for i in want], list(want.values()), rtol=1e-5)


def test_temporal_view_and_deficit_equal_the_scan(pair):
    small, indexed, rows, vec = pair
    small._refresh()
    for q in _questions(rows, vec, 10)[0]:
        anc = small.anchors(q)
        assert len(anc) == 2
        w = small._idf[anc] / small._idf[anc].sum()
        assert np.allclose(indexed._index.idf(anc) / indexed._index.idf(anc).sum(), w)
        hits = anchor_hits(small._tag_csc, anc)
        want = temporal_scores(hits, w, small._session_arr, small._turn_arr, small._time_arr,
                               len(small._session_ids), 3.0, 0.5)
        t_rows, t_vals, deficit = indexed._index.temporal(anc, w, 3.0, 0.5)
        order = np.argsort(t_rows)
        got = lookup(t_rows[order], t_vals[order], np.arange(len(small)), 0.0)
        assert np.allclose(got, want, atol=1e-6)
        assert deficit == pytest.approx(coverage_deficit(hits, w))


def test_push_ppr_ranks_traces_like_power_iteration(pair):
    small, indexed, rows, vec = pair
    from gpurag.memory.views import anchor_mass, best_entity_mass, relational_scores

    for q in _questions(rows, vec, 6)[0]:
        anc = small.anchors(q)
        w = small._idf[anc] / small._idf[anc].sum()
        best = best_entity_mass(small._tag_csr, anchor_mass(small._graph, anc,
                                                            small._ppr_fn(), 0.5))
        want = relational_scores(best, w)
        idx = indexed._index
        got = idx.relational_of(np.arange(len(small)), idx.masses(anc, 0.5), w)
        top = np.argsort(-want, kind="stable")[:20]
        assert np.allclose(got[top], want[top], rtol=0.1)  # approximate PPR, same order
        assert set(np.argsort(-got, kind="stable")[:5]) == set(top[:5])
        assert set(top[:10]) <= set(idx.relational_top(idx.masses(anc, 0.5), w, 20).tolist())
        # the certified cut: from a budget of one trace, grown until the top-k is exact
        masses = idx.masses(anc, 0.5)
        small_budget = idx.relational_top(masses, w, 10, budget=1)
        everything = idx.relational_of(np.arange(len(small)), masses, w)
        assert np.sort(everything[small_budget]).tolist() == np.sort(everything)[-10:].tolist()


def test_ivf_with_one_list_holds_the_flat_top_10(pair):
    _small, indexed, rows, vec = pair
    _, qv = _questions(rows, vec, 10)
    want = [np.argsort(-(vec @ v), kind="stable")[:10] for v in qv]
    got = indexed._index.dense_ids(qv, 30)  # 8-bit codes pick, float32 cosines rank after
    for g, w in zip(got, want, strict=True):
        assert set(w.tolist()) <= set(g.tolist())


def test_indexed_search_returns_the_small_paths_top_5(pair):
    small, indexed, rows, vec = pair
    qs, qv = _questions(rows, vec)
    a = small.search_batch(qs, k=5, vectors=qv)
    b = indexed.search_batch(qs, k=5, vectors=qv)
    assert indexed.info()["index"]["terms"] > 0  # it did read the index
    same = [[h.id for h in x.hits] == [h.id for h in y.hits] for x, y in zip(a, b, strict=True)]
    assert sum(same) >= len(qs) - 1, same  # the one allowed: an approximate-PPR near tie
    assert all({h.id for h in x.hits[:3]} == {h.id for h in y.hits[:3]}
               for x, y in zip(a, b, strict=True))


def test_index_follows_appends_and_compaction(tmp_path):
    rows, vec = _traces(300, seed=5)
    mem = Memory.create(tmp_path / "m", embedder=_Precomputed(), scale_from=0)
    mem.add_many(rows[:200], vectors=vec[:200])
    q = rows[250]["text"].split(" at ")[0] + "?"
    first = mem.search(q, k=3, vector=vec[250])
    assert 250 not in [h.id for h in first.hits]
    mem.add_many(rows[200:], vectors=vec[200:])
    after = mem.search(q, k=3, vector=vec[250])
    assert after.hits[0].id == 250  # read-your-writes through the lists and the IVF
    mem.compact()
    assert mem.search(q, k=3, vector=vec[250]).hits[0].id == 250
    mem.close()


def test_vector_store_reads_like_one_array():
    from gpurag.memory import vectors as vs

    rng = np.random.default_rng(2)
    whole = rng.standard_normal((3 * 70 + 5, 4)).astype(np.float32)
    store = vs.VectorStore(4)
    old, vs.BLOCK = vs.BLOCK, 64
    try:
        store.extend(whole[:100])  # adopted as one block (>= BLOCK rows)
        for lo in range(100, len(whole), 23):
            store.extend(whole[lo:lo + 23])
    finally:
        vs.BLOCK = old
    assert len(store) == len(whole) and store._blocks[0].base is whole
    ids = rng.integers(0, len(whole), 50)
    assert np.array_equal(store[ids], whole[ids])
    for lo, hi in ((0, 100), (90, 170), (150, 215), (5, 5)):
        assert np.array_equal(store[lo:hi], whole[lo:hi])
