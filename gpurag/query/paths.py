"""Entity paths for the returned passages of a batch, traced with array operations.

For each returned passage row of a question: the seed entity it mentions (the lowest id among
the question's seeds it mentions), else the strongest relation ``seed -> entity`` from one of
the question's seeds to an entity the passage mentions (ties: lower seed, then lower entity),
else none. Only the returned rows are traced.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from gpurag.arrays import isin_sorted, unique_sorted
from gpurag.query.results import EntityPath
from gpurag.query.sparse_rows import csr_positions, csr_rows


def trace(seed_q: np.ndarray, seed_e: np.ndarray, rows: np.ndarray, mentions: sp.csr_array,
          adj: sp.csr_array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Paths of the rows ``rows`` (``(q, k)`` passage rows, -1 padded) from the seeds
    (``seed_q``, ``seed_e``: each question's seed entities, any order, repeats allowed);
    ``mentions``: passage -> entity, ``adj``: entity -> entity weights (CSR, sorted indices).

    Returns ``(question, rank, first, second)`` per path, by question then rank: ``second``
    is -1 for a passage that mentions the seed ``first``, else the entity related to the seed
    ``first`` that the passage mentions."""
    q, _ = rows.shape
    n_ent = mentions.shape[1]
    seed_key = unique_sorted(np.asarray(seed_q, np.int64) * n_ent + np.asarray(seed_e, np.int64))
    has_seed = np.zeros(q, bool)
    has_seed[seed_key // n_ent] = True
    pq, pj = np.nonzero((rows >= 0) & has_seed[:, None])
    prow = rows[pq, pj]
    pair = np.arange(len(pq))
    # slices of the rows asked (no copy or diff of the whole pointer: a per-call cost of the
    # index's size)
    m_lo = mentions.indptr[prow].astype(np.int64)
    owner, ent = csr_rows(pair, m_lo, mentions.indptr[prow + 1] - m_lo, mentions.indices)
    ent = ent.astype(np.int64)
    # a seed the passage mentions: the first (lowest) of its mentions that is a seed
    hit = isin_sorted(pq[owner] * n_ent + ent, seed_key)
    direct_pair, first_hit = np.unique(owner[hit], return_index=True)
    direct_ent = ent[hit][first_hit]
    # otherwise the strongest seed -> mentioned entity relation
    other = np.ones(len(pq), bool)
    other[direct_pair] = False
    keep = other[owner]
    w_pair, w_q, w_e = owner[keep], pq[owner[keep]], ent[keep]
    sq = seed_key // n_ent
    se = seed_key % n_ent
    needed = np.zeros(q, bool)
    needed[w_q] = True
    sq, se = sq[needed[sq]], se[needed[sq]]
    a_lo = adj.indptr[se].astype(np.int64)
    s_owner, at = csr_positions(np.arange(len(se)), a_lo, adj.indptr[se + 1] - a_lo)
    nb, w = adj.indices[at], adj.data[at]
    # join (question, mentioned entity) with (question, seed's neighbour) on both
    l_key = sq[s_owner] * n_ent + nb.astype(np.int64)
    by_key = np.argsort(l_key, kind="stable")
    l_sorted = l_key[by_key]
    w_key = w_q * n_ent + w_e
    lo = np.searchsorted(l_sorted, w_key, "left")
    hi = np.searchsorted(l_sorted, w_key, "right")
    j_owner, j_link = csr_rows(np.arange(len(w_key)), lo, hi - lo, by_key)
    j_pair = w_pair[j_owner]
    j_s, j_e = se[s_owner[j_link]], w_e[j_owner]
    j_w = np.asarray(w, np.float64)[j_link]
    order = np.lexsort((j_e, j_s, -j_w, j_pair))
    rel_pair, first_rel = np.unique(j_pair[order], return_index=True)
    rel_s, rel_e = j_s[order][first_rel], j_e[order][first_rel]
    path_pair = np.concatenate([direct_pair, rel_pair])
    first = np.concatenate([direct_ent, rel_s])
    second = np.concatenate([np.full(len(direct_pair), -1, np.int64), rel_e])
    order = np.argsort(path_pair, kind="stable")
    path_pair = path_pair[order]
    return pq[path_pair], pj[path_pair], first[order], second[order]


def path_lists(seed_q: np.ndarray, seed_e: np.ndarray, rows: np.ndarray,
               mentions: sp.csr_array, adj: sp.csr_array, names: np.ndarray,
               chunk_ids: np.ndarray) -> list[list[EntityPath]]:
    """Per question, for each of its returned passages (``rows``, ``(q, k)``, -1 padded), a
    chain seed entity [-> linked entity] that reaches it (:func:`trace`), as result objects
    (``names``: entity names, ``chunk_ids``: passage ids)."""
    pq, pj, first, second = trace(seed_q, seed_e, rows, mentions, adj)
    out: list[list[EntityPath]] = [[] for _ in range(rows.shape[0])]
    ids = chunk_ids[rows[pq, pj]].tolist()
    a_names = names[first].tolist()
    b_names = names[np.maximum(second, 0)].tolist() if len(second) else []
    for qi, cid, a, b, linked in zip(pq.tolist(), ids, a_names, b_names,
                                     (second >= 0).tolist(), strict=True):
        if linked:
            out[qi].append(EntityPath(str(cid), [str(a), str(b)], ["related"]))
        else:
            out[qi].append(EntityPath(str(cid), [str(a)], []))
    return out
