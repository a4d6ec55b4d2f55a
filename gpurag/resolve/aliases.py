"""Alias resolution: unique surface names -> canonical entities (+ soft synonym pairs).

Stages, each an array operation over all names or all candidate pairs:

1. **exact** -- names with the same :func:`~gpurag.resolve.normalize.normalize_name` key are
   one entity ("The Beatles" = "Beatles", "J. R. R. Tolkien" = "JRR Tolkien").
2. **kNN** -- the keys are embedded and each finds its ``k`` nearest keys (FAISS inner product:
   exact ``IndexFlatIP`` up to ``exact_limit`` keys, HNSW over PCA-reduced vectors beyond, with
   exact rescoring; see :func:`knn_pairs`). A pair merges
   when its cosine is ``>= merge_threshold`` and it passes the guards:

   * same numbers ("Apollo 11" / "Apollo 12", "1990" / "1991" never merge, nor become synonyms);
   * compatible entity types when labels are given (PERSON never merges with GPE...);
   * token compatibility: the content tokens of one name must all be found in the other
     (initials match words: "John F Kennedy" ~ "John Fitzgerald Kennedy"); two names that each
     have a token the other lacks merge only when that is a single spelling variant
     (character similarity ``>= token_similarity``, "centered" ~ "centred"), so "John Smith"
     and "John Smythe" stay apart;
   * a name contained in a longer one merges only if its words come in the same order there
     and -- no chaining -- all its longer candidates are one entity ("Obama" in "Barack Obama"
     and "Michelle Obama" merges with neither; a one-word name also needs every key containing
     that word to be one entity); contained names of several words ("University of London" in
     "University College London") need cosine ``>= nested_threshold``.
3. **rules** (unambiguous only) -- an all-caps acronym merges into the single entity whose
   content-word initials spell it ("NBA" -> "National Basketball Association"); with labels, a
   one-word name merges into the single multi-word PERSON entity ending in it ("Tolkien" ->
   "J. R. R. Tolkien") when no other multi-word entity ends in it.

Pairs that do not merge but have cosine ``>= synonym_threshold`` (and pass the number and type
guards) are returned as entity-level synonym pairs: soft edges for the graph.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from gpurag.embed.base import Embedder
from gpurag.resolve.normalize import FUNCTION_WORDS, normalize_name, number_signature

__all__ = ["LABEL_CLASSES", "AliasResolution", "knn_pairs", "resolve_aliases"]

log = logging.getLogger(__name__)

# entity-type classes used by the type guard; labels not listed are wildcards
LABEL_CLASSES: dict[str, str] = {
    **dict.fromkeys(["person", "per", "people"], "person"),
    **dict.fromkeys(["gpe", "loc", "fac", "location", "place", "geo", "country", "city"], "place"),
    **dict.fromkeys(["org", "organization", "organisation", "company"], "org"),
    "norp": "group",
    **dict.fromkeys(["date", "time", "year"], "time"),
    **dict.fromkeys(["cardinal", "ordinal", "quantity", "money", "percent"], "number"),
    "event": "event",
    **dict.fromkeys(["work_of_art", "work"], "work"),
    "product": "product",
    "law": "law",
    "language": "language",
}
PERSON = "person"


@dataclass
class AliasResolution:
    """Result of :func:`resolve_aliases`.

    ``entity_of_name``: int32 entity id of each input name (ids in order of first appearance).
    ``entities``: ``entity_id``, ``name`` (display name: the most frequent surface form, ties
    to the longest), ``n_aliases``, ``count`` (summed name counts), ``label`` (most frequent
    non-empty label, "" if none). ``aliases``: ``name``, ``entity_id`` for every input name.
    ``synonym_pairs``: ``a`` < ``b`` entity ids with ``score`` (cosine) for near-synonyms that
    were not merged. ``stats``: counters and stage timings. ``vectors``: per entity, the unit
    mean of its names' vectors (reuse them for entity search instead of embedding again), or
    None when no vectors were used.
    """

    entity_of_name: np.ndarray
    entities: pd.DataFrame
    aliases: pd.DataFrame
    synonym_pairs: pd.DataFrame
    stats: dict = field(default_factory=dict)
    vectors: np.ndarray | None = None


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def knn_pairs(
    vectors: np.ndarray,
    k: int,
    threshold: float,
    batch_size: int = 8192,
    exact_limit: int = 5_000,
    hnsw_m: int = 16,
    search_dim: int | None = 128,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(i, j, score)`` with ``i < j``, ``j`` among the ``k`` nearest neighbours of ``i``
    (or vice versa) by inner product and ``score >= threshold``; each pair once.

    Up to ``exact_limit`` vectors the search is exact (``IndexFlatIP``, quadratic). Beyond, an
    HNSW graph (``IndexHNSWFlat``, ``M = hnsw_m``) over the vectors PCA-reduced to
    ``search_dim`` dimensions finds the neighbours near-linearly, and their scores are then
    computed exactly at full dimension. On MiniLM name vectors this keeps >99% of the exact
    top-k pairs above 0.8, where an exact search over 300k names would be ~7e13 flops.
    """
    import faiss

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    n, dim = x.shape
    if n < 2 or k < 1:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    kk = min(k + 1, n)
    if n <= exact_limit:
        index = faiss.IndexFlatIP(dim)
        search = x
    else:
        search = x
        if search_dim and search_dim < dim:
            pca = faiss.PCAMatrix(dim, search_dim)
            sample = np.random.default_rng(0).choice(n, size=min(n, 50_000), replace=False)
            pca.train(x[np.sort(sample)])
            search = pca.apply(x)
            search /= np.maximum(np.linalg.norm(search, axis=1, keepdims=True), 1e-12)
        index = faiss.IndexHNSWFlat(search.shape[1], hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 40
        index.hnsw.efSearch = max(32, 2 * kk)
    index.add(search)
    rows, cols, vals = [], [], []
    for start in range(0, n, batch_size):
        _, nbrs = index.search(search[start : start + batch_size], kk)
        q = np.repeat(np.arange(start, start + len(nbrs)), kk)
        nb = nbrs.ravel()
        ok = (nb >= 0) & (nb != q)
        q, nb = q[ok], nb[ok]
        sc = np.einsum("ij,ij->i", x[q], x[nb])  # exact scores at full dimension
        keep = sc >= threshold
        rows.append(q[keep])
        cols.append(nb[keep])
        vals.append(sc[keep])
    i, j, s = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    a, b = np.minimum(i, j), np.maximum(i, j)
    frame = pd.DataFrame({"a": a, "b": b, "s": s}).drop_duplicates(["a", "b"])
    return (
        frame["a"].to_numpy(np.int64),
        frame["b"].to_numpy(np.int64),
        frame["s"].to_numpy(np.float32),
    )


def _string_similarity(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Indel (LCS) similarity in [0, 1] of aligned string pairs."""
    if len(a) == 0:
        return np.zeros(0, dtype=np.float32)
    try:
        from rapidfuzz.distance import Indel
        from rapidfuzz.process import cpdist
    except ImportError:  # pragma: no cover - rapidfuzz is a dependency; tiny fallback
        from difflib import SequenceMatcher

        return np.asarray(
            [SequenceMatcher(None, x, y).ratio() for x, y in zip(a, b, strict=True)],
            dtype=np.float32,
        )
    return cpdist(list(a), list(b), scorer=Indel.normalized_similarity).astype(np.float32)


def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected-component id of each of ``n`` nodes joined by the edges ``(a, b)``."""
    graph = sp.coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n)).tocsr()
    return connected_components(graph, directed=False)[1]


def _rowsum(m: sp.csr_matrix) -> np.ndarray:
    return np.asarray(m.sum(axis=1)).ravel()


def _binary_matrix(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    m = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=shape)
    m.data[:] = 1.0  # duplicates collapse to a set
    return m


@dataclass
class _Tokens:
    """Per normalized key: content-token sets as sparse rows, plus vectorized pair tests.

    Words (``full``) are tokens of 2+ characters or digits; single letters are initials, which
    match an identical initial or a word with that first letter on the other side.
    """

    full: sp.csr_matrix  # key x word, 1 where the key has the word
    position: sp.csr_matrix  # key x word, 1-based position of the word among the key's words
    initials: sp.csr_matrix  # key x letter, single-letter tokens
    first_letter: sp.csr_matrix  # word x letter
    vocab: np.ndarray  # word strings (columns of ``full``)
    n_full: np.ndarray
    n_init: np.ndarray
    last: np.ndarray  # last content token ("" if none)
    acronym: np.ndarray  # first letters of the content tokens when 2+ of them, else ""

    @classmethod
    def build(cls, keys: Sequence[str]) -> _Tokens:
        n = len(keys)
        toks = pd.Series(list(keys), dtype=object).str.split().explode()
        toks = toks[toks.notna() & ~toks.isin(FUNCTION_WORDS)]
        owner = toks.index.to_numpy(np.int64)
        words = toks.to_numpy(dtype=object)
        first = toks.str[:1].to_numpy(dtype=object)
        single = ((toks.str.len() == 1) & toks.str.isalpha()).to_numpy(dtype=bool)
        wid, vocab = pd.factorize(words)
        lid, alphabet = pd.factorize(first)
        frame = pd.DataFrame({"owner": owner, "word": words, "first": first, "wid": wid})
        whole = frame[~single].drop_duplicates(["owner", "wid"])
        pos = whole.groupby("owner").cumcount().to_numpy() + 1
        shape = (n, len(vocab))
        full = _binary_matrix(whole["owner"].to_numpy(), whole["wid"].to_numpy(), shape)
        position = sp.csr_matrix(
            (pos.astype(np.float32), (whole["owner"].to_numpy(), whole["wid"].to_numpy())),
            shape=shape,
        )
        initials = _binary_matrix(owner[single], lid[single], (n, len(alphabet)))
        word_letter = pd.DataFrame({"w": wid, "l": lid}).drop_duplicates("w")
        first_letter = _binary_matrix(
            word_letter["w"].to_numpy(), word_letter["l"].to_numpy(), (len(vocab), len(alphabet))
        )
        grouped = frame.groupby("owner", sort=True)
        last = np.full(n, "", dtype=object)
        acronym = np.full(n, "", dtype=object)
        if len(frame):
            tail = grouped["word"].last()
            last[tail.index.to_numpy()] = tail.to_numpy()
            initials_str = grouped["first"].agg("".join)
            multi = grouped.size().to_numpy() >= 2
            acronym[initials_str.index.to_numpy()[multi]] = initials_str.to_numpy()[multi]
        return cls(
            full=full,
            position=position,
            initials=initials,
            first_letter=first_letter,
            vocab=np.asarray(vocab, dtype=object),
            n_full=_rowsum(full).astype(np.int64),
            n_init=_rowsum(initials).astype(np.int64),
            last=last,
            acronym=acronym,
        )

    def relation(
        self, i: np.ndarray, j: np.ndarray, token_similarity: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For pairs ``(i, j)``: ``i_in_j`` (every token of i is matched in j), ``j_in_i``, and
        ``variant`` (each side has exactly one unmatched word and they are spelling variants).
        """
        fi, fj = self.full[i], self.full[j]
        common = fi.multiply(fj).tocsr()
        inter = _rowsum(common).astype(np.int64)
        free_i, free_j = self.n_full[i] - inter, self.n_full[j] - inter  # unmatched words
        ii, ij = self.initials[i], self.initials[j]
        # first letters of each side's unmatched words
        free_letters_i = ((fi - common) @ self.first_letter).astype(bool).astype(np.float32)
        free_letters_j = ((fj - common) @ self.first_letter).astype(bool).astype(np.float32)
        # words of one side covered by initials of the other ("fitzgerald" by "f")
        cover_i = _rowsum(ij.multiply(free_letters_i)).astype(np.int64)
        cover_j = _rowsum(ii.multiply(free_letters_j)).astype(np.int64)
        # initials matched by an identical initial or an unmatched word of the other side
        hit_i = _rowsum(ii.multiply((ij + free_letters_j).astype(bool))).astype(np.int64)
        hit_j = _rowsum(ij.multiply((ii + free_letters_i).astype(bool))).astype(np.int64)
        miss_i = np.maximum(free_i - cover_i, 0) + (self.n_init[i] - hit_i)
        miss_j = np.maximum(free_j - cover_j, 0) + (self.n_init[j] - hit_j)
        variant = np.zeros(len(i), dtype=bool)
        cand = np.flatnonzero((free_i == 1) & (free_j == 1) & (miss_i == 1) & (miss_j == 1))
        if len(cand):
            di = (fi[cand] - common[cand]).tocsr()
            dj = (fj[cand] - common[cand]).tocsr()
            di.eliminate_zeros()
            dj.eliminate_zeros()
            di.sort_indices()
            dj.sort_indices()
            wi = self.vocab[di.indices]  # exactly one per row
            wj = self.vocab[dj.indices]
            si, sj = pd.Series(wi, dtype=object), pd.Series(wj, dtype=object)
            # long alphabetic words only: "apobec3a" / "apobec3b" are different genes
            long_enough = ((si.str.len() >= 6) & si.str.isalpha()).to_numpy() & (
                (sj.str.len() >= 6) & sj.str.isalpha()
            ).to_numpy()
            sim = _string_similarity(wi.tolist(), wj.tolist())
            variant[cand] = long_enough & (sim >= token_similarity)
        return miss_i == 0, miss_j == 0, variant

    def same_order(self, short: np.ndarray, long: np.ndarray) -> np.ndarray:
        """Whether the words ``short`` shares with ``long`` come in the same order in both
        ("university of pennsylvania" is not inside "pennsylvania state university")."""
        shared = self.full[short].multiply(self.full[long]).tocsr()
        pos_s = shared.multiply(self.position[short]).tocsr()
        pos_l = shared.multiply(self.position[long]).tocsr()
        for m in (pos_s, pos_l):
            m.sort_indices()
        row = np.repeat(np.arange(len(short)), np.diff(pos_s.indptr))
        order = np.lexsort((pos_s.data, row))
        ranked_l, ranked_row = pos_l.data[order], row[order]
        backwards = (np.diff(ranked_l) <= 0) & (ranked_row[1:] == ranked_row[:-1])
        bad = np.bincount(ranked_row[1:][backwards], minlength=len(short))
        return bad == 0


def _label_classes(labels: Sequence[str] | None, n: int) -> tuple[np.ndarray, int]:
    """Type class id per name (-1 = wildcard) and the id of the person class (-1 if absent)."""
    if labels is None:
        return np.full(n, -1, dtype=np.int64), -1
    if len(labels) != n:
        raise ValueError(f"labels has {len(labels)} entries for {n} names")
    classes = pd.Series(list(labels), dtype=object).fillna("").astype(str).str.lower()
    codes, vocab = pd.factorize(classes.map(LABEL_CLASSES), use_na_sentinel=True)
    person = np.flatnonzero(np.asarray(vocab, dtype=object) == PERSON)
    return codes.astype(np.int64), int(person[0]) if len(person) else -1


def _group_mode(group: np.ndarray, value: np.ndarray, weight: np.ndarray, n_groups: int):
    """Most weighted non-negative ``value`` per group (-1 when none)."""
    out = np.full(n_groups, -1, dtype=np.int64)
    ok = value >= 0
    if ok.any():
        frame = pd.DataFrame({"g": group[ok], "v": value[ok], "w": weight[ok]})
        summed = frame.groupby(["g", "v"], sort=False)["w"].sum().reset_index()
        best = summed.sort_values(["g", "w", "v"], ascending=[True, False, True])
        best = best.drop_duplicates("g")
        out[best["g"].to_numpy()] = best["v"].to_numpy()
    return out


def _unique_target(source: np.ndarray, target: np.ndarray, comp: np.ndarray) -> np.ndarray:
    """Mask of candidate pairs ``(source, target)`` whose source entity (component) has
    candidates in exactly one other entity: an ambiguous short name merges with none."""
    sc, tc = comp[source], comp[target]
    frame = pd.DataFrame({"sc": sc, "tc": tc})[sc != tc]
    n_targets = np.zeros(len(source), dtype=np.int64)
    n_targets[frame.index.to_numpy()] = frame.groupby("sc")["tc"].transform("nunique").to_numpy()
    return n_targets == 1


def _word_entity_counts(full: sp.csr_matrix, comp: np.ndarray) -> np.ndarray:
    """For each token: the number of distinct entities (components) whose keys contain it."""
    coo = full.tocoo()
    frame = pd.DataFrame({"tok": coo.col, "comp": comp[coo.row]}).drop_duplicates()
    return np.bincount(frame["tok"].to_numpy(), minlength=full.shape[1])


# ---------------------------------------------------------------------------------------------
# main entry point
# ---------------------------------------------------------------------------------------------


def resolve_aliases(
    names: Sequence[str],
    embedder: Embedder | None = None,
    merge_threshold: float = 0.9,
    synonym_threshold: float = 0.8,
    k: int = 10,
    *,
    counts: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[str] | None = None,
    embeddings: np.ndarray | None = None,
    batch_size: int = 256,
    exact_limit: int = 5_000,
    nested_threshold: float = 0.95,
    token_similarity: float = 0.85,
    acronyms: bool = True,
    acronym_similarity: float = 0.5,
    surnames: bool = True,
) -> AliasResolution:
    """Group unique surface ``names`` into entities (see the module docstring).

    ``embedder`` embeds the normalized keys; alternatively pass ``embeddings`` (one unit row per
    name, e.g. vectors the index computes anyway; rows of one key are averaged). With neither,
    only the exact and rule stages run. ``counts`` (mentions per name) pick display names and
    weigh labels; ``labels`` (entity type per name, e.g. spaCy's) enable the type guard and
    the surname rule.

    Thresholds are cosines of the name embeddings: ``merge_threshold`` for merging,
    ``nested_threshold`` for merging a several-word name into a longer one containing it,
    ``synonym_threshold`` for synonym pairs, ``acronym_similarity`` as the floor for acronym
    merges; ``token_similarity`` is the character (Indel) similarity that makes two differing
    words spelling variants; ``k`` neighbours per key; ``exact_limit`` keys switch the search
    from exact to HNSW.
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    names = [str(x) for x in names]
    n = len(names)
    cnt = np.ones(n, dtype=np.float64) if counts is None else np.asarray(counts, np.float64)
    if len(cnt) != n:
        raise ValueError(f"counts has {len(cnt)} entries for {n} names")
    if embeddings is not None and len(embeddings) != n:
        raise ValueError(f"embeddings has {len(embeddings)} rows for {n} names")

    if n == 0:
        return AliasResolution(
            np.zeros(0, dtype=np.int32),
            pd.DataFrame({"entity_id": np.zeros(0, np.int32), "name": [], "n_aliases": 0,
                          "count": 0.0, "label": []}),
            pd.DataFrame({"name": [], "entity_id": np.zeros(0, np.int32)}),
            pd.DataFrame({"a": np.zeros(0, np.int32), "b": np.zeros(0, np.int32),
                          "score": np.zeros(0, np.float32)}),
            {"names": 0, "normalized": 0, "entities": 0, "merged": 0},
        )
    keys = normalize_name(names)
    gid, uniq = pd.factorize(pd.Series(keys, dtype=object))
    gid = gid.astype(np.int64)
    uniq = [str(u) for u in uniq]
    u = len(uniq)
    timings["normalize_s"] = time.perf_counter() - t0

    t = time.perf_counter()
    name_class, person = _label_classes(labels, n)
    lclass = _group_mode(gid, name_class, cnt, u)
    nsig = pd.factorize(pd.Series(number_signature(uniq), dtype=object))[0]
    tokens = _Tokens.build(uniq)
    timings["features_s"] = time.perf_counter() - t

    # ---- kNN candidates -------------------------------------------------------------------
    t = time.perf_counter()
    vectors: np.ndarray | None = None
    if embeddings is not None:
        emb = np.asarray(embeddings, dtype=np.float32)
        summed = np.zeros((u, emb.shape[1]), dtype=np.float32)
        np.add.at(summed, gid, emb)
        vectors = summed / np.maximum(np.linalg.norm(summed, axis=1, keepdims=True), 1e-12)
    elif embedder is not None and u:
        vectors = np.asarray(embedder.encode(uniq, batch_size=batch_size), dtype=np.float32)
    timings["embed_s"] = time.perf_counter() - t

    t = time.perf_counter()
    low = min(merge_threshold, synonym_threshold)
    if vectors is not None:
        pi, pj, ps = knn_pairs(vectors, k, low, exact_limit=exact_limit)
    else:
        pi = pj = np.zeros(0, np.int64)
        ps = np.zeros(0, np.float32)
    timings["knn_s"] = time.perf_counter() - t

    t = time.perf_counter()
    num_ok = nsig[pi] == nsig[pj]
    label_ok = (lclass[pi] < 0) | (lclass[pj] < 0) | (lclass[pi] == lclass[pj])
    i_in_j, j_in_i, variant = tokens.relation(pi, pj, token_similarity)
    has_tokens = (tokens.n_full[pi] + tokens.n_init[pi] > 0) & (
        tokens.n_full[pj] + tokens.n_init[pj] > 0
    )
    strong = (ps >= merge_threshold) & num_ok & label_ok & has_tokens
    same = strong & ((i_in_j & j_in_i) | variant)
    # nested: one name's tokens all inside the other's ("Obama" in "Barack Obama"); a short
    # name merges only when every longer candidate near it (cosine >= the lower threshold) and,
    # for one-word names, every key containing that word, is one entity
    contained = (ps >= low) & num_ok & label_ok & has_tokens & (i_in_j ^ j_in_i) & ~variant
    ordered = np.zeros(len(pi), dtype=bool)
    idx = np.flatnonzero(contained)
    ordered[idx] = tokens.same_order(np.where(i_in_j, pi, pj)[idx], np.where(i_in_j, pj, pi)[idx])
    contained &= ordered
    # several shared words inside a longer name often name a part or a sibling ("University
    # of London" / "University College London"): those need the stricter nested_threshold
    short_words = tokens.n_full[np.where(i_in_j, pi, pj)] + tokens.n_init[np.where(i_in_j, pi, pj)]
    nested = contained & strong & ((short_words <= 1) | (ps >= nested_threshold))
    comp = _components(u, pi[same], pj[same])
    short = np.where(i_in_j, pi, pj)[contained]
    long_ = np.where(i_in_j, pj, pi)[contained]
    accept = _unique_target(short, long_, comp) & nested[contained]
    one_word = (tokens.n_full[short] == 1) & (tokens.n_init[short] == 0)
    word = tokens.full.indices[tokens.full.indptr[short[one_word]]]
    accept[np.flatnonzero(one_word)[_word_entity_counts(tokens.full, comp)[word] > 2]] = False
    ks, kl = short[accept], long_[accept]
    edges_a = [pi[same], ks]
    edges_b = [pj[same], kl]
    comp = _components(u, np.concatenate(edges_a), np.concatenate(edges_b))
    timings["pairs_s"] = time.perf_counter() - t

    # ---- unambiguous lexical rules ------------------------------------------------------
    t = time.perf_counter()
    n_words = tokens.n_full + tokens.n_init
    uniq_arr = np.asarray(uniq, dtype=object)
    key_series = pd.Series(uniq_arr, dtype=object)
    key_len = key_series.str.len().to_numpy(dtype=np.int64)
    key_alpha = key_series.str.isalpha().to_numpy(dtype=bool)
    n_acr = n_sur = 0
    if acronyms and u:
        caps = pd.Series(names).str.replace(".", "", regex=False)
        is_caps = (caps.str.isupper() & ~caps.str.contains(" ", regex=False)).to_numpy(bool)
        acr_group = np.zeros(u, dtype=bool)
        acr_group[gid[is_caps]] = True
        acr_group &= (n_words == 1) & (key_len >= 2) & (key_len <= 6) & key_alpha
        src, dst = _rule_candidates(uniq_arr, acr_group, tokens.acronym, n_words >= 2)
        ok = _unique_target(src, dst, comp)
        ok &= (lclass[src] < 0) | (lclass[dst] < 0) | (lclass[src] == lclass[dst])
        if vectors is not None:  # "TV" is not "Teen Vogue": the meaning must agree a little
            ok &= (vectors[src] * vectors[dst]).sum(axis=1) >= acronym_similarity
        src, dst = src[ok], dst[ok]
        n_acr = len(src)
        edges_a.append(src)
        edges_b.append(dst)
    if surnames and labels is not None and u:
        single = (tokens.n_full == 1) & (tokens.n_init == 0)
        single &= (lclass < 0) | (lclass == person)
        single &= (key_len >= 3) & key_alpha
        src, dst = _rule_candidates(uniq_arr, single, tokens.last, n_words >= 2)
        keep = _unique_target(src, dst, comp)
        keep &= (lclass[dst] == person) & (person >= 0) & (nsig[src] == nsig[dst])
        src, dst = src[keep], dst[keep]
        n_sur = len(src)
        edges_a.append(src)
        edges_b.append(dst)
    comp = _components(u, np.concatenate(edges_a), np.concatenate(edges_b))
    timings["rules_s"] = time.perf_counter() - t

    # ---- entity ids, tables -------------------------------------------------------------
    t = time.perf_counter()
    comp_of_name = comp[gid]
    _, first_idx, inverse = np.unique(comp_of_name, return_index=True, return_inverse=True)
    rank = np.empty(len(first_idx), dtype=np.int64)
    rank[np.argsort(first_idx, kind="stable")] = np.arange(len(first_idx))
    entity_of_name = rank[inverse].astype(np.int32)
    entity_of_key = np.empty(u, dtype=np.int64)
    entity_of_key[gid] = entity_of_name
    n_entities = len(first_idx)

    lengths = np.fromiter((len(s) for s in names), dtype=np.int64, count=n)
    order = np.lexsort((np.arange(n), -lengths, -cnt, entity_of_name))
    first_of = order[np.r_[True, entity_of_name[order][1:] != entity_of_name[order][:-1]]]
    label_arr = (
        np.full(n, "", dtype=object)
        if labels is None
        else pd.Series(list(labels), dtype=object).fillna("").astype(str).to_numpy(dtype=object)
    )
    label_id, label_vocab = pd.factorize(pd.Series(label_arr).replace("", np.nan))
    best_label = _group_mode(entity_of_name.astype(np.int64), label_id, cnt, n_entities)
    label_vocab = np.asarray([*label_vocab, ""], dtype=object)
    entities = pd.DataFrame(
        {
            "entity_id": np.arange(n_entities, dtype=np.int32),
            "name": np.asarray(names, dtype=object)[first_of],
            "n_aliases": np.bincount(entity_of_name, minlength=n_entities).astype(np.int32),
            "count": np.bincount(entity_of_name, weights=cnt, minlength=n_entities),
            "label": label_vocab[best_label],
        }
    )
    aliases = pd.DataFrame({"name": names, "entity_id": entity_of_name})

    ea, eb = entity_of_key[pi], entity_of_key[pj]
    compatible = (i_in_j & j_in_i) | variant | contained
    syn = (ea != eb) & (ps >= synonym_threshold) & num_ok & label_ok & compatible
    synonyms = pd.DataFrame(
        {"a": np.minimum(ea, eb)[syn], "b": np.maximum(ea, eb)[syn], "score": ps[syn]}
    )
    synonyms = (
        synonyms.sort_values("score", ascending=False)
        .drop_duplicates(["a", "b"])
        .sort_values(["a", "b"])
        .reset_index(drop=True)
        .astype({"a": np.int32, "b": np.int32, "score": np.float32})
    )
    timings["tables_s"] = time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - t0

    stats = {
        "names": n,
        "normalized": u,
        "entities": n_entities,
        "merged": n - n_entities,
        "merged_exact": n - u,
        "knn_pairs": len(pi),
        "merge_pairs_same": int(same.sum()),
        "merge_pairs_nested": len(ks),
        "nested_ambiguous": int(nested.sum() - len(ks)),
        "blocked_numbers": int(((ps >= merge_threshold) & ~num_ok).sum()),
        "blocked_labels": int(((ps >= merge_threshold) & num_ok & ~label_ok).sum()),
        "blocked_tokens": int((strong & ~same & ~nested).sum()),
        "acronym_merges": n_acr,
        "surname_merges": n_sur,
        "synonym_pairs": len(synonyms),
        **{key: round(val, 3) for key, val in timings.items()},
    }
    entity_vectors = None
    if vectors is not None:
        entity_vectors = np.zeros((n_entities, vectors.shape[1]), dtype=np.float32)
        np.add.at(entity_vectors, entity_of_key, vectors)
        entity_vectors /= np.maximum(np.linalg.norm(entity_vectors, axis=1, keepdims=True), 1e-12)
    log.info("alias resolution: %s", stats)
    return AliasResolution(entity_of_name, entities, aliases, synonyms, stats, entity_vectors)


def _rule_candidates(
    keys: np.ndarray, source: np.ndarray, target_key: np.ndarray, target_ok: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (s, t): ``source[s]`` and ``target_ok[t]`` and ``keys[s] == target_key[t]``."""
    src = pd.DataFrame({"s": np.flatnonzero(source), "key": keys[source]})
    tgt_idx = np.flatnonzero(target_ok & (target_key != ""))
    tgt = pd.DataFrame({"t": tgt_idx, "key": target_key[tgt_idx]})
    pairs = src.merge(tgt, on="key", how="inner")
    pairs = pairs[pairs["s"] != pairs["t"]]
    return pairs["s"].to_numpy(np.int64), pairs["t"].to_numpy(np.int64)
