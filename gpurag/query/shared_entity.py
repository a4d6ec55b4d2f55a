"""Shared-entity pages: the hop a chain takes through an entity that has no page of its own.

In a chain ("what kind of university did the author of Alexander and the Terrible... attend?")
the next hop's passage is often not the page of an entity the found passage mentions, but
another page that mentions the same entity: the author's page says she studied at Rutgers,
New Jersey, and the "New Jersey Agricultural Experiment Station" page is about Rutgers too.
No title names the bridge, so the bridge pages (:mod:`gpurag.query.second_hop`) cannot reach
it, and the walk spreads the entity's mass evenly over every passage that mentions it.

Here the top ``sources`` passages of the ranking point to the other passages that mention an
entity they mention, less the entities the question names (the walk started from those) and
entities mentioned by more than ``max_df`` passages (a category, not a bridge). A page scores
the number of distinct such entities it shares with the question's sources (an entity counts
once however many sources mention it) times ``exp(cos(question, page) / temperature)``, as
bridge pages do; the ranking is fused by reciprocal rank below the first
documents, so the head stays where it is. Why and how much: docs/RECALL.md "Shared-entity
pages".
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from gpurag.arrays import isin_sorted
from gpurag.query.sparse_rows import cosine_ranking, csr_positions, reached


def entity_pages(mentions: sp.csr_array) -> tuple[sp.csr_array, sp.csr_array, np.ndarray]:
    """From the ``(n_psg, n_ent)`` mention weights: the 0/1 passage -> entity CSR (float32), its
    transpose (entity -> the passages that mention it) and each entity's passage count (its
    document frequency)."""
    ment = sp.csr_array(mentions, copy=True)
    ment.eliminate_zeros()  # in the weights' own dtype: what counts as a mention stays
    ment.sum_duplicates()
    ment = sp.csr_array((np.ones(ment.nnz, np.float32), ment.indices, ment.indptr),
                        shape=ment.shape)
    by_entity = sp.csr_array(ment.T)
    by_entity.sort_indices()
    return ment, by_entity, np.diff(by_entity.indptr).astype(np.int64)


def shared_entity_ranking(top: np.ndarray, mentions: sp.csr_array, by_entity: sp.csr_array,
                          df: np.ndarray, named: tuple[np.ndarray, np.ndarray],
                          qvecs: np.ndarray, passage_emb, *, max_df: int, temperature: float,
                          depth: int) -> np.ndarray:
    """Per question, the passages sharing an entity with its ``top`` rows (``(q, m)``, -1
    padded), best first, ``(q, depth)`` -1 padded (see the module docstring). ``mentions``,
    ``by_entity``, ``df``: :func:`entity_pages`; ``named``: the (question, entity) pairs the
    questions name."""
    q = top.shape[0]
    n_ent, n_psg = by_entity.shape
    qr, ent, _ = reached(top, mentions)
    keep = (df[ent] >= 2) & (df[ent] <= max_df)
    if len(named[0]):
        keep &= isin_sorted(qr * n_ent + ent, named[0] * n_ent + named[1], invert=True)
    qr, ent = qr[keep], ent[keep]
    lo = by_entity.indptr[ent].astype(np.int64)
    owner, at = csr_positions(np.arange(len(qr)), lo, by_entity.indptr[ent + 1] - lo)
    uniq, inv = np.unique(qr[owner] * n_psg + by_entity.indices[at].astype(np.int64),
                          return_inverse=True)
    value = np.bincount(inv, minlength=len(uniq)).astype(np.float64)
    r, c = np.nonzero(top >= 0)
    other = isin_sorted(uniq, r * n_psg + top[r, c], invert=True)  # not a source itself
    uniq, value = uniq[other], value[other]
    if not len(uniq):
        return np.full((q, depth), -1, np.int64)
    return cosine_ranking(uniq // n_psg, uniq % n_psg, value, qvecs, passage_emb, temperature,
                          q, depth)
