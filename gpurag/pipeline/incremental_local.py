"""Local inserts: an insert that costs what the new documents change, not what the index holds.

The exact insert (:mod:`gpurag.pipeline.incremental`) re-runs the graph stage over the whole
corpus, so its cost grows with the index. A local insert instead

* extracts only the new chunks (in batches of their own, starting at the first new chunk);
* resolves only the names not stored yet, against the stored name index
  (:mod:`gpurag.resolve.incremental`): stored entities keep their ids and are never merged;
* appends the new mentions, relations, facts and entities to the stored tables and updates the
  counts of the entities they touch;
* writes the new passage, name and fact vectors as a part of each FAISS index (a flat index in
  the stored codec, :mod:`gpurag.vectors.parted`; the stored file is kept as it is and readers
  search the base and its parts as one index); an index whose size crosses the threshold where
  a build picks another kind is rebuilt from its stored vectors;
* writes the changed entries of the CSR graph as a delta part beside the stored CSR files
  (:mod:`gpurag.graph.delta`: merged on read, exactly the graph a whole rewrite gives; folded
  into a new base when it outgrows :data:`~gpurag.graph.delta.FOLD_FRACTION` of it).

Communities are repaired locally (:func:`repair_communities`: a new entity joins every
community of its most strongly linked stored entity, the others form new level-0 communities;
nothing is re-split, so a community may grow past ``max_community_size``) and the BM25 model
gets the new chunks' term counts as a delta beside the stored one
(:mod:`gpurag.query.lexical_delta`, weighted by readers with the statistics of now), or, past
the build profile's ``lexical_reweight_growth``, is re-weighted whole from the stored counts
(:mod:`~gpurag.pipeline.incremental_lexical`: the scores a rebuild gives). The result is not byte-
identical to a full build: the extraction of the new chunks may differ from the batch a build
gives them (the fast extractor's sentence-initial rule looks at its batch), new names never
merge stored entities, a new typed triple equal to a stored one is a second fact, and Leiden
would cluster the grown graph differently. The manifest says so (``extra["incremental"]``:
``mode: "local"``, ``exact_below``: the chunks below it are as a full build has them) and
``gpurag compact`` (:func:`compact_index`) rebuilds the graph from what the index holds, giving
the full build's files byte for byte.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from gpurag.arrays import setdiff_sorted, unique_sorted
from gpurag.backends.part import BuildRecord, implementation_name
from gpurag.config import IndexConfig, stored_plan
from gpurag.errors import InputError
from gpurag.extract.base import Extraction
from gpurag.graph import csr as csr_mod
from gpurag.graph.csr import CSRGraph, build_csr
from gpurag.pipeline import incremental as inc
from gpurag.pipeline.facts import sentence_facts, triple_facts
from gpurag.pipeline.graph_stage import (
    KnowledgeGraph,
    batch_stats_sums,
    detect_communities,
    drop_date_entities,
    mention_weights,
    name_labels,
)
from gpurag.profile import alias_options, hnsw_options
from gpurag.resolve.incremental import resolve_new_names
from gpurag.resolve.normalize import alias_key_column, normalize_name
from gpurag.store import IndexWriter, WriteLock, layout, open_index_dir
from gpurag.store.checks import table_rows
from gpurag.store.diskio import naming
from gpurag.store.reader import IndexDir
from gpurag.vectors import build_index, save_index
from gpurag.vectors.codec import codec_for, decode_all
from gpurag.vectors.faiss_index import faiss_implementation, index_kind, search
from gpurag.vectors.parted import PartedIndex, delta_index

if TYPE_CHECKING:  # the runtime is built at the edge and passed down
    from gpurag.runtime import Runtime

log = logging.getLogger(__name__)

LOCAL = "local"
COMMUNITIES = "full re-cluster"
COMMUNITIES_LOCAL = ("local repair: a new entity joins the communities (every level) of its "
                     "most strongly linked stored entity; new entities linked to none form new "
                     "level-0 communities by connected component; nothing is re-split")
# The share of the base CSR's entries the graph delta may reach before an insert folds it
# (gpurag.graph.delta.FOLD_FRACTION; a module attribute so tests can force either way).
DELTA_FOLD_FRACTION = None  # None: the delta module's
TOLERANCE = ("answers within a tolerance of a full build (tests: Recall@5 within 0.01, the "
             "same top-5 documents for >= 95% of questions); `gpurag compact` restores the "
             "full build byte for byte")


# -- what a local update reads --------------------------------------------------------------
def stored_config(d: IndexDir) -> IndexConfig:
    """The config the index at ``d`` was built with, its build profile's constants included
    (a :data:`~gpurag.config.BuildPlan`; keys this gpurag does not know dropped)."""
    return stored_plan(d.manifest.config)


def why_not_local(d: IndexDir, cfg: IndexConfig) -> str | None:
    """Why an insert into ``d`` must take the exact path (None: it can be local)."""
    if not cfg.graph:
        return "a dense-only index has no graph to update"
    if not (d.has(layout.EXTRACT_MENTIONS) and d.has(layout.EXTRACT_RELATIONS)):
        return "the index keeps no extraction (built before it was stored)"
    if d.has(layout.DESCRIPTIONS) or d.has(layout.EXTRACT_DESCRIPTIONS) or d.has(layout.REPORTS):
        return "LLM descriptions and community reports are re-derived over the whole corpus"
    if cfg.extractor.strip().lower() == "llm" and not cfg.triples:
        return "LLM extraction goes through the exact path (its response cache)"
    return None


def _writable_index(d: IndexDir, rel: str, parted: bool = False):
    """The stored FAISS index read into memory (not mapped), so vectors can be added or
    removed; the vectors of its appended parts (local inserts) added to it, so it holds every
    row in order (its writer then writes it whole: the parts are not carried over).
    ``parted``: over an IVF or HNSW base, the parts are not added (an HNSW graph insertion or
    IVF assignment for nothing where the caller re-adds every vector anyway): a
    :class:`PartedIndex` of the in-memory base and the stored parts. (A local delete writes
    no FAISS file: it tombstones rows, :mod:`gpurag.pipeline.incremental_delete`.)"""
    from gpurag.vectors.faiss_index import _faiss, load_index

    faiss = _faiss()
    index = faiss.read_index(str(d.file(rel)))
    names = d.parts(rel)[1:]
    if parted and names and isinstance(index, faiss.IndexIVF | faiss.IndexHNSW):
        return PartedIndex(index, [load_index(d.file(n), shown=d.root / n) for n in names])
    for name in names:
        index.add(d.decoded(name))
    return index


def needs_rebuild(n_old: int, n_new: int, cfg: IndexConfig, hnsw: bool) -> bool:
    """Whether ``n_old + n_new`` vectors need another index kind than ``n_old`` (a build would
    pick it: :func:`~gpurag.vectors.faiss_index.index_kind`)."""
    hnsw_threshold = cfg.hnsw_threshold if hnsw else None
    return index_kind(n_old, cfg.ivf_threshold, hnsw_threshold) != index_kind(
        n_old + n_new, cfg.ivf_threshold, hnsw_threshold)


def rebuilt_index(index, new: np.ndarray, cfg: IndexConfig, hnsw: bool):
    """A build's index over the vectors of ``index`` and then ``new``."""
    old = decode_all(index)
    return build_index(np.concatenate([old, new.astype(np.float32)]), cfg.ivf_threshold,
                       cfg.seed, cfg.hnsw_threshold if hnsw else None,
                       hnsw=hnsw_options(cfg.build_profile()),
                       codec=codec_for(cfg.vector_precision, old.shape[1]))


def append_vectors(writer: IndexWriter, d: IndexDir, rel: str, stored, new: np.ndarray,
                   cfg: IndexConfig, hnsw: bool, rebuilt: list[str]) -> None:
    """FAISS file ``rel`` of the new version: the stored index (``stored``, as
    :meth:`IndexDir.faiss` reads it) kept and ``new`` written as a part of its own (a flat
    index in the stored codec: :mod:`gpurag.vectors.parted`), so an insert writes only its
    new vectors; rebuilt whole (``rebuilt`` names ``rel``) when the new size needs another
    index kind, or when its parts would hold more vectors than a build keeps flat (over an
    HNSW or IVF base they are scanned exactly by every query, so they must not grow without
    bound between compactions)."""
    in_parts = int(stored.ntotal - stored.base.ntotal) if isinstance(stored, PartedIndex) else 0
    flat_parts = index_kind(in_parts + len(new), cfg.ivf_threshold,
                            cfg.hnsw_threshold if hnsw else None) == "flat"
    if needs_rebuild(int(stored.ntotal), len(new), cfg, hnsw) or not flat_parts:
        rebuilt.append(rel)
        save_index(rebuilt_index(stored, new, cfg, hnsw), writer.path(rel))
        return
    codec = codec_for(cfg.vector_precision, int(stored.d))
    writer.append_faiss(d, rel, np.asarray(new, np.float32).reshape(-1, int(stored.d)),
                        lambda vectors: delta_index(vectors, codec))


# -- the graph delta ------------------------------------------------------------------------
@dataclasses.dataclass
class GraphDelta:
    """The new version's graph tables, from the stored ones and the new extraction."""

    entities: pd.DataFrame
    names: pd.DataFrame
    new_aliases: pd.DataFrame
    synonyms: pd.DataFrame
    new_name_vectors: np.ndarray
    new_mentions: pd.DataFrame
    new_relations: pd.DataFrame
    n_new_entities: int
    neighbours: int


def _new_name_table(ex: Extraction) -> tuple[pd.Series, pd.Series]:
    """Occurrences of each surface name in ``ex`` (value_counts order) and its label."""
    names = pd.concat([ex.mentions["name"], ex.relations["head"], ex.relations["tail"]],
                      ignore_index=True).astype(str)
    counts = names.value_counts()
    labels = name_labels(ex.mentions).reindex(counts.index).fillna("").astype(str)
    return counts, labels


def resolve_delta(d: IndexDir, cfg: IndexConfig, ex: Extraction, embedder, name_index,
                  timings: dict[str, float]) -> GraphDelta:
    """Entity ids for the new extraction and the updated entity, name and alias tables."""
    t0 = time.perf_counter()
    entities = d.table(layout.ENTITIES)
    names = d.table(layout.NAMES)
    aliases = d.table(layout.ALIASES)
    counts, labels = _new_name_table(ex)
    uniq = counts.index.to_numpy(dtype=object)
    row = stored_name_rows(names, uniq)
    seen = row >= 0
    unseen = [str(u) for u in uniq[~seen]]
    codec = codec_for(cfg.vector_precision, embedder.dim)
    vecs = (codec.round_trip(embedder.encode(unseen, batch_size=cfg.embed_batch_size),
                             in_place=True) if unseen
            else np.zeros((0, embedder.dim), np.float32))
    timings["resolve_embed_s"] = time.perf_counter() - t0
    n_stored = len(entities)

    def search_names(q: np.ndarray, k: int):
        return search(name_index, q, k)

    res = resolve_new_names(
        unseen, vecs, counts.to_numpy(np.float64)[~seen], labels.to_numpy(dtype=object)[~seen],
        stored_names=names,
        stored_keys=alias_key_column(aliases),
        entity_counts=entities["count"].to_numpy(np.float64),
        entity_labels=entities["label"].astype(str).to_numpy(dtype=object),
        search=search_names, decode=lambda rows: decode_all(name_index, rows),
        **alias_options(cfg.build_profile()))
    entity_of_uniq = np.empty(len(uniq), np.int64)
    entity_of_uniq[seen] = names["entity"].to_numpy(np.int64)[row[seen]]
    entity_of_uniq[~seen] = res.entity
    name_to_entity = pd.Series(entity_of_uniq, index=pd.Index(uniq, dtype=object))

    # names: stored counts grow, the unseen names follow (their vectors go to the index)
    name_counts = names["count"].to_numpy(np.int64).copy()
    np.add.at(name_counts, row[seen], counts.to_numpy(np.int64)[seen])
    names = pd.concat([names.assign(count=name_counts), pd.DataFrame({
        "name": np.asarray(unseen, dtype=object).astype(str),
        "entity": res.entity.astype(names["entity"].dtype),
        "count": counts.to_numpy(np.int64)[~seen]})], ignore_index=True)
    new_alias = pd.DataFrame({"name": unseen, "entity_id": res.entity.astype(np.int32)})
    new_alias["key"] = normalize_name(unseen) if unseen else []

    mentions = ex.mentions.copy()
    mentions["entity"] = name_to_entity.reindex(mentions["name"].astype(str)).to_numpy(np.int64)
    rel = ex.relations.copy()
    rel["head_entity"] = name_to_entity.reindex(rel["head"].astype(str)).to_numpy(np.int64)
    rel["tail_entity"] = name_to_entity.reindex(rel["tail"].astype(str)).to_numpy(np.int64)
    rel = rel[rel["head_entity"] != rel["tail_entity"]]
    grow_p, grow_m = mention_counts(mentions, res.n_stored + len(res.new_labels))
    # only the entities the new names reached (stored or new) get their display name derived
    entities = update_entities(entities, names, res.n_stored, res.new_labels, grow_p, grow_m,
                               unique_sorted(entity_of_uniq[entity_of_uniq < res.n_stored]))
    timings["resolve_s"] = time.perf_counter() - t0
    return GraphDelta(
        entities=entities, names=names, new_aliases=new_alias[list(aliases.columns)],
        synonyms=res.synonym_pairs, new_name_vectors=vecs, new_mentions=mentions,
        new_relations=rel, n_new_entities=len(entities) - n_stored, neighbours=res.neighbours)


def stored_name_rows(names: pd.DataFrame, wanted: np.ndarray) -> np.ndarray:
    """Rows of the ``wanted`` surface names in the stored name table, -1 where absent; names a
    local delete blanked (empty, count 0) are never found, so with no live name (every
    document deleted, or an empty table) all are -1. Distinct ``wanted`` (a few hundred new
    names) are looked up by a hash of them probed with the stored column in Arrow, not a hash
    of every stored name (0.13 s at the 50k index's 130k names); a column that is not of
    strings, or repeated ``wanted``, by a pandas hash of the live names as ``str``."""
    live = names["count"].to_numpy() > 0
    out = np.full(len(wanted), -1, np.int64)
    column = _string_column(names["name"])
    if column is None or not pd.Index(wanted).is_unique:
        rows = np.flatnonzero(live)
        at = pd.Index(names["name"].astype(str).to_numpy(dtype=object)[rows]).get_indexer(
            wanted)
        out[at >= 0] = rows[at[at >= 0]]
        return out
    pos = pc.index_in(column, value_set=pa.array([str(w) for w in wanted], column.type))
    pos = pos.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    hit = np.flatnonzero((pos >= 0) & live)
    out[pos[hit]] = hit  # a live name is stored once
    return out


def _string_column(column: pd.Series) -> pa.Array | None:
    """``column`` as an Arrow string array, None where it is not one (numbers, mixed)."""
    try:
        arr = pa.array(column)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    return arr if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) else None


def mention_counts(mentions: pd.DataFrame, n_ent: int) -> tuple[np.ndarray, np.ndarray]:
    """Per entity (of ``n_ent``): passages it is mentioned in and mentions, in ``mentions``."""
    pairs = mentions.groupby(["entity", "chunk"], sort=False).size().reset_index(name="n")
    return (np.bincount(pairs["entity"].to_numpy(np.int64), minlength=n_ent),
            np.bincount(mentions["entity"].to_numpy(np.int64), minlength=n_ent))


def update_entities(entities: pd.DataFrame, names: pd.DataFrame, n_stored: int,
                    new_labels: list[str], passages: np.ndarray, mentions: np.ndarray,
                    changed: np.ndarray | None = None) -> pd.DataFrame:
    """The entity table over the updated ``names``: display name (most frequent surface form,
    ties to the longest, then the first stored), alias and occurrence counts recomputed, passage
    and mention counts changed by the signed per-entity ``passages`` and ``mentions`` (an insert
    adds, a delete subtracts; never below 0); stored labels kept, new entities labelled.
    ``changed``: the stored entities whose names changed (ids); the display names of the other
    stored ones are kept as stored (the same rule gave them), only these and the new entities'
    are derived (their names ranked, not all of them). None: every display name derived."""
    n_ent = n_stored + len(new_labels)
    ent = names["entity"].to_numpy(np.int64)
    cnt = names["count"].to_numpy(np.float64)
    display = np.empty(n_ent, dtype=object)
    rows = np.arange(len(names))
    if changed is not None:
        redo = np.zeros(n_ent, bool)
        redo[n_stored:] = True
        redo[np.asarray(changed, np.int64)] = True
        display[:n_stored] = entities["name"].to_numpy(dtype=object)
        rows = rows[redo[ent]]
    name_col = names["name"]
    if len(rows) < len(names):
        name_col = name_col.iloc[rows]
    lengths = name_col.astype(str).str.len().to_numpy(np.int64)
    e = ent[rows]
    order = np.lexsort((rows, -lengths, -cnt[rows], e))
    first = order[np.r_[True, e[order][1:] != e[order][:-1]]] if len(order) else order
    display[e[first]] = name_col.to_numpy(dtype=object)[first]
    old_p = np.zeros(n_ent, np.int64)
    old_m = np.zeros(n_ent, np.int64)
    old_p[:n_stored] = entities["n_passages"].to_numpy(np.int64)
    old_m[:n_stored] = entities["n_mentions"].to_numpy(np.int64)
    out = pd.DataFrame({
        "entity_id": np.arange(n_ent, dtype=np.int32),
        "name": display,
        "n_aliases": np.bincount(ent, weights=cnt > 0, minlength=n_ent).astype(np.int32),
        "count": np.bincount(ent, weights=cnt, minlength=n_ent),
        "label": np.concatenate([entities["label"].to_numpy(dtype=object),
                                 np.asarray(new_labels, dtype=object)]),
        "n_passages": np.maximum(old_p + passages, 0).astype(np.int32),
        "n_mentions": np.maximum(old_m + mentions, 0).astype(np.int32),
    })
    extra = [c for c in entities.columns if c not in out.columns]
    if extra:  # columns this code does not derive: stored values, empty for new entities
        out = out.join(entities[extra].reindex(np.arange(n_ent)))
    return out[list(entities.columns)].astype(entities.dtypes.to_dict())


def new_facts(chunks_new: pd.DataFrame, offset: int, delta: GraphDelta
              ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Facts of the new chunks (labelled triples, then sentences naming 2+ entities) with their
    fact -> entity CSR, chunk positions global."""
    from gpurag.extract.base import COOCCURS

    local = delta.new_mentions.assign(chunk=delta.new_mentions["chunk"] - offset)
    parts = [triple_facts(delta.new_relations, COOCCURS), sentence_facts(chunks_new, local)]
    parts[1][0]["chunk"] += offset
    tables = [p[0] for p in parts if len(p[0])]
    if not tables:
        return parts[1][0], np.zeros(1, np.int64), np.zeros(0, np.int64)
    indptr = [np.zeros(1, np.int64)]
    indices = []
    for table, ptr, ent in parts:
        if len(table):
            indptr.append(ptr[1:] + indptr[-1][-1])
            indices.append(ent)
    return (pd.concat(tables, ignore_index=True), np.concatenate(indptr),
            np.concatenate(indices))


def new_edges(delta: GraphDelta, n_passages: int, title_weight: float) -> CSRGraph:
    """The change's own edges (relations, mentions, synonym pairs) over the new version's
    nodes, symmetric, coalesced."""
    n_ent = len(delta.entities)
    n_nodes = n_ent + n_passages
    rel, ment, syn = delta.new_relations, delta.new_mentions, delta.synonyms
    pairs = ment.groupby(["entity", "chunk"], sort=False).size().reset_index(name="n")
    pair = rel.groupby(["head_entity", "tail_entity"], sort=False)["weight"].sum().reset_index()
    src = np.concatenate([pair["head_entity"].to_numpy(np.int64),
                          pairs["entity"].to_numpy(np.int64), syn["a"].to_numpy(np.int64)])
    dst = np.concatenate([pair["tail_entity"].to_numpy(np.int64),
                          pairs["chunk"].to_numpy(np.int64) + n_ent,
                          syn["b"].to_numpy(np.int64)])
    w = np.concatenate([pair["weight"].to_numpy(np.float32),
                        mention_weights(ment, title_weight), syn["score"].to_numpy(np.float32)])
    return build_csr(src, dst, w, n_nodes=n_nodes, symmetric=True)


def merged_graph(stored: CSRGraph, n_ent_old: int, delta: GraphDelta, n_passages: int,
                 title_weight: float) -> KnowledgeGraph:
    """The stored graph with passage ids shifted past the new entities, plus the new edges
    (relations, mentions, synonym pairs), symmetric, coalesced: the whole graph of the new
    version (what a fold of the delta writes; :class:`GraphChange` writes only the change)."""
    n_ent = len(delta.entities)
    shift = n_ent - n_ent_old
    n_nodes = n_ent + n_passages
    n_old = len(stored.indptr) - 1
    rows = np.repeat(np.arange(n_old, dtype=np.int64), np.diff(stored.indptr))
    cols = np.asarray(stored.indices, np.int64)
    rows = np.where(rows >= n_ent_old, rows + shift, rows)
    cols = np.where(cols >= n_ent_old, cols + shift, cols)
    new = new_edges(delta, n_passages, title_weight)
    new_rows = np.repeat(np.arange(n_nodes, dtype=np.int64), np.diff(new.indptr))
    mat = sp.coo_array((np.concatenate([np.asarray(stored.weights, np.float64),
                                        new.weights.astype(np.float64)]),
                        (np.concatenate([rows, new_rows]),
                         np.concatenate([cols, new.indices.astype(np.int64)]))),
                       shape=(n_nodes, n_nodes)).tocsr()
    mat.sum_duplicates()
    graph = CSRGraph(indptr=mat.indptr.astype(np.int64), indices=mat.indices.astype(np.int32),
                     weights=mat.data.astype(np.float32))
    ent = mat[:n_ent, :n_ent].tocsr()
    ent.sum_duplicates()
    entity_graph = CSRGraph(indptr=ent.indptr.astype(np.int64),
                            indices=ent.indices.astype(np.int32),
                            weights=ent.data.astype(np.float32))
    return KnowledgeGraph(graph, entity_graph)


@dataclasses.dataclass
class GraphChange:
    """The graph entries a local insert changes (:mod:`gpurag.graph.delta`): each directed
    pair of the new edges with the weight the whole rewrite gives it (the stored weight plus
    the new, summed as :func:`merged_graph` sums them), read from the stored graph's rows of
    these pairs only."""

    rows: np.ndarray
    cols: np.ndarray
    weights: np.ndarray
    n_nodes: int
    n_edges: int  # entries of the new version's graph
    n_ent: int
    n_passages: int
    n_ent_old: int
    base_entities: int  # the stored base CSR's entities (its first nodes)
    stored_parts: list[str]  # the stored delta's parts (index paths), oldest first
    stored_delta_rows: int  # their entries
    base_edges: int

    @property
    def entity_graph(self) -> CSRGraph:
        """The changed entries among entities, as a CSR over the entities: every row of a new
        entity whole (all its entries are new), stored entities' rows only where they changed
        (what :func:`repair_communities` reads: the new entities' rows)."""
        ent = (self.rows < self.n_ent) & (self.cols < self.n_ent)
        indptr = np.zeros(self.n_ent + 1, np.int64)
        np.cumsum(np.bincount(self.rows[ent], minlength=self.n_ent), out=indptr[1:])
        return CSRGraph(indptr=indptr, indices=self.cols[ent].astype(np.int32),
                        weights=self.weights[ent])

    @property
    def graph(self) -> GraphSize:
        return GraphSize(self.n_nodes, self.n_edges)

    def entries(self) -> np.ndarray:
        """The change as a delta part: ``(key, weight)`` sorted by key."""
        from gpurag.graph import delta as delta_mod

        out = np.empty(self.rows.size, delta_mod.ENTRY)
        out["key"] = delta_mod.keys(self.rows, self.cols, self.n_ent)
        out["weight"] = self.weights
        return out[np.argsort(out["key"], kind="stable")]

    def folds(self, fraction: float) -> bool:
        """Whether the delta, with this change, outgrows ``fraction`` of the base
        (:func:`gpurag.graph.delta.folds`, the delete's rule too)."""
        from gpurag.graph import delta as delta_mod

        return delta_mod.folds(self.stored_delta_rows, self.rows.size, self.base_edges, fraction)


@dataclasses.dataclass(frozen=True)
class GraphSize:
    """What the manifest counts of a graph (:func:`table_counts`)."""

    n_nodes: int
    n_edges: int


def graph_change(d: IndexDir, n_ent_old: int, delta: GraphDelta, n_passages: int,
                 title_weight: float) -> GraphChange:
    """The entries the insert of ``delta`` changes in the stored graph of ``d``."""
    from gpurag.graph import delta as delta_mod
    from gpurag.store.parts import ROWS

    new = new_edges(delta, n_passages, title_weight)
    n_ent = len(delta.entities)
    rows = np.repeat(np.arange(new.n_nodes, dtype=np.int64), np.diff(new.indptr))
    cols = new.indices.astype(np.int64)
    folder = d.file(layout.GRAPH_DIR)
    meta = delta_mod.read_meta(folder) if d.has(f"{layout.GRAPH_DIR}/{delta_mod.META}") else None
    base_edges = int(np.load(d.file(layout.GRAPH_INDICES), mmap_mode="r").shape[0])
    if meta is None:
        base_entities, stored_edges, parts = n_ent_old, base_edges, []
    else:
        delta_mod.check_meta(meta, int(np.load(d.file(layout.GRAPH_INDPTR),
                                               mmap_mode="r").shape[0]) - 1,
                             d.root / layout.GRAPH_DIR)
        base_entities, stored_edges = meta["base_entities"], meta["edges"]
        parts = [f"{layout.GRAPH_DIR}/{Path(p).name}" for p in meta["parts"]]
    old_w, found = delta_mod.stored_weights(folder, base_entities, [d.file(p) for p in parts],
                                            rows, cols, n_ent)
    weights = (old_w.astype(np.float64) + new.weights.astype(np.float64)).astype(np.float32)
    return GraphChange(
        rows=rows, cols=cols, weights=weights, n_nodes=new.n_nodes,
        n_edges=stored_edges + int((~found).sum()), n_ent=n_ent, n_passages=n_passages,
        n_ent_old=n_ent_old, base_entities=base_entities, stored_parts=parts,
        stored_delta_rows=sum(int(d.manifest.files[p].get(ROWS, 0)) for p in parts),
        base_edges=base_edges)


def write_graph(writer: IndexWriter, d: IndexDir, change: GraphChange, delta: GraphDelta,
                title_weight: float, fraction: float) -> str:
    """The new version's graph: the stored CSR files kept and the change a delta part
    (:mod:`gpurag.graph.delta`), or, when the delta outgrows ``fraction`` of the base, the
    merged graph written whole (a fold). Returns "delta" or "folded"."""
    if change.folds(fraction):
        stored = csr_mod.load(d.file(layout.GRAPH_DIR), mmap=True,
                              shown=d.root / layout.GRAPH_DIR)
        kg = merged_graph(stored, change.n_ent_old, delta, change.n_passages, title_weight)
        csr_mod.save(kg.graph, writer.path(layout.GRAPH_DIR))
        return "folded"
    write_graph_delta(writer, d, change.entries(), change.base_entities, change.n_ent,
                      change.n_passages, change.n_edges)
    return "delta"


def write_graph_delta(writer: IndexWriter, d: IndexDir, entries: np.ndarray,
                      base_entities: int, n_ent: int, n_passages: int, n_edges: int) -> None:
    """Keep the stored CSR files (hard links) and write ``entries`` (a
    :mod:`gpurag.graph.delta` part) beside them with the delta's meta: the graph a local
    insert or delete writes when it does not fold."""
    import json

    from gpurag.graph import delta as delta_mod

    for rel in (layout.GRAPH_INDPTR, layout.GRAPH_INDICES, layout.GRAPH_WEIGHTS):
        writer.keep(d, rel)
    parts = writer.append_part(d, delta_mod.PART_REL, entries, delta_mod.union)
    meta = {"format": 1, "base_entities": base_entities, "entities": n_ent,
            "passages": n_passages, "edges": n_edges, "parts": [Path(p).name for p in parts]}
    writer.path(f"{layout.GRAPH_DIR}/{delta_mod.META}").write_text(
        json.dumps(meta, sort_keys=True), encoding="utf-8")


def repair_communities(stored: pd.DataFrame, entity_graph: CSRGraph, n_stored: int
                       ) -> pd.DataFrame | None:
    """The stored communities with the new entities (ids ``n_stored`` on) placed locally: each
    joins every community of its most strongly linked stored entity (ties: the lowest id); the
    rest form new level-0 communities, one per connected component of the edges among them.
    None when the stored table does not hold every stored entity once at level 0."""
    level0 = stored["level"].to_numpy() == 0
    nodes0 = stored["node"].to_numpy(np.int64)[level0]
    if len(nodes0) != n_stored or (n_stored and unique_sorted(nodes0).size != n_stored):
        return None
    n_ent = entity_graph.n_nodes
    if n_ent == n_stored:
        return stored
    ptr = np.asarray(entity_graph.indptr, np.int64)
    rows = np.repeat(np.arange(n_stored, n_ent, dtype=np.int64), np.diff(ptr[n_stored:]))
    cols = np.asarray(entity_graph.indices[ptr[n_stored]:], np.int64)
    weights = np.asarray(entity_graph.weights[ptr[n_stored]:], np.float32)
    linked = cols < n_stored
    best = (pd.DataFrame({"new": rows[linked], "node": cols[linked], "w": weights[linked]})
            .sort_values(["new", "w", "node"], ascending=[True, False, True], kind="stable")
            .drop_duplicates("new"))
    joined = stored.merge(best[["new", "node"]], on="node")
    joined = joined.assign(node=joined["new"]).drop(columns="new")
    alone = setdiff_sorted(np.arange(n_stored, n_ent), best["new"].to_numpy())
    parts = [stored, joined[list(stored.columns)]]
    if len(alone):
        from gpurag.resolve.groups import components

        pos = np.full(n_ent, -1, np.int64)
        pos[alone] = np.arange(len(alone))
        among = (pos[rows] >= 0) & (pos[np.minimum(cols, n_ent - 1)] >= 0) & ~linked
        comp = components(len(alone), pos[rows[among]], pos[cols[among]])
        first = int(stored["community"].max()) + 1 if len(stored) else 0
        parts.append(pd.DataFrame({"node": alone, "level": 0, "community": first + comp,
                                   "parent": -1, "is_final": True}))
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["level", "node"], kind="stable").reset_index(drop=True).astype(
        stored.dtypes.to_dict())


# -- insert ---------------------------------------------------------------------------------
def insert_local(out: Path, lock: WriteLock, d: IndexDir, sources: list[Path],
                 runtime: Runtime, spec: str | None, show: bool | None) -> inc.UpdateResult:
    """Insert ``sources`` into the committed version ``d`` of ``out`` as a local update
    (under the write lock ``lock``)."""
    cfg = stored_config(d)
    manifest = d.manifest
    # ids only: the stored chunks' text is not read (the new rows are appended as a part)
    old = d.table(layout.CHUNKS, columns=["chunk_id", "doc_id"])
    new = inc.chunk_embed_new(out, old, cfg, manifest, sources, runtime, spec, show)
    new_chunks, new_vectors, report, result = new.chunks, new.vectors, new.report, new.result
    work, record, timings = new.work, new.record, new.timings
    added = result.documents
    if not len(new_chunks):
        return result
    embedder = runtime.embedder_for(spec, cache_dir=layout.sibling(out, layout.EMBED_CACHE_SUFFIX))
    n_old = len(old)
    n_chunks = n_old + len(new_chunks)
    # chunks local deletes removed keep their ids (tombstones): the new ones run on after them
    live_old = d.live_chunks(n_old)
    n_deleted = n_old - int(live_old.sum())

    # extraction of the new chunks only
    t0 = time.perf_counter()
    extractor = inc._extractor(cfg, runtime, show)
    record.record("extract", extractor.name)
    raw, raw_stats = inc.extract_from(new_chunks, extractor, 0, offset=n_old)
    timings["extract_s"] = time.perf_counter() - t0
    result.reextracted_chunks = len(new_chunks)
    ex = raw if cfg.graph_dates else drop_date_entities(raw)

    rebuilt: list[str] = []
    name_index = d.faiss(layout.NAMES_FAISS)  # mapped; its parts searched with it
    # resolved against the names in use: rows a delete left unused are searched past
    delta = resolve_delta(d, cfg, ex, embedder, d.searchable(layout.NAMES_FAISS), timings)
    result.embedded_texts = len(delta.new_name_vectors)
    result.reused_vectors = 0

    t0 = time.perf_counter()
    f_table, f_ptr, f_ent = new_facts(new_chunks, n_old, delta)
    # the stored fact -> entity CSR ends at its last part's last pointer
    fact_end = int(d.array(d.parts(layout.FACT_ENTITY_INDPTR)[-1])[-1])
    title_weight = cfg.build_profile().title_edge_weight
    kg: GraphChange | KnowledgeGraph = graph_change(
        d, len(delta.entities) - delta.n_new_entities, delta, n_chunks, title_weight)
    timings["graph_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    n_stored = len(delta.entities) - delta.n_new_entities
    communities = repair_communities(d.table(layout.COMMUNITIES), kg.entity_graph, n_stored)
    how = COMMUNITIES_LOCAL
    if communities is None:  # the stored table does not cover the stored entities
        how = COMMUNITIES
        kg = merged_graph(csr_mod.load(d.file(layout.GRAPH_DIR), mmap=True), n_stored, delta,
                          n_chunks, title_weight)  # Leiden reads the whole graph
        communities = detect_communities(kg, cfg, runtime.leiden)
        if kg.entity_graph.n_nodes:
            record.record("leiden", communities.attrs.get("implementation",
                                                          implementation_name(runtime.leiden)))
    timings["leiden_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    codec = codec_for(cfg.vector_precision, embedder.dim)
    fact_vecs = (codec.round_trip(embedder.encode(f_table["text"].tolist(),
                                                  batch_size=cfg.embed_batch_size),
                                  in_place=True) if len(f_table)
                 else np.zeros((0, embedder.dim), np.float32))
    result.embedded_texts += len(fact_vecs)
    timings["entity_fact_vectors_s"] = time.perf_counter() - t0

    # the extraction counts carried forward: the stored version's totals and the new batches'
    # (reading every stats part to sum them would grow with the number of inserts)
    stats = carried_stats(manifest.counts, raw_stats) if d.has(layout.EXTRACT_STATS) else (
        batch_stats_sums(raw_stats))
    change = {"op": "insert", "documents": inc._ids(added), "chunks": len(new_chunks),
              "documents_read": report.documents, "ingest": report.as_dict(),
              "sources": [str(s) for s in sources],
              "reextracted_chunks": result.reextracted_chunks}
    writer = IndexWriter(out, lock=lock)
    try:
        t0 = time.perf_counter()
        writer.append_table(d, layout.CHUNKS, new_chunks)
        append_vectors(writer, d, layout.PASSAGES_FAISS, d.faiss(layout.PASSAGES_FAISS),
                       new_vectors, cfg, False, rebuilt)
        timings["passage_index_s"] = time.perf_counter() - t0
        # the BM25 model covers the chunks that stay (deleted ones out), in order
        lexical = write_lexical(writer, lambda: pd.concat([d.table(layout.CHUNKS)[live_old],
                                                           new_chunks], ignore_index=True),
                                record, timings, d, np.ones(n_old - n_deleted, bool),
                                new_chunks, lexical_growth(cfg))
        for rel in layout.TOMBSTONES.values():  # what local deletes removed stays removed
            if d.has(rel):
                writer.keep(d, rel)

        t0 = time.perf_counter()
        append_vectors(writer, d, layout.NAMES_FAISS, name_index, delta.new_name_vectors, cfg,
                       True, rebuilt)
        writer.write_table(layout.NAMES, delta.names)
        # appended: the stored files kept as they are, the new rows a part of their own
        writer.append_array(d, layout.FACT_ENTITY_INDPTR, f_ptr[1:] + fact_end)
        writer.append_array(d, layout.FACT_ENTITY_INDICES, f_ent)
        if isinstance(kg, GraphChange):
            graph_how = write_graph(writer, d, kg, delta, title_weight, fold_fraction())
        else:
            graph_how = "whole"
            csr_mod.save(kg.graph, writer.path(layout.GRAPH_DIR))
        append_vectors(writer, d, layout.FACTS_FAISS, d.faiss(layout.FACTS_FAISS), fact_vecs,
                       cfg, True, rebuilt)
        writer.write_table(layout.ENTITIES, delta.entities)
        appended = {layout.ALIASES: delta.new_aliases, layout.MENTIONS: delta.new_mentions,
                    layout.RELATIONS: delta.new_relations, layout.FACTS: f_table,
                    layout.EXTRACT_MENTIONS: raw.mentions,
                    layout.EXTRACT_RELATIONS: raw.relations, layout.EXTRACT_STATS: raw_stats}
        for rel, rows in appended.items():
            writer.append_table(d, rel, rows)
        writer.write_table(layout.COMMUNITIES, communities)
        timings["graph_write_s"] = time.perf_counter() - t0

        documents = int(manifest.counts.get("documents", old["doc_id"].nunique()))
        rows = {rel: live_rows(d, rel) + len(appended[rel])
                for rel in (layout.ALIASES, layout.MENTIONS, layout.RELATIONS, layout.FACTS)}
        counts = {"documents": documents + report.documents, "chunks": n_chunks - n_deleted,
                  **({"deleted_chunks": n_deleted} if n_deleted else {}),
                  **table_counts(delta.entities, rows[layout.ALIASES], delta.names,
                                 rows[layout.MENTIONS], rows[layout.RELATIONS],
                                 rows[layout.FACTS], kg.graph, communities, stats)}
        info = dict(manifest.extra.get("incremental") or {})
        incremental = {
            "mode": LOCAL,
            # a position among the chunks that stay (what compact numbers them by)
            "exact_below": min(int(info.get("exact_below", n_old - n_deleted)),
                               n_old - n_deleted),
            "local_updates": int(info.get("local_updates", 0)) + 1,
            "updated_locally": ["extraction of the new chunks", "alias resolution of new names",
                                "entity, mention, relation and fact tables",
                                "passage/name/fact FAISS indexes (new vectors in a part)",
                                graph_note(graph_how)],
            "communities": how,
            "recomputed": [lexical_note(lexical)],
            "rebuilt_indexes": rebuilt,
            "new_entities": delta.n_new_entities,
            "resolved_against_stored_names": delta.neighbours,
            "tolerance": TOLERANCE,
        }
        result.extra = commit(writer, manifest, record, counts, change, timings, incremental,
                              how)
    except BaseException:
        writer.abort()
        raise
    result.version = result.extra["version"]
    work.remove()
    return result


def write_lexical(writer: IndexWriter, chunks: pd.DataFrame | Callable[[], pd.DataFrame],
                  record: BuildRecord, timings: dict[str, float], d: IndexDir, keep: np.ndarray,
                  new_chunks: pd.DataFrame, growth: float | None = None) -> str:
    """The BM25 model over ``chunks`` (the stored passages ``keep`` and then ``new_chunks``;
    a callable: read only when the model must be rebuilt),
    written into the new version: for an insert (``growth``: the build profile's
    ``lexical_reweight_growth``) the new passages a delta beside the stored model
    (:mod:`gpurag.query.lexical_delta`) while the passage count stays within ``growth`` of
    the last full weighting; else the stored model (its delta included) re-weighted whole by
    the change (:mod:`~gpurag.pipeline.incremental_lexical`, the scores a rebuild gives), or
    rebuilt over all chunks when the stored one cannot be updated. Returns which ("delta",
    "reweighted" or "rebuilt")."""
    from gpurag.device import package_version
    from gpurag.pipeline.incremental_lexical import append_delta, write_lexical_delta
    from gpurag.query.lexical import BM25Index

    record.record("vectors", faiss_implementation())
    t0 = time.perf_counter()
    how = "rebuilt"
    stored = all(d.has(rel) for rel in layout.LEXICAL_FILES)
    if stored and growth is not None and keep.all() and append_delta(writer, d, new_chunks,
                                                                     growth, len(keep)):
        how = "delta"
    elif stored and write_lexical_delta(d.file(layout.LEXICAL_DIR),
                                        writer.path(layout.LEXICAL_DIR), len(keep), keep,
                                        new_chunks):
        how = "reweighted"
    else:
        BM25Index(chunks() if callable(chunks) else chunks).save(writer.path(layout.LEXICAL_DIR))
    record.record("lexical", f"bm25s {package_version('bm25s') or ''}".strip())
    timings["lexical_index_s"] = time.perf_counter() - t0
    return how


def lexical_growth(cfg: IndexConfig) -> float:
    """The BM25 delta's re-weighting bound (the build profile's ``lexical_reweight_growth``)."""
    return cfg.build_profile().lexical_reweight_growth


def fold_fraction() -> float:
    """The graph delta's fold bound: :data:`DELTA_FOLD_FRACTION`, else the delta module's."""
    from gpurag.graph.delta import FOLD_FRACTION

    return FOLD_FRACTION if DELTA_FOLD_FRACTION is None else float(DELTA_FOLD_FRACTION)


def graph_note(how: str) -> str:
    """What the manifest says of the CSR graph of a local insert."""
    return {"delta": "graph CSR (the changed entries a delta part beside the stored CSR, "
                     "merged on read)",
            "folded": "graph CSR (the delta folded: the merged graph written whole)"}.get(
        how, "graph CSR (new edges merged, written whole)")


def lexical_note(how: str) -> str:
    """What the manifest says of the BM25 model of a local update."""
    return {"delta": "BM25 model (the new passages a delta beside the stored model, weighted "
                     "with the corpus statistics of now; the stored weights kept)",
            "reweighted": "BM25 model (the stored weights' counts updated by the change, "
                          "weights recomputed)"}.get(how, "BM25 model (rebuilt over all chunks)")


def carried_stats(counts: dict[str, Any], new: pd.DataFrame | None) -> dict[str, int]:
    """The stored version's extraction totals (its manifest's ``extract_*`` counts: the sums
    of its stats table) plus the sums of the ``new`` stats rows (None: none)."""
    out = {k[len("extract_"):]: int(v) for k, v in counts.items() if k.startswith("extract_")}
    for key, value in batch_stats_sums(new).items():
        out[key] = out.get(key, 0) + value
    return out


def live_rows(d: IndexDir, rel: str) -> int:
    """Rows of table ``rel`` a reader sees: the files' rows, less those of chunks a local
    delete removed from a table it keeps (:data:`gpurag.store.reader.CHUNK_KEYED`: the
    mention and relation tables)."""
    from gpurag.store.reader import CHUNK_KEYED

    if rel in CHUNK_KEYED and d.deleted_chunks().size:
        return d.arrow_table(rel, columns=["chunk"]).num_rows
    return table_rows(d, rel)


def table_counts(entities: pd.DataFrame, aliases: pd.DataFrame | int, names: pd.DataFrame,
                 mentions: pd.DataFrame | int, relations: pd.DataFrame | int,
                 facts: pd.DataFrame | int, graph: CSRGraph | GraphSize, communities: pd.DataFrame,
                 stats: pd.DataFrame | dict[str, int] | None) -> dict[str, int]:
    """The manifest's graph counts (as :func:`~gpurag.pipeline.graph_stage.graph_counts` gives
    them) from the tables a local update writes, or their row counts (rows, blanked ones
    included); ``stats``: the extraction stats table or its sums."""
    def n(rows: pd.DataFrame | int) -> int:
        return rows if isinstance(rows, int) else len(rows)

    aliases, mentions, relations, facts = n(aliases), n(mentions), n(relations), n(facts)
    summed = stats if isinstance(stats, dict) else batch_stats_sums(stats)
    return {
        "entities": len(entities),
        "aliases": aliases,
        "merged_names": len(names) - len(entities),
        "mentions": mentions,
        "relations": relations,
        "facts": facts,
        "graph_nodes": graph.n_nodes,
        "graph_edges": graph.n_edges,
        "community_levels": int(communities["level"].max()) + 1 if len(communities) else 0,
        **{f"extract_{k}": v for k, v in summed.items()},
    }


def commit(writer: IndexWriter, manifest: Any, record: BuildRecord, counts: dict[str, int],
           change: dict[str, Any], timings: dict[str, float],
           incremental: dict[str, Any] | None, communities: str = COMMUNITIES
           ) -> dict[str, Any]:
    """Commit the new version with the lineage :func:`inc.commit_version` writes; returns the
    committed manifest's extra."""
    version = inc._version(manifest) + 1
    history = list(manifest.extra.get("history", []))[-(inc.MAX_HISTORY - 1):]
    history.append({"version": version, "op": change["op"],
                    "documents": change["documents"]["count"], "chunks": change.get("chunks", 0),
                    **({"mode": incremental["mode"]} if incremental else {})})
    extra = {
        **{k: v for k, v in manifest.extra.items()
           if k not in ("timings_s", "change", "history", "parent", "incremental")},
        "timings_s": timings, "version": version,
        "parent": {"version": inc._version(manifest), "created": manifest.created,
                   "checksum": manifest.checksum},
        "change": change, "history": history, "communities": communities,
    }
    if incremental:
        extra["incremental"] = incremental
    writer.commit(config=dict(manifest.config), counts=counts,
                  components={**manifest.components, **record.as_dict()}, extra=extra)
    return extra


# -- compact --------------------------------------------------------------------------------
def compact_index(index: str | Path, *, runtime: Runtime, embedder: str | None = None,
                  show_progress: bool = True) -> inc.UpdateResult:
    """Rebuild the graph of a locally updated index from what it holds (chunks, passage
    vectors, stored extraction, stored name and fact vectors): the result is the full build's
    files byte for byte. The chunks whose stored extraction is not a full build's (from
    ``exact_below``) are extracted again on the build's batch boundaries. An index that is
    already a full build's is left as it is (``version`` None)."""
    show = runtime.show_progress(show_progress)
    out = Path(index).resolve()
    with naming(out), WriteLock(out) as lock:
        d = open_index_dir(out)
        try:
            if (d.manifest.extra.get("incremental") or {}).get("mode") != LOCAL:
                return inc.UpdateResult("compact", out, None)
            stored = inc.load_stored(d)
        finally:
            d.close()
        if stored.extraction is None:
            raise InputError(f"compact: the index {out} keeps no extraction to rebuild from")
        timings: dict[str, float] = {}
        record = BuildRecord()
        record.record("device", runtime.device)
        chunks = stored.chunks
        ex, reextracted = inc._timed_extraction(
            stored, chunks, np.arange(len(chunks)), len(chunks), "insert", runtime, show, record,
            timings)
        graph_embedder = inc._graph_embedder(stored, runtime, embedder)
        result = inc.UpdateResult("compact", out, None, reextracted_chunks=reextracted,
                                  timings_s=timings)
        change = {"op": "compact", "documents": inc._ids([]), "chunks": 0, "documents_read": 0,
                  "reextracted_chunks": reextracted}
        result.extra = inc.commit_version(out, lock, stored, chunks, stored.vectors, ex,
                                          graph_embedder, runtime, record, change, timings,
                                          show)
        result.version = result.extra["version"]
        result.embedded_texts = graph_embedder.misses
        result.reused_vectors = graph_embedder.hits
        return result
