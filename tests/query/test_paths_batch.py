"""Entity paths of a whole batch traced with array joins give, for every returned passage,
the chain the former per-passage loop gave (a seed it mentions, the lowest; else the
strongest seed -> entity relation to an entity it mentions; ties: lower seed, then entity)."""

from __future__ import annotations

import numpy as np

from gpurag.query.paths import trace


def _one_by_one(seed_ids: np.ndarray, rows: list[int], mentions, adj) -> list[tuple]:
    out = []
    for j, row in enumerate(rows):
        if row < 0:
            continue
        ents = mentions.indices[mentions.indptr[row]: mentions.indptr[row + 1]]
        direct = np.intersect1d(ents, seed_ids)
        if len(direct):
            out.append((j, int(direct[0]), -1))
            continue
        sub = adj[seed_ids][:, ents]
        r, c = sub.nonzero()
        if len(r):
            best = int(np.argmax(sub.data))
            out.append((j, int(seed_ids[r[best]]), int(ents[c[best]])))
    return out


def test_batched_paths_are_the_per_passage_ones(graph_index):
    retriever = graph_index.retriever
    mentions, adj = retriever._matrices()
    rng = np.random.default_rng(7)
    q, k = 24, 8
    rows = rng.integers(-1, retriever.n_psg, size=(q, k))
    n_seeds = rng.integers(0, 6, size=q)
    seed_q = np.repeat(np.arange(q), n_seeds)
    seed_e = rng.integers(0, retriever.n_ent, size=len(seed_q))
    pq, pj, first, second = trace(seed_q, seed_e, rows, mentions, adj)
    got = list(zip(pq.tolist(), pj.tolist(), first.tolist(), second.tolist(), strict=True))
    want = []
    for qi in range(q):
        seeds = np.unique(seed_e[seed_q == qi])
        if len(seeds):
            want += [(qi, *p) for p in _one_by_one(seeds, rows[qi].tolist(), mentions, adj)]
    assert got == want
    assert any(s < 0 for *_, s in got) and any(s >= 0 for *_, s in got)  # both kinds
