"""The indexed read path of a large memory: every view from inverted lists, none from a scan.

From ``MemoryConfig.scale_from`` traces on, :meth:`gpurag.memory.Memory.views` reads a
:class:`ScaleIndex` that is kept up to date by appending (O(new traces) per search that
follows an append) instead of the whole-memory CSR, BM25 and FAISS rebuilds of the small path:

- **dense**: a FAISS IVF index (8-bit scalar codes of the vectors themselves, ``nlist`` about
  ``sqrt(n)``) picks the candidates; their cosine is then computed exactly from the float32
  vectors, as on the small path;
- **lexical**: BM25 (Lucene variant, bm25s' tokenizer, k1 1.5, b 0.75) over term -> (trace,
  term frequency) lists, with the collection statistics (N, document frequency, mean length)
  of the whole memory at query time, so scores need no rebuild as traces arrive;
- **relational**: forward-push personalized PageRank (Andersen, Chung & Lang) from each
  anchor over the co-mention graph walked through the entity -> trace and trace -> entity
  lists (a step from an entity picks one of its traces with two or more entities, then one
  of that trace's other entities: the transition of the small path's co-mention CSR, which
  is never built here); traces are scored only where some pushed entity occurs;
- **temporal**: the sessions holding an anchor (entity -> traces, then session -> traces)
  are the only ones scored, which is exact (the view is zero elsewhere);
- the anchor coverage deficit and the anchor idf from the same lists (exact).

``tests/memory/test_scale.py`` pins each against the small path on fixtures.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpurag.arrays import isin_sorted
from gpurag.memory.postings import Grow, Postings, unique
from gpurag.memory.vectors import VectorStore
from gpurag.memory.views import MASS_FLOOR

_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # bm25s.tokenize's default pattern
K1, B = 1.5, 0.75
PUSH_EPS = 1e-5  # push residual threshold per unit of degree
REL_BUDGET = 2000  # traces scored first for the relational top-k (see relational_top)
SYNC_CHUNK = 65_536  # traces indexed per step of a sync (bounds its transient memory)
TEMPORAL_MAX_ROWS = 200_000  # rows of anchor sessions scored at most (else windows)
COMMON_DF = 20_000  # traces holding a term from which BM25 tries the bounded path first
TEMPORAL_WINDOW = 14.0  # x tau: turns beyond it score below exp(-14), under MASS_FLOOR


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


@dataclass(frozen=True)
class Traces:
    """What :meth:`ScaleIndex.sync` reads of a memory's first ``n`` traces: each one's session
    number, turn, time, entity tags and lexical document, their vectors, and the vocabulary's
    map of entries to canonical entities."""

    n: int
    canon: np.ndarray
    session: Sequence[int]
    turn: Sequence[int]
    time: Sequence[float]
    tags: Sequence[list[int]]
    lexical_text: Callable[[int], str]
    vectors: VectorStore


class ScaleIndex:
    """Inverted lists and a vector index over a memory's traces (see the module doc)."""

    def __init__(self, dim: int, nlist: int | None = None, nprobe: int = 32) -> None:
        self.dim = dim
        self.n = 0  # rows covered by sessions / lexical / dense
        self.session, self.turn, self.time = Grow(np.int64), Grow(np.int64), Grow(np.float64)
        self.sess = Postings()
        self.terms = Postings()
        self.doc_len = Grow(np.float32)
        self._avg_len = (-1, 1.0)  # (n, mean document length of the first n traces)
        self.term_ids: dict[str, int] = {}
        self.common_df = COMMON_DF
        self._stop = _stopwords()
        self._nlist, self.nprobe = nlist, nprobe
        self.dense = None
        self.n_dense = 0
        self.source = "built"  # "snapshot": read back from a memory snapshot (scale_store)
        self._reset_entities()

    def _reset_entities(self) -> None:
        self.n_ent_rows = 0
        self.row_ptr = Grow(np.int64)
        self.row_ptr.extend([0])
        self.row_ent = Grow(np.int32)
        self.m = Grow(np.int32)  # distinct canonical entities per row
        self.ent = Postings()
        # entity -> (each other entity of each of its rows with >= 2, that row's count - 1):
        # the co-mention steps of the push, read in one contiguous run per entity
        self.pairs = Postings()
        self.deg = np.zeros(0, np.int64)  # rows with >= 2 entities holding each entity
        self._r = self._p = np.zeros(0)  # push scratch (zero between pushes)
        self._thr: tuple[float, np.ndarray] | None = None  # push thresholds per entity
        self.canon_used: np.ndarray | None = None
        self.entity_rebuilds = getattr(self, "entity_rebuilds", -1) + 1

    # -- keeping up ---------------------------------------------------------------------------
    def sync(self, src: Traces) -> None:
        """Append the traces ``src`` holds beyond those indexed."""
        canon = src.canon
        old = self.canon_used
        if old is not None and not np.array_equal(canon[: len(old)], old):
            self._reset_entities()  # an alias or common word changed known entries
        if self.n_ent_rows < src.n:
            self._add_entities(src, canon)
        self.canon_used = canon.copy()
        if self.n < src.n:
            lo, hi = self.n, src.n
            self.session.extend(src.session[lo:hi])
            self.turn.extend(src.turn[lo:hi])
            self.time.extend(src.time[lo:hi])
            rows = np.arange(lo, hi, dtype=np.int32)
            self.sess.add(np.asarray(src.session[lo:hi]), rows)
            for at in range(lo, hi, SYNC_CHUNK):  # bounded Python lists
                self._add_lexical(src, at, min(hi, at + SYNC_CHUNK))
            self.n = hi
        if self.n_dense < src.n:
            self._add_dense(src)

    def _add_entities(self, src: Traces, canon: np.ndarray) -> None:
        lo, hi = self.n_ent_rows, src.n
        tags = src.tags[lo:hi]
        counts = np.fromiter(map(len, tags), np.int64, count=hi - lo)
        raw = np.fromiter((i for t in tags for i in t), np.int64, count=int(counts.sum()))
        row = np.repeat(np.arange(lo, hi, dtype=np.int64), counts)
        ent = canon[raw] if len(raw) else raw
        keep = ent >= 0
        row, ent = row[keep], ent[keep]
        n_ent = max(len(canon), 1)
        pair = unique(row * n_ent + ent)  # per row: distinct entities, sorted
        row, ent = pair // n_ent, pair % n_ent
        m = np.bincount(row - lo, minlength=hi - lo).astype(np.int32)
        self.row_ent.extend(ent)
        self.row_ptr.extend(self.row_ptr.view()[-1] + np.cumsum(m))
        self.m.extend(m)
        self.ent.add(ent, row)
        self._add_pairs(ent, m)
        if len(self.deg) < n_ent:
            self.deg = np.r_[self.deg, np.zeros(n_ent - len(self.deg), np.int64)]
        multi = m[row - lo] >= 2
        self.deg += np.bincount(ent[multi], minlength=len(self.deg))[: len(self.deg)]
        self._thr = None
        self.n_ent_rows = hi

    def _add_pairs(self, ent: np.ndarray, m: np.ndarray) -> None:
        """Co-mention pairs of new rows (``ent``: their entities row by row, sorted within a
        row; ``m``: entities per row): for each entry, the row's other entities in order, so
        an entity's pairs come row by row, as its postings do."""
        ends = np.cumsum(m, dtype=np.int64)
        start = ends - m
        for r0 in range(0, len(m), SYNC_CHUNK):  # bounded transient arrays
            r1 = min(len(m), r0 + SYNC_CHUNK)
            e = ent[int(start[r0]):int(ends[r1 - 1])]
            mm = m[r0:r1].astype(np.int64)
            size = np.repeat(mm, mm)  # each entry's row count
            at = np.arange(len(e))
            j = at - np.repeat(np.cumsum(mm) - mm, mm)  # its place in its row
            fan = np.where(size >= 2, size - 1, 0)
            a = np.repeat(at, fan)
            k = np.arange(len(a)) - np.repeat(np.cumsum(fan) - fan, fan)
            b = (at - j)[a] + k + (k >= j[a])
            self.pairs.add(e[a], e[b], (size[a] - 1).astype(np.float32))

    def tokens(self, text: str) -> list[str]:
        stop = self._stop
        return [w for w in _TOKEN.findall(text.lower()) if w not in stop]

    def _add_lexical(self, src: Traces, lo: int, hi: int) -> None:
        ids = self.term_ids
        keys, rows, tfs, lens = [], [], [], []
        for i in range(lo, hi):
            toks = self.tokens(src.lexical_text(i))
            lens.append(len(toks))
            tf: dict[int, int] = {}
            for w in toks:
                t = ids.get(w)
                if t is None:
                    t = ids[w] = len(ids)
                tf[t] = tf.get(t, 0) + 1
            keys.extend(tf)
            tfs.extend(tf.values())
            rows.extend([i] * len(tf))
        self.doc_len.extend(lens)
        self.terms.add(np.asarray(keys, np.int64), np.asarray(rows, np.int64),
                       np.asarray(tfs, np.float32))

    def _add_dense(self, src: Traces) -> None:
        """Train the IVF on a sample (first call) and add the vectors not yet in it, a block
        at a time (no copy of the whole matrix)."""
        from gpurag.vectors.faiss_setup import configured_faiss

        faiss = configured_faiss()
        if self.dense is None:
            n = src.n
            nlist = self._nlist or int(min(4096, max(1, round(math.sqrt(n)))))
            nlist = max(1, min(nlist, n // 39 or 1))
            quantizer = faiss.IndexFlatIP(self.dim)
            index = faiss.IndexIVFScalarQuantizer(quantizer, self.dim, nlist,
                                                  faiss.ScalarQuantizer.QT_8bit,
                                                  faiss.METRIC_INNER_PRODUCT, False)
            rng = np.random.default_rng(0)
            pick = rng.choice(n, size=min(n, 64 * nlist), replace=False)
            sample = src.vectors.take(np.sort(pick))
            index.train(np.ascontiguousarray(sample, np.float32))
            index.nprobe = min(self.nprobe, nlist)
            self.dense = index
        for lo in range(self.n_dense, src.n, SYNC_CHUNK):
            hi = min(src.n, lo + SYNC_CHUNK)
            self.dense.add(np.ascontiguousarray(src.vectors[lo:hi], np.float32))
            self.n_dense = hi

    # -- the views ----------------------------------------------------------------------------
    def dense_ids(self, qv: np.ndarray, depth: int) -> list[np.ndarray]:
        """Top-``depth`` ids per query row from the IVF. A search scanning fewer than
        ``SINGLE_THREAD_WORK`` codes (rows x probed lists' share of the vectors: one question
        at 1M traces scans ~32k) runs on the calling thread alone: the OpenMP hand-off cost
        more than the scan shares (a question at 1M: 2.85 -> 2.55 ms CPU idle; far more at a
        high load, where the woken thread waits for a core). Each query row is scanned by one
        thread either way (FAISS splits a batch by rows), so the ids are the same."""
        from gpurag.vectors.faiss_setup import SINGLE_THREAD_WORK, on_one_thread

        qv = np.ascontiguousarray(qv, np.float32)
        k = min(depth, self.n)
        scanned = len(qv) * self.n * min(self.dense.nprobe, self.dense.nlist) / self.dense.nlist
        _, ids = (on_one_thread(self.dense.search, qv, k) if scanned < SINGLE_THREAD_WORK
                  else self.dense.search(qv, k))
        return [row[row >= 0].astype(np.int64) for row in ids]

    def lexical(self, questions: list[str], k: int) -> list[dict[int, float]]:
        """BM25 top-``k`` per question with the whole memory's statistics. A question with
        terms in more than ``common_df`` traces and terms in fewer is first scored on the
        traces holding the rarer ones only (:meth:`_lexical_bounded`), which gives the same
        top-``k`` whenever a trace holding only the common terms cannot reach it."""
        n = self.n
        if self._avg_len[0] != len(self.doc_len):  # (a mean over every trace: once per size,
            # not per search; the lengths are only ever appended to)
            self._avg_len = (len(self.doc_len), float(self.doc_len.view().mean()) if n else 1.0)
        avg = self._avg_len[1]
        out = []
        for q in questions:
            ids = [self.term_ids[w] for w in self.tokens(q) if w in self.term_ids]
            if not ids:
                out.append({})
                continue
            terms = np.asarray(ids, np.int64)
            df = self.terms.count(terms)
            common = df > self.common_df
            got = (self._lexical_bounded(terms, common, df, avg, k)
                   if common.any() and not common.all() else None)
            out.append(got if got is not None else self._lexical_all(terms, avg, k))
        return out

    def _bm25(self, idf: np.ndarray, tf: np.ndarray, dl: np.ndarray, avg: float
              ) -> np.ndarray:
        return idf * (tf / (np.float32(K1) * ((1 - B) + B * dl / np.float32(avg)) + tf))

    def _lexical_all(self, terms: np.ndarray, avg: float, k: int) -> dict[int, float]:
        """BM25 top-``k`` over every trace holding a term of ``terms``."""
        n = self.n
        owner, rows, tf = self.terms.get(terms)
        df = np.bincount(owner, minlength=len(terms)).astype(np.float64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
        s = self._bm25(idf[owner], tf, self.doc_len.view()[rows], avg)
        docs, inv = unique(rows, return_inverse=True)
        score = np.zeros(len(docs), np.float32)
        np.add.at(score, inv, s.astype(np.float32))  # in term order per trace
        top = np.lexsort((docs, -score))[:k]
        return {int(d): float(v) for d, v in zip(docs[top], score[top], strict=True) if v > 0}

    def _lexical_bounded(self, terms: np.ndarray, common: np.ndarray, df: np.ndarray,
                         avg: float, k: int) -> dict[int, float] | None:
        """:meth:`_lexical_all`'s answer scored on the traces holding a rare term only, or
        None when that cannot be certified. A trace holding only common terms scores below
        the sum of their idfs (each BM25 term is idf x tf / (tf + a positive norm) < idf);
        when the k-th best score found is above that bound, no such trace is in the top-k.
        Each trace's score adds its terms in the same order, in float32, as the full path."""
        n = self.n
        idf = np.log1p((n - df.astype(np.float64) + 0.5)
                       / (df.astype(np.float64) + 0.5)).astype(np.float32)
        _, rows, _ = self.terms.get(terms[~common])
        docs = unique(rows)
        if len(docs) < k:
            return None
        dl = self.doc_len.view()[docs]
        score = np.zeros(len(docs), np.float32)
        for j, t in enumerate(terms.tolist()):
            tf = self.terms.values_at(t, docs)
            has = tf > 0
            score[has] += self._bm25(idf[j], tf[has], dl[has], avg).astype(np.float32)
        bound = float(idf[common].astype(np.float64).sum()) * (1 + 1e-5)
        kth = float(np.partition(score, len(score) - k)[len(score) - k])
        if not kth > bound:
            return None
        top = np.lexsort((docs, -score))[:k]
        return {int(d): float(v) for d, v in zip(docs[top], score[top], strict=True) if v > 0}

    def postings(self, entities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        owner, rows, _ = self.ent.get(entities)
        return owner, rows

    def idf(self, entities: np.ndarray) -> np.ndarray:
        df = self.ent.count(entities)
        return np.log1p(self.n_ent_rows / np.maximum(df, 1)).astype(np.float64)

    def push(self, anchor: int, damping: float, eps: float = PUSH_EPS
             ) -> tuple[np.ndarray, np.ndarray]:
        """Approximate PPR mass from ``anchor``: (entities, mass relative to the anchor's),
        entities sorted. Each round pushes every entity whose residual is at least ``eps``
        times its degree; the work per round follows the entities touched (the residual and
        mass vectors are dense over the entities, which number far fewer than the traces:
        their adds are one ``bincount``, with no sort of the targets; the steps are read from
        the co-mention pairs, contiguous per entity, not gathered from the rows)."""
        deg = self.deg
        n_ent = len(deg)
        if len(self._r) != n_ent:
            self._r, self._p = np.zeros(n_ent), np.zeros(n_ent)
            self._thr = None
        if self._thr is None or self._thr[0] != eps:
            self._thr = (eps, eps * np.maximum(deg, 1))
        thr = self._thr[1]
        r, p = self._r, self._p
        r[anchor] = 1.0
        front = np.asarray([anchor], np.int64)
        try:
            while len(front):
                mass = r[front]
                r[front] = 0.0
                p[front] += (1 - damping) * mass
                dangling = deg[front] == 0
                if dangling.any():
                    r[anchor] += damping * float(mass[dangling].sum())
                live = front[~dangling]
                if len(live):  # each pair: one step entity -> row -> other entity
                    owner, nb, fan = self.pairs.get(live)
                    share = (damping * mass[~dangling] / deg[live])[owner]
                    r += np.bincount(nb, weights=share / fan, minlength=n_ent)
                front = np.flatnonzero(r >= thr)  # (only entities just added to can pass)
            support = np.flatnonzero(p > 0)
            return support, p[support] / max(p[anchor], MASS_FLOOR)
        finally:
            r[:] = 0.0
            p[:] = 0.0

    def masses(self, anchors: np.ndarray, damping: float) -> list[tuple[np.ndarray,
                                                                       np.ndarray]]:
        """:meth:`push` of each anchor."""
        return [self.push(int(a), damping) for a in anchors]

    def relational_of(self, rows: np.ndarray, masses: list, weights: np.ndarray
                      ) -> np.ndarray:
        """The relational view of ``rows``: the weighted geometric mean over anchors of the
        largest mass among a row's entities (``MASS_FLOOR`` where none has any)."""
        rows = np.asarray(rows, np.int64)
        if not masses:
            return np.zeros(len(rows), np.float32)
        ptr, ents = self.row_ptr.view(), self.row_ent.view()
        size = self.m.view()[rows].astype(np.int64)
        pos = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
        ent = ents[np.repeat(ptr[rows], size) + pos].astype(np.int64)
        starts = np.cumsum(size) - size
        some = size > 0
        logm = np.zeros(len(rows))
        dense = np.zeros(len(self.deg), np.float32)
        for w, (keys, vals) in zip(weights, masses, strict=True):
            best = np.zeros(len(rows), np.float32)
            if len(keys) and len(ent):  # a dense mass vector over the entities: no search
                dense[keys] = vals
                best[some] = np.maximum(np.maximum.reduceat(dense[ent], starts[some]), 0)
                dense[keys] = 0.0
            logm += w * np.log(np.maximum(best, MASS_FLOOR))
        return np.exp(logm).astype(np.float32)

    def relational_top(self, masses: list, weights: np.ndarray, k: int,
                       budget: int = REL_BUDGET) -> np.ndarray:
        """Rows of the ``k`` best relational scores. Entities are taken in decreasing order
        of their largest anchor mass until their traces number ``budget``; a trace holding
        none of them scores at most ``c``, the largest mass left out (a weighted geometric
        mean of values <= c), so once the k-th best score found is >= c the top-k is exact;
        else the budget grows (x4) and it is tried again."""
        keys = np.concatenate([np.zeros(0, np.int64), *(m[0] for m in masses)])
        vals = np.concatenate([np.zeros(0), *(m[1] for m in masses)])
        if not len(keys):
            return np.zeros(0, np.int64)
        ent, inv = unique(keys, return_inverse=True)
        best = np.zeros(len(ent))
        np.maximum.at(best, inv, vals)
        order = np.argsort(-best, kind="stable")
        ent, best = ent[order], best[order]
        cum = np.cumsum(self.ent.count(ent))
        rows, scores = np.zeros(0, np.int64), np.zeros(0, np.float32)
        taken = 0
        while True:
            take = int(np.searchsorted(cum, budget)) + 1
            cut = float(best[take]) if take < len(ent) else 0.0
            # the rows of the entities added to the budget; those scored before keep theirs
            _, new = self.postings(ent[taken:take])
            new = unique(new)
            new = new[~np.isin(new, rows, assume_unique=True)]
            if len(new):
                rows = np.r_[rows, new]
                scores = np.r_[scores, self.relational_of(new, masses, weights)]
                order = np.argsort(rows)
                rows, scores = rows[order], scores[order]
            taken = take
            picked = top(rows, scores, k)
            kth = np.partition(scores, len(scores) - k)[len(scores) - k] if len(scores) >= k \
                else -1.0
            if take >= len(ent) or kth >= max(cut, MASS_FLOOR) or budget >= 64 * REL_BUDGET:
                return picked  # exact, or (past 64 budgets) the best found
            budget *= 4

    def temporal(self, anchors: np.ndarray, weights: np.ndarray, tau: float, recency: float
                 ) -> tuple[np.ndarray, np.ndarray, float]:
        """(rows, temporal scores) over the sessions holding an anchor, and the coverage
        deficit; both as the small path computes them."""
        owner, hit = self.postings(anchors)
        deficit = 0.0
        if len(anchors) > 1 and len(hit):
            # each mentioning row's anchor weight (summed in the same order as a bincount
            # over all rows, without an array the size of the memory)
            _, at = unique(hit, return_inverse=True)
            per = np.bincount(at, weights=weights[owner])
            deficit = float(1.0 - per.max())
        if not len(hit):
            return np.zeros(0, np.int64), np.zeros(0, np.float32), deficit
        session, turn, when = self.session.view(), self.turn.view(), self.time.view()
        pair = unique(owner * (1 << 40) + session[hit])
        a, s = pair >> 40, pair & ((1 << 40) - 1)
        sessions, s_inv = unique(s, return_inverse=True)
        cov = np.bincount(s_inv, weights=weights[a], minlength=len(sessions))
        _, rows, _ = self.sess.get(sessions)
        if len(rows) > TEMPORAL_MAX_ROWS:  # windows around the mentions only
            w = math.ceil(TEMPORAL_WINDOW * max(tau, 1e-6))
            near = unique((hit[:, None] + np.arange(-w, w + 1)).ravel())
            near = near[(near >= 0) & (near < self.n)]
            rows = near[isin_sorted(session[near], sessions)]
        best = cov >= cov.max() - 1e-9
        bonus = np.zeros(len(sessions))
        s_of = np.searchsorted(sessions, session[rows])
        if recency:
            s_time = np.full(len(sessions), -np.inf)
            np.maximum.at(s_time, s_of, np.nan_to_num(when[rows], nan=-np.inf))
            if np.isfinite(s_time[best]).any():
                bonus[np.flatnonzero(best)[np.argmax(s_time[best])]] = recency
        mention = unique(hit)
        key_m = session[mention] * (1 << 32) + turn[mention]
        order = np.argsort(key_m)
        key_m, mention = key_m[order], mention[order]
        key = session[rows] * (1 << 32) + turn[rows]
        pos = np.searchsorted(key_m, key)
        dist = np.full(len(rows), np.inf)
        for cand in (pos - 1, pos):
            ok = (cand >= 0) & (cand < len(key_m))
            c = np.clip(cand, 0, len(key_m) - 1)
            same = ok & (session[mention[c]] == session[rows])
            dist = np.where(same, np.minimum(dist, np.abs(turn[mention[c]] - turn[rows])), dist)
        close = np.exp(-dist / max(tau, 1e-6))
        return rows, (cov[s_of] * (1.0 + bonus[s_of]) * close).astype(np.float32), deficit

    def stats(self) -> dict[str, Any]:
        """Sizes of the index parts (bytes) and run counts."""
        dense = 0
        if self.dense is not None:
            dense = int(self.dense.ntotal) * (self.dim + 8) + self.dense.nlist * self.dim * 4
        parts = {"entity_lists": self.ent.nbytes + self.row_ent.nbytes + self.row_ptr.nbytes,
                 "co_mention_pairs": self.pairs.nbytes,
                 "session_lists": self.sess.nbytes, "term_lists": self.terms.nbytes,
                 "dense_ivf": dense,
                 "columns": self.session.nbytes + self.turn.nbytes + self.time.nbytes
                 + self.doc_len.nbytes + self.m.nbytes}
        return {"bytes": parts, "terms": len(self.term_ids),
                "runs": {"entity": self.ent.n_runs, "term": self.terms.n_runs},
                "entity_rebuilds": self.entity_rebuilds, "source": self.source,
                "nlist": int(self.dense.nlist) if self.dense is not None else 0}


def lookup(rows: np.ndarray, values: np.ndarray, ids: np.ndarray, default: float
           ) -> np.ndarray:
    """``values`` of ``ids`` among the sorted ``rows`` (``default`` where absent)."""
    if not len(rows):
        return np.full(len(ids), default, np.float32)
    at = np.clip(np.searchsorted(rows, ids), 0, len(rows) - 1)
    return np.where(rows[at] == ids, values[at], default).astype(np.float32)


def top(rows: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """Rows of the ``k`` largest positive values."""
    if len(values) > k:
        idx = np.argpartition(-values, k - 1)[:k]
        rows, values = rows[idx], values[idx]
    return rows[values > 0]
