"""Contract checks every extractor, embedder, reranker, searcher, PPR, top-k and Leiden must
pass (like scikit-learn's ``check_estimator``): the same small verbs, deterministic results,
documented shapes and dtypes. The test suite runs them over every registered implementation;
a new one can call them in its own tests. Plain ``assert``s: pytest shows the failing condition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from gpurag.arrays import isin_sorted, unique_sorted
from gpurag.backends.part import PPR_WALK_KEYWORDS, rejected_keywords
from gpurag.extract.base import MENTION_COLUMNS, RELATION_COLUMNS, Extraction


def check_extractor(make: Callable[[], Any], chunks: pd.DataFrame, offset: int = 100) -> None:
    """``make()`` builds the extractor; ``chunks`` (``chunk_id``, ``title``, ``text``, ...) name
    some entities. Checks the name, the tables and their columns, that chunk positions are
    offset batch rows and spans lie in the text, determinism, and an empty batch."""
    ex = make()
    assert isinstance(ex.name, str) and ex.name
    out = ex.extract(chunks, offset=offset)
    assert isinstance(out, Extraction)
    assert set(MENTION_COLUMNS) <= set(out.mentions.columns)
    assert set(RELATION_COLUMNS) <= set(out.relations.columns)
    assert len(out.mentions), "the chunks name entities"
    last = offset + len(chunks) - 1
    m = out.mentions
    assert m["chunk"].between(offset, last).all()
    texts = chunks["text"].to_numpy()
    located = m[m["start"] >= 0]
    for chunk, start, end in zip(located["chunk"], located["start"], located["end"],
                                 strict=True):
        assert 0 <= start < end <= len(texts[chunk - offset])
    assert out.relations["chunk"].between(offset, last).all()
    assert all(isinstance(v, (int, np.integer)) for v in out.stats.values())
    again = make().extract(chunks, offset=offset)
    pd.testing.assert_frame_equal(out.mentions.reset_index(drop=True),
                                  again.mentions.reset_index(drop=True))
    pd.testing.assert_frame_equal(out.relations.reset_index(drop=True),
                                  again.relations.reset_index(drop=True))
    empty = ex.extract(chunks.iloc[:0], offset=0)
    assert len(empty.mentions) == 0 and len(empty.relations) == 0


def check_embedder(emb: Any, texts: list[str]) -> None:
    """Attributes, ``(n, dim)`` float32 unit rows, determinism, batch-size invariance (to float
    noise), an empty batch and ``count_tokens``. ``texts`` are non-empty sentences."""
    from gpurag.embed.base import Embedder

    assert isinstance(emb, Embedder)
    assert isinstance(emb.name, str) and emb.dim > 0 and emb.max_tokens > 0
    batch = [*texts, "", "x"]
    vecs = emb.encode(batch, batch_size=3)
    assert vecs.shape == (len(batch), emb.dim) and vecs.dtype == np.float32
    assert np.isfinite(vecs).all()
    np.testing.assert_allclose(np.linalg.norm(vecs[:len(texts)], axis=1), 1.0, atol=1e-3)
    np.testing.assert_array_equal(emb.encode(batch, batch_size=3), vecs)
    np.testing.assert_allclose(emb.encode(batch, batch_size=64), vecs, atol=1e-3)
    assert emb.encode([], batch_size=4).shape == (0, emb.dim)
    counts = emb.count_tokens(batch)
    assert len(counts) == len(batch) and all(isinstance(c, int) and c >= 0 for c in counts)


def check_reranker(rr: Any, qvecs: np.ndarray, cand: np.ndarray, ppr_scores: np.ndarray,
                   dense: tuple[np.ndarray, np.ndarray]) -> None:
    """``score`` gives finite float32 ``(q, c)`` scores, deterministic, and a question scored
    alone gets its rows of the batch."""
    out = rr.score(qvecs, cand, ppr_scores, dense)
    assert out.shape == cand.shape and out.dtype == np.float32 and np.isfinite(out).all()
    np.testing.assert_array_equal(rr.score(qvecs, cand, ppr_scores, dense), out)
    one = rr.score(qvecs[:1], cand[:1], ppr_scores[:1], (dense[0][:1], dense[1][:1]))
    np.testing.assert_allclose(one, out[:1], atol=1e-5)


def _exact(vectors: np.ndarray, queries: np.ndarray, metric: str) -> np.ndarray:
    """The exact scores (q, n): inner products, or squared L2 distances."""
    v, q = vectors.astype(np.float64), queries.astype(np.float64)
    if metric == "l2":
        return (q * q).sum(1)[:, None] - 2 * q @ v.T + (v * v).sum(1)[None, :]
    return q @ v.T


def check_searcher(searcher: Any, vectors: np.ndarray, queries: np.ndarray, *, k: int = 10,
                   metric: str = "ip", tie: float = 1e-3) -> None:
    """``searcher`` indexes ``vectors`` (n, d), n > k, exactly. ``search(x, k)`` gives float32
    scores and int64 ids ``(q, k)``, best first, the scores of the ids, a top-``k`` of the
    exact scores (up to ``tie``), deterministic, a row searched alone gets its batch row, and
    ``k > ntotal`` pads with ``-1`` ids and ``-inf`` (L2: ``+inf``) scores."""
    n, d = vectors.shape
    assert searcher.ntotal == n and searcher.dim == d and searcher.d == d
    assert searcher.metric == metric
    assert isinstance(searcher.implementation, str) and searcher.implementation
    scores, ids = searcher.search(queries, k)
    assert scores.shape == ids.shape == (len(queries), k)
    assert scores.dtype == np.float32 and ids.dtype == np.int64
    assert ((ids >= 0) & (ids < n)).all()
    assert all(len(set(row)) == k for row in ids.tolist())
    sign = -1.0 if metric == "l2" else 1.0
    assert (np.diff(sign * scores, axis=1) <= tie).all(), "best first"
    exact = _exact(vectors, queries, metric)
    np.testing.assert_allclose(scores, np.take_along_axis(exact, ids, axis=1), atol=tie)
    s = sign * exact
    kth = -np.sort(-s, axis=1)[:, k - 1]
    assert (np.take_along_axis(s, ids, axis=1) >= kth[:, None] - tie).all()
    for row, clear in enumerate(s > kth[:, None] + tie):
        assert set(np.flatnonzero(clear)) <= set(ids[row].tolist())
    again = searcher.search(queries, k)
    np.testing.assert_array_equal(again[0], scores)
    np.testing.assert_array_equal(again[1], ids)
    one = searcher.search(queries[1:2], k)
    np.testing.assert_allclose(one[0], scores[1:2], atol=tie)
    big_s, big_i = searcher.search(queries[:2], n + 3)
    assert big_i.shape == (2, n + 3)
    assert (big_i[:, n:] == -1).all() and np.isinf(big_s[:, n:]).all()
    assert (sign * big_s[:, n:] < 0).all()
    assert sorted(big_i[0, :n].tolist()) == list(range(n))
    try:
        searcher.search(queries, 0)
    except ValueError:
        pass
    else:
        raise AssertionError("k = 0 must raise ValueError")


def check_topk(topk: Callable[[Any, int], tuple[Any, Any]], scores: np.ndarray,
               to_input: Callable[[np.ndarray], Any] = np.asarray,
               to_numpy: Callable[[Any], np.ndarray] = np.asarray) -> None:
    """``topk(scores, k) -> (values, ids)`` per row of a 2-D array (``to_input`` makes the
    part's input, ``to_numpy`` reads its output): values best first, the scores at the ids,
    the ``k`` largest (ties at the cut may go to any id), distinct ids, deterministic; where
    a row has fewer than ``k`` entries the host part pads with -1 ids and ``-inf``."""
    scores = np.asarray(scores, np.float32)
    q, n = scores.shape
    for k in (1, min(5, n), n):
        values, ids = topk(to_input(scores), k)
        values, ids = to_numpy(values), to_numpy(ids)
        assert values.shape == ids.shape == (q, k)
        assert np.issubdtype(ids.dtype, np.integer)
        assert ((ids >= 0) & (ids < n)).all()
        assert all(len(set(row)) == k for row in ids.tolist())
        assert (np.diff(values.astype(np.float64), axis=1) <= 0).all(), "best first"
        np.testing.assert_array_equal(values, np.take_along_axis(scores, ids, axis=1))
        np.testing.assert_array_equal(values, -np.sort(-scores, axis=1)[:, :k])
        v2, i2 = topk(to_input(scores), k)
        np.testing.assert_array_equal(to_numpy(v2), values)
        np.testing.assert_array_equal(to_numpy(i2), ids)


def _random_graph(n: int, seed: int):
    from gpurag.graph.csr import build_csr

    rng = np.random.default_rng(seed)
    m = 4 * n
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    return build_csr(src, dst, rng.random(m).astype(np.float32) + 0.1, n)


def check_ppr(ppr: Callable[..., Any], *, n: int = 60, q: int = 5, k: int = 8,
              seed: int = 0, damping: float = 0.5) -> None:
    """The PPR part (``ppr(g, reset, *, k, lo, hi, gather, damping, tol, method, eps,
    local_fanout, push_min_edges, push_max_seeds, full) -> PPRTop``: every keyword the walk
    passes, :data:`~gpurag.backends.part.PPR_WALK_KEYWORDS`, and ``full``) on
    a random graph: float32 top-``k`` values and int64 ids relative to ``lo``, best first,
    within ``[lo, hi)``, equal to the full scores at those ids, a top-``k`` of the NumPy
    reference (:func:`gpurag.kernels.ppr_reference.ppr_reference`, exact solve) to float
    noise, gathered scores at the ``gather`` ids (0 at -1), deterministic."""
    from gpurag.kernels.ppr_reference import ppr_reference

    g = _random_graph(n, seed)
    rng = np.random.default_rng(seed + 1)
    reset = np.zeros((q, n), np.float32)
    for row in range(q):
        reset[row, rng.choice(n, 3, replace=False)] = rng.random(3) + 0.5
    lo, hi = 10, n - 5
    gather = rng.integers(-1, hi - lo, (q, 4))
    bad = rejected_keywords(ppr, PPR_WALK_KEYWORDS)
    assert not bad, f"the PPR part must take every keyword the walk passes; not {bad}"
    walk = {"method": "auto", "eps": 1e-6, "local_fanout": None}  # as a graph query calls it
    out = ppr(g, reset, k=k, lo=lo, hi=hi, gather=gather, damping=damping, tol=1e-10,
              full=True, push_min_edges=None, push_max_seeds=None, **walk)
    assert out.values.shape == out.ids.shape == (q, k)
    assert out.values.dtype == np.float32 and out.ids.dtype == np.int64
    assert ((out.ids >= 0) & (out.ids < hi - lo)).all()
    assert (np.diff(out.values.astype(np.float64), axis=1) <= 1e-7).all(), "best first"
    ref = ppr_reference(g.indptr, g.indices, g.weights, reset, damping=damping)
    assert out.full is not None and out.full.shape == (q, n)
    np.testing.assert_allclose(out.full, ref, atol=1e-5)
    part = ref[:, lo:hi]
    np.testing.assert_allclose(out.values, np.take_along_axis(part, out.ids, axis=1),
                               atol=1e-5)
    kth = -np.sort(-part, axis=1)[:, k - 1]
    assert (np.take_along_axis(part, out.ids, axis=1) >= kth[:, None] - 1e-5).all()
    want = np.where(gather >= 0, np.take_along_axis(part, gather.clip(0), axis=1), 0.0)
    assert out.gathered.shape == (q, 4)
    np.testing.assert_allclose(out.gathered, want, atol=1e-5)
    # a size rule no row meets (3 seeds each): power iteration on the host, as before
    again = ppr(g, reset, k=k, lo=lo, hi=hi, gather=gather, damping=damping, tol=1e-10,
                push_min_edges=0, push_max_seeds=0, **walk)
    np.testing.assert_array_equal(again.values, out.values)
    np.testing.assert_array_equal(again.ids, out.ids)
    assert again.full is None


def check_leiden(leiden: Callable[..., Any], *, n: int = 80, max_cluster_size: int = 6,
                 seed: int = 0) -> None:
    """The Leiden part (``leiden(g, *, max_cluster_size, seed) -> DataFrame``) on a random
    graph of planted groups: the documented columns and dtypes, level 0 covering every node
    once, each deeper level splitting only oversize communities of the level above (``parent``
    is the node's community there), community ids unique across levels, one final row per
    node, ``attrs["implementation"]`` named, deterministic for a seed, and a positive
    modularity of the level-0 partition."""
    import pandas as pd

    from gpurag.graph.csr import build_csr
    from gpurag.graph.leiden import modularity

    rng = np.random.default_rng(seed)
    group = np.arange(n) // 8
    src = rng.integers(0, n, 6 * n)
    dst = np.where(rng.random(6 * n) < 0.9,
                   group[src] * 8 + rng.integers(0, 8, 6 * n), rng.integers(0, n, 6 * n))
    dst = np.minimum(dst, n - 1)
    g = build_csr(src, dst, None, n)
    out = leiden(g, max_cluster_size=max_cluster_size, seed=seed)
    assert isinstance(out, pd.DataFrame)
    want = {"node": np.int32, "level": np.int16, "community": np.int32, "parent": np.int32,
            "is_final": np.bool_}
    for col, dtype in want.items():
        assert out[col].dtype == dtype, (col, out[col].dtype)
    assert isinstance(out.attrs.get("implementation"), str) and out.attrs["implementation"]
    top = out[out["level"] == 0]
    assert sorted(top["node"].tolist()) == list(range(n)) and (top["parent"] == -1).all()
    for level in sorted(set(out["level"].tolist()))[1:]:
        above = out[out["level"] == level - 1].set_index("node")["community"]
        here = out[out["level"] == level]
        np.testing.assert_array_equal(here["parent"].to_numpy(),
                                      above.loc[here["node"]].to_numpy())
        sizes = above.value_counts()
        assert (sizes.loc[here["parent"].unique()] > max_cluster_size).all()
        oversize = above[above.map(sizes) > max_cluster_size].index
        assert sorted(here["node"].tolist()) == sorted(oversize.tolist()), (
            "a level covers the nodes of the oversize communities above")
    owners = out.groupby("community")["level"].nunique()
    assert (owners == 1).all(), "community ids unique across levels"
    final = out[out["is_final"]]
    assert sorted(final["node"].tolist()) == list(range(n))
    again = leiden(g, max_cluster_size=max_cluster_size, seed=seed)
    pd.testing.assert_frame_equal(out.reset_index(drop=True), again.reset_index(drop=True))
    membership = top.sort_values("node")["community"].to_numpy()
    assert modularity(g, membership) > 0.3


def check_query_walk(walk: Any, index_path: Any, questions: list[str], *, k: int = 10,
                     options: tuple[dict, ...] = ({},)) -> None:
    """The walk segment part (the runtime's ``query_walk``, e.g.
    :class:`gpurag.backends.query_device.DeviceWalk`) over a graph index: each call returns
    host arrays (``cand`` ``(q, c)`` passage rows, -1 where padded or repeated, no row twice;
    ``score`` and ``relevance`` float, ``-inf`` exactly at -1; ``head`` None or ``(q, h)``
    rows; ``best`` ``(rows, scores)`` best first, each row among the candidates), and the
    queries it serves rank as the host stages do (``query_walk=False``): identical passage
    ids and seeds, scores to 1e-5 relative, in a batch and one by one, deterministic."""
    from gpurag.api import Index
    from gpurag.runtime import Runtime

    calls: list[tuple[Any, Any]] = []

    def recorded(retriever: Any, *args: Any, **kwargs: Any) -> Any:
        out = walk(retriever, *args, **kwargs)
        calls.append((retriever, out))
        return out

    host = Index.open(index_path, runtime=Runtime(device="cpu", query_walk=False))
    on_walk = Index.open(index_path, runtime=Runtime(device="cpu", query_walk=recorded))
    assert host.runtime.query_walk is None
    ids = lambda res: [[p.chunk_id for p in r.passages] for r in res]  # noqa: E731
    for opts in options:
        for batch in (len(questions), 1):
            want, got = [], []
            for i in range(0, len(questions), batch):
                part = questions[i:i + batch]
                n_calls = len(calls)
                want += host.query_batch(part, k=k, evidence=False, **opts)
                got += on_walk.query_batch(part, k=k, evidence=False, **opts)
                assert len(calls) > n_calls, "the query did not call the walk part"
            assert ids(got) == ids(want), (opts, batch)
            for a, b in zip(got, want, strict=True):
                np.testing.assert_allclose([p.score for p in a.passages],
                                           [p.score for p in b.passages], rtol=1e-5, atol=1e-7)
                assert [s.entity_id for s in a.seeds] == [s.entity_id for s in b.seeds]
        again = on_walk.query_batch(questions, k=k, evidence=False, **opts)
        assert ids(again) == ids(on_walk.query_batch(questions, k=k, evidence=False, **opts))
    for retriever, out in calls:
        cand, score, relevance = out.cand, out.score, out.relevance
        assert isinstance(cand, np.ndarray) and np.issubdtype(cand.dtype, np.integer)
        assert cand.ndim == 2 and score.shape == relevance.shape == cand.shape
        assert ((cand >= -1) & (cand < retriever.n_psg)).all()
        assert (np.isneginf(relevance) == (cand < 0)).all()
        assert (np.isneginf(score) == (cand < 0)).all()
        for row in cand:
            valid = row[row >= 0]
            assert len(unique_sorted(valid)) == len(valid), "a passage is a candidate twice"
        if out.head is not None:
            assert out.head.ndim == 2 and len(out.head) == len(cand)
        rows, best = out.best
        assert rows.shape == best.shape and len(rows) == len(cand)
        assert (np.diff(np.where(np.isfinite(best), best, -np.inf), axis=1) <= 0).all()
        for r_best, r_cand in zip(rows, cand, strict=True):
            assert isin_sorted(r_best[r_best >= 0], r_cand).all()
