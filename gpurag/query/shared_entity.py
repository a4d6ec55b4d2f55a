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
import pandas as pd
import scipy.sparse as sp

from gpurag.arrays import isin_sorted, unique_sorted
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


def prefix_pages(keys: list[str], entity: np.ndarray, title_keys: list[str],
                 title_entity: np.ndarray, n_ent: int, max_pages: int) -> sp.csr_array:
    """``(n_ent, n_psg)`` 0/1: each entity -> the pages whose title key (``title_keys``, without
    disambiguation and qualifier: :func:`gpurag.query.second_hop.title_keys`) is a proper
    word-prefix of one of its names' keys (``keys``, ``entity``: the alias table), the
    extraction spans that ran past a page's name ("Trent Reznor of Nine Inch Nails" -> "Trent
    Reznor", "Sulli Choi" -> "Sulli"), less the entity's own pages (``title_entity``: each
    page's title entity, -1 when none). A key of fewer than 3 characters, or one that titles
    more than ``max_pages`` pages (a category), links nowhere."""
    n_psg = len(title_keys)
    tkeys = pd.DataFrame({"key": title_keys, "page": np.arange(n_psg)})
    tkeys = tkeys[tkeys["key"].str.len() >= 3]
    tkeys = tkeys[tkeys.groupby("key")["page"].transform("size") <= max_pages]
    names = pd.DataFrame({"key": pd.Series(keys, dtype=object), "entity": entity})
    words = names["key"].str.split(" ")
    multi = words.str.len() >= 2
    names, words = names[multi], words[multi]
    # every proper word-prefix of each multi-word key, one row each
    n = words.str.len().to_numpy() - 1
    rep = names.loc[names.index.repeat(n)].reset_index(drop=True)
    upto = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + 1
    flat = words.loc[words.index.repeat(n)].to_numpy()
    rep["key"] = [" ".join(w[:j]) for w, j in zip(flat, upto, strict=True)]
    pairs = rep.merge(tkeys, on="key")
    pair = unique_sorted(pairs["entity"].to_numpy(np.int64) * max(n_psg, 1)
                         + pairs["page"].to_numpy(np.int64))
    e, p = pair // max(n_psg, 1), pair % max(n_psg, 1)
    other = title_entity[p] != e
    e, p = e[other], p[other]
    return sp.csr_array((np.ones(len(e), np.float32), (e, p)), shape=(n_ent, n_psg))


def shared_entity_ranking(top: np.ndarray, mentions: sp.csr_array, by_entity: sp.csr_array,
                          df: np.ndarray, named: tuple[np.ndarray, np.ndarray],
                          qvecs: np.ndarray, passage_emb, *, max_df: int, temperature: float,
                          depth: int, prefix: sp.csr_array | None = None,
                          prefix_weight: float = 0.0
                          ) -> np.ndarray:
    """Per question, the passages sharing an entity with its ``top`` rows (``(q, m)``, -1
    padded), best first, ``(q, depth)`` -1 padded (see the module docstring). ``mentions``,
    ``by_entity``, ``df``: :func:`entity_pages`; ``named``: the (question, entity) pairs the
    questions name, which are skipped. With ``prefix`` (:func:`prefix_pages`), the pages a
    mentioned entity's name runs past also count, ``prefix_weight`` each."""
    q = top.shape[0]
    n_ent, n_psg = by_entity.shape
    qr, ent, _ = reached(top, mentions)
    is_named = (isin_sorted(qr * n_ent + ent, named[0] * n_ent + named[1]) if len(named[0])
                else np.zeros(len(qr), bool))
    keep = (df[ent] >= 2) & (df[ent] <= max_df) & ~is_named
    sq, sent = qr[keep], ent[keep]
    lo = by_entity.indptr[sent].astype(np.int64)
    owner, at = csr_positions(np.arange(len(sq)), lo, by_entity.indptr[sent + 1] - lo)
    keys = [sq[owner] * n_psg + by_entity.indices[at].astype(np.int64)]
    gains = [np.ones(len(owner))]
    if prefix is not None and prefix_weight > 0:
        pq, pe = qr[~is_named], ent[~is_named]
        lo = prefix.indptr[pe].astype(np.int64)
        owner, at = csr_positions(np.arange(len(pq)), lo, prefix.indptr[pe + 1] - lo)
        keys.append(pq[owner] * n_psg + prefix.indices[at].astype(np.int64))
        gains.append(np.full(len(owner), prefix_weight))
    uniq, inv = np.unique(np.concatenate(keys), return_inverse=True)
    value = np.bincount(inv, weights=np.concatenate(gains), minlength=len(uniq))
    r, c = np.nonzero(top >= 0)
    other = isin_sorted(uniq, r * n_psg + top[r, c], invert=True)  # not a source itself
    uniq, value = uniq[other], value[other]
    if not len(uniq):
        return np.full((q, depth), -1, np.int64)
    return cosine_ranking(uniq // n_psg, uniq % n_psg, value, qvecs, passage_emb, temperature,
                          q, depth)
