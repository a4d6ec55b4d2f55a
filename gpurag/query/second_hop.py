"""Query-conditioned second hop: from the first round's top passages to the pages of the
entities they mention, ranked by how well each page fits the question.

The walk from a first-hop passage spreads its mass evenly over every entity the passage
mentions, so the bridge entity's page (the performer of the song the question names) competes
with the pages of every other name in the passage. Here each of the top ``second_hop_from``
passages of the first-round ranking points to its *bridge pages*: passages titled by an entity
it mentions, found by the title entity or by the title's key once its disambiguation ("(1961
film)") and qualifier (", Illinois") are dropped. A bridge page scores the number of first-hop
passages that point to it times ``exp(cos(question, page) / second_hop_temperature)``, so the
hop prefers the neighbour the question describes. That ranking is fused with the first-round
ranking by weighted reciprocal rank (weight ``second_hop_weight``); the head keeps its place.

Pages that are not titled by the bridge entity ("South Korea at the Olympics" for the country
that makes Han Vodka) come from expanded questions: each entity the top
``second_hop_expansions`` passages mention, and the question does not name, is appended to the
question, all of a batch's expansions go through BM25 in one call, and their pages (by rank
within their expansion) are fused below the first ``second_hop_expansion_keep`` documents.
Where those passages carry labelled triples ("Maryland state sport Jousting"), the triples say
which entity the question's relation words point to: each entity is scored by the cosine
between the question and its best triple, and only the ``second_hop_triples`` best are
expanded, so a passage's dozens of other names no longer crowd its bridge out.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

from gpurag.arrays import isin_sorted, sorted_lookup, unique_sorted
from gpurag.once import Memo, built_once
from gpurag.query.sparse_rows import cosine_ranking, csr_rows, pack_rows, reached
from gpurag.resolve.normalize import alias_keys, normalize_name

if TYPE_CHECKING:
    from gpurag.query.lexical import Tokens

FIRST_DEPTH = 40  # first-round ranks fused with the bridge ranking
BRIDGE_DEPTH = 20  # bridge pages kept per question
EXPANSION_HITS = 5  # BM25 passages per expanded question
_HEAD = 1e6  # fusion weight that keeps the head rows first, in order
MATRICES_KEPT = 4  # bridge matrices kept per opened index (distinct second_hop_max_pages)
REACHED_KEPT = 64  # their reached shares (a float each)
_DISAMBIGUATION = r"\s*\([^()]*\)\s*$"
_QUALIFIER = r"\s*,.*$"
_ASPECT = r"^[A-Z][a-z]+ (?:of|in) (?:the )?(.+)$"


def aspect_keys(titles: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Pages titled "<Aspect> of|in [the] <X>" ("History of Maryland", "Economy of Malta",
    "Education in Japan"): their rows and the lookup key of X, Wikipedia's naming of a page
    about one side of X."""
    found = titles.fillna("").astype(str).str.extract(_ASPECT)[0]
    ok = found.notna().to_numpy()
    return np.flatnonzero(ok), normalize_name(found[ok].tolist())


def title_keys(titles: pd.Series) -> list[str]:
    """Lookup key of each title without its disambiguation and qualifier
    ("West Chicago, Illinois" and "Brother (Pearl Jam song)" give "west chicago", "brother")."""
    base = (titles.fillna("").astype(str).str.replace(_DISAMBIGUATION, "", regex=True)
            .str.replace(_QUALIFIER, "", regex=True))
    return normalize_name(base.tolist())


def titled_pages(title_entity: np.ndarray, titles: pd.Series, names: pd.DataFrame,
                 n_ent: int, max_pages: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (entity, page) pairs of the passages each entity titles: its title entity,
    or a name whose key (``names``: ``key``, ``entity``) equals the title's key without
    disambiguation and qualifier (:func:`title_keys`); sorted by entity, then page. With
    ``max_pages``, only entities titling at most that many passages (a category titles more)."""
    has = np.flatnonzero(title_entity >= 0)
    keys = pd.DataFrame({"key": title_keys(titles), "page": np.arange(len(title_entity))})
    pairs = names.merge(keys[keys["key"].str.len() >= 3], on="key")
    e = np.concatenate([title_entity[has], pairs["entity"].to_numpy(np.int64)])
    p = np.concatenate([has, pairs["page"].to_numpy(np.int64)])
    uniq = unique_sorted(e * max(len(title_entity), 1) + p)
    e, p = uniq // max(len(title_entity), 1), uniq % max(len(title_entity), 1)
    if max_pages is not None:
        keep = np.bincount(e, minlength=n_ent)[e] <= max_pages
        e, p = e[keep], p[keep]
    return e, p


def bridge_pages(title_entity: np.ndarray, titles: pd.Series, names: pd.DataFrame, n_ent: int,
                 max_pages: int, aspects: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (entity, page) pairs an entity bridges to, sorted by entity, then page: the
    pages it titles (:func:`titled_pages`) and, with ``aspects``, the pages about one side of
    it (:func:`aspect_keys`). An entity titling more than ``max_pages`` passages names a
    category and bridges nowhere (its aspects neither); aspect pages are counted apart, so an
    entity with more than ``max_pages`` of them (a country) keeps its own pages only."""
    e, p = titled_pages(title_entity, titles, names, n_ent)
    n_psg = max(len(title_entity), 1)
    specific = np.bincount(e, minlength=n_ent) <= max_pages
    keep = specific[e]
    e, p = e[keep], p[keep]
    if aspects:
        rows, keys = aspect_keys(titles)
        found = names.merge(pd.DataFrame({"key": keys, "page": rows}), on="key")
        pair = unique_sorted(found["entity"].to_numpy(np.int64) * n_psg
                         + found["page"].to_numpy(np.int64))
        ae, ap = pair // n_psg, pair % n_psg
        few = np.bincount(ae, minlength=n_ent) <= max_pages
        ok = specific[ae] & few[ae]
        both = unique_sorted(np.concatenate([e * n_psg + p, ae[ok] * n_psg + ap[ok]]))
        e, p = both // n_psg, both % n_psg
    return e, p


def bridge_matrix(mentions: pd.DataFrame, title_entity: np.ndarray, titles: pd.Series,
                  aliases: pd.DataFrame, n_ent: int, max_pages: int) -> sp.csr_array:
    """``(p, p)`` 0/1 matrix: passage -> the other passages titled by an entity it mentions,
    and the pages about one side of it ("History of Maryland" for Maryland, :func:`aspect_keys`).

    ``mentions`` has ``entity`` and ``chunk`` columns; ``title_entity`` is each passage's title
    entity (-1 when none); ``aliases`` has ``name``, ``entity_id`` and, where the index stores
    it, ``key`` (each name's :func:`normalize_name`). An entity that titles
    more than ``max_pages`` passages names a category ("bakery_deliver"), not a page, and
    bridges nowhere. Aspect pages are counted apart: an entity with more than ``max_pages`` of
    them (a country) keeps its own page but bridges to none of its aspects.
    """
    n_psg = len(title_entity)
    ment = sp.csr_array((np.ones(len(mentions)), (mentions["chunk"].to_numpy(np.int64),
                                                  mentions["entity"].to_numpy(np.int64))),
                        shape=(n_psg, n_ent))
    names = pd.DataFrame({"key": alias_keys(aliases),
                          "entity": aliases["entity_id"].to_numpy(np.int64)})
    e, p = bridge_pages(title_entity, titles, names, n_ent, max_pages)
    titled = sp.csr_array((np.ones(len(e)), (e, p)), shape=(n_ent, n_psg))
    out = sp.csr_array(ment @ titled)
    out.setdiag(0)
    out.eliminate_zeros()
    out.data[:] = 1.0
    return out


def bridge_ranking(first: np.ndarray, matrix: sp.csr_array, qvecs: np.ndarray,
                   passage_emb: np.ndarray | PassageVectors, hop_from: int, temperature: float,
                   depth: int = BRIDGE_DEPTH) -> np.ndarray:
    """Per question, the bridge pages of its top ``hop_from`` first-round rows (``first``,
    ``(q, d)``, -1 padded), best first, ``(q, depth)`` -1 padded."""
    q = first.shape[0]
    qr, page, value = reached(first[:, :hop_from], matrix)
    return cosine_ranking(qr, page, value, qvecs, passage_emb, temperature, q, depth)


def fuse(rankings: list[np.ndarray], weights: list[float], n: int, c: float, k: int
         ) -> tuple[np.ndarray, np.ndarray]:
    """Weighted reciprocal-rank fusion: rows ``(q, k)`` (-1 padded) and their fused scores
    (``-inf`` where padded); each ranking is ``(q, d)`` of rows in ``[0, n)``, -1 padded, and
    adds ``weight / (c + rank)`` to each row it names (ties: lower row first)."""
    q = rankings[0].shape[0]
    qs, ids, gain = [], [], []
    for rank, w in zip(rankings, weights, strict=True):
        r, col = np.nonzero(rank >= 0)  # row-major, as a boolean mask selects
        qs.append(r)
        ids.append(rank[r, col])
        gain.append((w / (c + 1.0 + np.arange(rank.shape[1])))[col])
    key = np.concatenate(qs) * (n + 1) + np.concatenate(ids)
    uniq, inv = np.unique(key, return_inverse=True)
    # bincount adds in input order, as np.add.at does: the same sums
    score = np.bincount(inv, weights=np.concatenate(gain), minlength=len(uniq))
    uq, urow = uniq // (n + 1), uniq % (n + 1)
    order = np.lexsort((urow, -score, uq))
    uq, urow, score = uq[order], urow[order], score[order]
    pos = np.arange(len(uq)) - np.searchsorted(uq, np.arange(q))[uq]
    keep = pos < k
    rows = np.full((q, k), -1, np.int64)
    scores = np.full((q, k), -np.inf)
    rows[uq[keep], pos[keep]] = urow[keep]
    scores[uq[keep], pos[keep]] = score[keep]
    return rows, scores


def second_hop(first: np.ndarray, matrix: sp.csr_array, qvecs: np.ndarray,
               passage_emb: np.ndarray | PassageVectors, *, k: int, head: np.ndarray | None,
               hop_from: int, temperature: float, weight: float, rank_constant: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """The first-round ranking ``first`` (``(q, d)`` rows, best first) with the bridge pages
    fused in: top-``k`` (rows, scores). The ``head`` rows (``(q, h)``, -1 padded, in ``first``'s
    order) keep their place."""
    bridges = bridge_ranking(first, matrix, qvecs, passage_emb, hop_from, temperature)
    rankings, weights = [first[:, :FIRST_DEPTH], bridges], [1.0, weight]
    if head is not None and head.shape[1]:
        rankings.append(head)
        weights.append(_HEAD)
    return fuse(rankings, weights, matrix.shape[0], rank_constant, k)


def expansion_pairs(top: np.ndarray, mentions: sp.csr_array, title_entity: np.ndarray,
                    named: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(question, entity)`` pairs, each once: the entities the passages ``top`` (``(q, m)``
    rows, -1 padded) mention (``mentions``: passage -> entity), less those the question names
    (``named``: question and entity arrays) and the top passages' own title entities."""
    n_ent = mentions.shape[1]
    qr, ent, _ = reached(top, mentions)
    key = qr * n_ent + ent
    r, c = np.nonzero(top >= 0)
    own = title_entity[top[r, c]]
    drop = np.concatenate([named[0] * n_ent + named[1], (r * n_ent + own)[own >= 0]])
    key = unique_sorted(key[~isin_sorted(key, drop)])
    return key // n_ent, key % n_ent


def triple_entity_scores(top: np.ndarray, chunk_triples: tuple[np.ndarray, np.ndarray],
                         fact_entities: tuple[np.ndarray, np.ndarray], fact_vecs,
                         qvecs: np.ndarray, n_ent: int) -> tuple[np.ndarray, np.ndarray]:
    """Per (question, entity), the best cosine between the question and a triple of the
    passages ``top`` (``(q, m)`` rows, -1 padded) that names the entity: sorted keys
    ``question * n_ent + entity`` and their scores. ``chunk_triples``: (indptr, fact ids) of
    each passage's triples; ``fact_entities``: (indptr, entity ids) of each fact;
    ``fact_vecs[ids]``: the facts' vectors."""
    r, c = np.nonzero(top >= 0)
    rows = top[r, c]
    c_ptr, c_facts = chunk_triples
    qr, fact = csr_rows(r, c_ptr[rows], c_ptr[rows + 1] - c_ptr[rows], c_facts)
    if not len(fact):
        return np.zeros(0, np.int64), np.zeros(0)
    uniq, inv = np.unique(fact, return_inverse=True)
    sim = np.einsum("ij,ij->i", qvecs[qr].astype(np.float64),
                    np.asarray(fact_vecs[uniq], np.float64)[inv])
    f_ptr, f_ents = fact_entities
    owner, ent = csr_rows(np.arange(len(fact)), f_ptr[fact], f_ptr[fact + 1] - f_ptr[fact],
                          f_ents)
    keys, k_inv = np.unique(qr[owner] * n_ent + ent, return_inverse=True)
    best = np.full(len(keys), -np.inf)
    np.maximum.at(best, k_inv, sim[owner])
    return keys, best


def best_expansions(owner: np.ndarray, entity: np.ndarray, keys: np.ndarray,
                    scores: np.ndarray, n_ent: int, keep: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The expansions ``(owner, entity)`` (by question) of each question that has a scored
    entity (``keys``/``scores`` from :func:`triple_entity_scores`) cut to its ``keep`` best
    entities (entities in no triple after the scored ones); other questions keep them all."""
    key = owner * n_ent + entity
    score = np.full(len(key), -np.inf)
    at, hit = sorted_lookup(keys, key)
    score[hit] = scores[at[hit]]
    order = np.lexsort((entity, -score, owner))
    owner, entity = owner[order], entity[order]
    pos = np.arange(len(owner)) - np.searchsorted(owner, owner)
    scored = isin_sorted(owner, unique_sorted(keys // n_ent))
    keep_row = ~scored | (pos < keep)
    return owner[keep_row], entity[keep_row]


def expansion_ranking(owner: np.ndarray, rows: np.ndarray, scores: np.ndarray, q: int,
                      depth: int = BRIDGE_DEPTH) -> np.ndarray:
    """Per question, the passages its expansions found (``rows``/``scores``: ``(e, d)`` BM25
    hits of each expansion, -1 padded; ``owner``: each expansion's question), by their best
    rank within an expansion, then by score; ``(q, depth)`` -1 padded."""
    ok = rows >= 0
    qq = np.broadcast_to(owner[:, None], rows.shape)[ok]
    rank = np.broadcast_to(np.arange(rows.shape[1]), rows.shape)[ok]
    row, score = rows[ok], scores[ok]
    order = np.lexsort((row, -score, rank, qq))
    qq, row = qq[order], row[order]
    _, first = np.unique(qq * (int(row.max(initial=0)) + 1) + row, return_index=True)
    first = np.sort(first)
    return pack_rows(qq[first], row[first], q, depth)


def document_head(rows: np.ndarray, doc_codes: np.ndarray, keep: int) -> np.ndarray:
    """The start of each ranking (``(q, d)`` rows, -1 padded) that holds its first ``keep``
    documents (``doc_codes``: each passage's document), -1 after it: a document split into
    several passages counts once."""
    width = rows.shape[1]
    docs = np.where(rows >= 0, doc_codes[np.maximum(rows, 0)], -1 - np.arange(width))
    earlier = np.tri(width, k=-1, dtype=bool)  # [j, l]: l before j
    new = ~((docs[:, :, None] == docs[:, None, :]) & earlier).any(axis=2)
    return np.where((np.cumsum(new, axis=1) <= keep) & (rows >= 0), rows, -1)


class PassageVectors:
    """Float32 vectors of the rows asked (``vectors[rows]``), decoded from a passage index
    as they are needed, each distinct row once: a question needs a few dozen, not all."""

    def __init__(self, index) -> None:
        self.index = index

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        from gpurag.vectors.codec import decode_all

        uniq, inv = np.unique(np.asarray(rows, np.int64), return_inverse=True)
        return decode_all(self.index, uniq)[inv]


class BridgePages:
    """The second hop over an opened index: bridge matrices (one per ``max_pages``) and
    passage vectors, read on first use.

    ``retriever`` is read through its public parts only (a
    :class:`~gpurag.query.graph.GraphRetriever`): ``n_ent``, ``n_psg``, ``chunks``, ``dir``,
    ``title_entity``, ``aliases``, ``mentions`` (passage -> entity CSR), ``passage_index``,
    ``fact_indptr``, ``fact_entities``, ``fact_index``, ``lexical``, ``entity_names`` and
    ``linker``. :meth:`rerank` is the stage the retriever calls: a first-round ranking in,
    the ranking with bridge and expansion pages fused in out, all ``(q, ·)`` arrays."""

    def __init__(self, retriever) -> None:
        self.retriever = retriever
        # keyed by the client's second_hop_max_pages: bounded, so distinct values sent to a
        # service cannot grow the index's memory without limit (a bridge matrix is (n, n))
        self._matrices: Memo[sp.csr_array] = Memo(MATRICES_KEPT)
        self._reached: Memo[float] = Memo(REACHED_KEPT)
        self._emb: PassageVectors | None = None
        self._entity_pages: tuple[sp.csr_array, sp.csr_array, np.ndarray] | None = None
        self._lock = threading.Lock()  # guards the entity name tokens (name_tokens)
        chunks = retriever.chunks
        self.doc_codes = (pd.factorize(chunks["doc_id"])[0] if "doc_id" in chunks
                          else np.arange(retriever.n_psg))

    def matrix(self, max_pages: int) -> sp.csr_array:
        """The bridge matrix of ``max_pages`` (:func:`bridge_matrix`), built once per value
        and kept for the :data:`MATRICES_KEPT` values used last."""
        def build() -> sp.csr_array:
            from gpurag.store import layout

            r = self.retriever
            titles = r.chunks["title"] if "title" in r.chunks else pd.Series([""] * r.n_psg)
            return bridge_matrix(
                r.dir.table(layout.MENTIONS, columns=["entity", "chunk"]), r.title_entity,
                titles, r.aliases, r.n_ent, max_pages)

        return self._matrices.get(max_pages, build)

    def reached_share(self, max_pages: int) -> float:
        """Share of passages that are the bridge page of some other passage: near 0 where no
        passage mentions another's title (chat logs, notes), so the graph has no second hop
        to offer. Passages that share a title (the parts of one page, one chat log's
        messages) do not count as each other's bridges."""
        def share() -> float:  # asked on every query: computed once per value
            m = sp.coo_array(self.matrix(max_pages))
            title = self.retriever.title_entity
            other = (title[m.row] != title[m.col]) | (title[m.row] < 0)
            return float(unique_sorted(m.col[other]).size / max(m.shape[1], 1))

        return self._reached.get(max_pages, share)

    @property
    def passage_emb(self) -> PassageVectors:
        """The passage vectors, decoded from the passage index for the rows asked."""
        return built_once(self, "_emb", lambda: PassageVectors(self.retriever.passage_index))

    def rerank(self, first: np.ndarray, first_scores: np.ndarray, qvecs: np.ndarray,
               questions: list[str], cfg, k: int, head: np.ndarray | None = None, *,
               tokens=None, linked=None, stages=None, further=None,
               ) -> tuple[np.ndarray, np.ndarray]:
        """The first-round ranking ``first`` (rows and scores, best first) with bridge pages
        (:func:`second_hop`) and the pages of expanded questions fused in, with the settings of
        ``cfg`` (a ``QueryConfig``): top-``k`` (rows, scores). The ``head`` rows (``(q, h)``,
        -1 padded) keep their place. ``tokens`` (the questions' BM25 tokens) and ``linked``
        (the entities they name), where the caller has them, are not computed again;
        ``stages`` gets the time of the expansions' BM25 apart. ``further`` (the caller's
        :func:`gpurag.query.chain_rounds.chain_rounds`, injected so this module does not import
        the one built on it) runs the rounds beyond the second hop when ``cfg.chain_rounds``."""
        depth = max(k, FIRST_DEPTH)
        rows, scores = first, first_scores
        if cfg.second_hop_weight > 0:
            rows, scores = second_hop(
                first, self.matrix(cfg.second_hop_max_pages), qvecs, self.passage_emb,
                k=depth, head=head, hop_from=cfg.second_hop_from,
                temperature=cfg.second_hop_temperature, weight=cfg.second_hop_weight,
                rank_constant=cfg.second_hop_rank_constant)
        if cfg.second_hop_expansions > 0 and cfg.second_hop_expansion_weight > 0:
            found = self.expanded(rows, questions, cfg.second_hop_expansions, qvecs,
                                  cfg.second_hop_triples, tokens=tokens, linked=linked,
                                  stages=stages)
            head = document_head(rows[:, :FIRST_DEPTH], self.doc_codes,
                                 cfg.second_hop_expansion_keep)
            rankings = [rows, found, head]
            rows, scores = fuse(rankings, [1.0, cfg.second_hop_expansion_weight, _HEAD],
                                self.retriever.n_psg, cfg.second_hop_rank_constant, depth)
        if cfg.shared_entity_weight > 0:  # pages sharing an entity with the top passages
            rows, scores = self.shared_entity(rows, qvecs, questions, cfg, depth, linked)
        if further is not None and cfg.chain_rounds > 0:  # chains longer than two
            rows, scores = further(self, rows, scores, qvecs, questions, cfg,
                                   tokens=tokens, linked=linked)
        return rows[:, :k], scores[:, :k]

    def shared_entity(self, rows: np.ndarray, qvecs: np.ndarray, questions: list[str], cfg,
                      depth: int, linked=None) -> tuple[np.ndarray, np.ndarray]:
        """``rows`` with the pages sharing an entity with its top ``cfg.shared_entity_from``
        rows (:func:`gpurag.query.shared_entity.shared_entity_ranking`) fused in below the
        first ``cfg.second_hop_expansion_keep`` documents: top-``depth`` (rows, scores)."""
        from gpurag.query.linking import LinkedBatch
        from gpurag.query.shared_entity import entity_pages, shared_entity_ranking

        r = self.retriever
        # built once, by one thread (the service shares it)
        pages = built_once(self, "_entity_pages", lambda: entity_pages(r.mentions))
        if linked is None:
            linked = r.linker.link_batch(questions)
        elif not isinstance(linked, LinkedBatch):
            linked = LinkedBatch.from_lists(linked)
        ment, by_entity, df = pages
        found = shared_entity_ranking(
            rows[:, :cfg.shared_entity_from], ment, by_entity, df, (linked.q, linked.entity),
            qvecs, self.passage_emb, max_df=cfg.shared_entity_max_df,
            temperature=cfg.shared_entity_temperature, depth=BRIDGE_DEPTH)
        head = document_head(rows[:, :FIRST_DEPTH], self.doc_codes, cfg.second_hop_expansion_keep)
        return fuse([rows, found, head], [1.0, cfg.shared_entity_weight, _HEAD], r.n_psg,
                    cfg.second_hop_rank_constant, depth)

    def chunk_triples(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(indptr, fact ids) of each passage's labelled triples (the facts the ``typed``
        column marks), or None where the index has none (rule-based extraction, or built
        before facts were marked). Read on first use."""
        # held in a 1-tuple: None is an answer, read once too
        return built_once(self, "_chunk_triples", lambda: (self._read_chunk_triples(),))[0]

    def _read_chunk_triples(self) -> tuple[np.ndarray, np.ndarray] | None:
        from gpurag.store import checks, layout

        r = self.retriever
        if "typed" not in checks.table_columns(r.dir, layout.FACTS):
            return None
        facts = r.dir.table(layout.FACTS, columns=["chunk", "typed"])
        if not facts["typed"].any():
            return None
        ids = np.flatnonzero(facts["typed"].to_numpy(bool))
        chunk = facts["chunk"].to_numpy(np.int64)[ids]
        order = np.argsort(chunk, kind="stable")
        indptr = np.searchsorted(chunk[order], np.arange(r.n_psg + 1))
        return (indptr.astype(np.int64), ids[order])

    def name_tokens(self, names: np.ndarray) -> Tokens:
        """The BM25 tokens of the entities ``names`` (ids) as ``lexical.tokens`` of their names
        gives them, each name tokenized once per opened index (the first query that needs it)
        and kept as a slice of one growing id buffer: ``(start, length)`` per entity."""
        from gpurag.query.lexical import Tokens

        lexical = self.retriever.lexical
        names = np.asarray(names, np.int64)
        with self._lock:
            memo = self.__dict__.get("_name_memo")
            if memo is None or memo[0] is not lexical:
                n_ent = len(self.retriever.entity_names)
                memo = self._name_memo = [lexical, np.full(n_ent, -1, np.int64),
                                          np.zeros(n_ent, np.int32), np.zeros(0, np.int64), 0]
            _, start, length, buf, used = memo
            new = names[start[names] < 0]
            if new.size:  # names not seen yet: tokenized together, appended to the buffer
                t = lexical.tokens(self.retriever.entity_names[new].tolist())
                if used + t.ids.size > buf.size:
                    grown = np.zeros(max(2 * buf.size, used + t.ids.size, 1024), np.int64)
                    grown[:used] = buf[:used]
                    buf = memo[3] = grown
                buf[used:used + t.ids.size] = t.ids
                start[new] = used + t.indptr[:-1]
                length[new] = np.diff(t.indptr)
                used = memo[4] = used + t.ids.size
            size = length[names].astype(np.int64)
            _, ids = csr_rows(np.zeros(names.size, np.int64), start[names], size, buf)
        indptr = np.zeros(names.size + 1, np.int64)
        np.cumsum(size, out=indptr[1:])
        return Tokens(indptr, ids)

    def expanded(self, ranking: np.ndarray, questions: list[str], top: int,
                 qvecs: np.ndarray | None = None, triples: int = 0, *, tokens=None,
                 linked=None, stages=None) -> np.ndarray:
        """Per question, the BM25 pages of the question expanded by each entity its ``top``
        passages mention (:func:`expansion_pairs`), ``(q, BRIDGE_DEPTH)``; with ``triples``
        (and ``qvecs``) and an index with labelled triples, only the entities of the
        ``triples`` best triples where the top passages have any (:func:`best_expansions`).

        Each expansion is the question's tokens followed by its entity name's, as the text
        "question name" tokenizes; with an exact BM25 index they are scored from each
        question's BM25 row read once and the names' postings
        (:func:`gpurag.query.expansion_bm25.expansion_topk`), else searched as texts."""
        from gpurag.query.linking import LinkedBatch

        r = self.retriever
        if linked is None:
            linked = r.linker.link_batch(questions)
        elif not isinstance(linked, LinkedBatch):
            linked = LinkedBatch.from_lists(linked)
        owner, entity = expansion_pairs(ranking[:, :top], r.mentions, r.title_entity,
                                        (linked.q, linked.entity))
        chunk_triples = self.chunk_triples() if triples > 0 and qvecs is not None else None
        if chunk_triples is not None and len(owner):
            keys, scores = triple_entity_scores(
                ranking[:, :top], chunk_triples, (r.fact_indptr, r.fact_entities),
                PassageVectors(r.fact_index), qvecs, r.n_ent)
            owner, entity = best_expansions(owner, entity, keys, scores, r.n_ent, triples)
        if not len(owner):
            return np.full((len(questions), BRIDGE_DEPTH), -1, np.int64)
        if stages is not None:
            stages.lap("second_hop")
        lexical = r.lexical
        if lexical.exact:
            if tokens is None:
                tokens = lexical.tokens(questions)
            names, at = np.unique(entity, return_inverse=True)
            name_tokens = self.name_tokens(names)
            # == search_tokens(tokens.concat(owner, name_tokens, at)), each question read once
            from gpurag.query.expansion_bm25 import expansion_topk

            scores, rows = expansion_topk(lexical, tokens, owner, name_tokens, at,
                                          EXPANSION_HITS)
        else:
            texts = [f"{questions[i]} {r.entity_names[e]}" for i, e in
                     zip(owner.tolist(), entity.tolist(), strict=True)]
            scores, rows = lexical.search(texts, EXPANSION_HITS)
        if stages is not None:
            stages.lap("expansion_bm25")
        return expansion_ranking(owner, rows, scores, len(questions))
