"""Local deletes: a delete that costs what the removed documents touched, not what the index holds.

The exact delete (:mod:`gpurag.pipeline.incremental`) re-runs the graph stage over every chunk
that stays. A local delete instead

* drops the documents' chunks and their passage vectors (FAISS ``remove_ids``; an IVF index
  keeps its trained lists and takes the kept vectors again), renumbering the later chunks;
* drops their mentions, relations and facts, and subtracts what they counted from the
  entities and surface names they named;
* **blanks** what only they supported instead of renumbering it: a surface name no remaining
  chunk uses keeps its row in the name and alias tables and the name index, with its text (and
  lookup key) emptied, its count zero and its vector set to zero (an HNSW index cannot remove
  vectors, and a rebuild of it costs minutes at 50k passages); an entity left without names
  keeps its id with its name emptied and its counts zero; a fact of a removed chunk becomes an
  empty row (no text, no entities, a zero vector). Nothing a deleted document alone said stays
  readable in the new version, and entity ids stay stable (communities, graph and facts need
  no remapping);
* subtracts the removed relations' weights from the graph and drops the removed passages'
  nodes and every edge of a blanked entity;
* keeps the communities (a blanked entity stays placed where it was) and updates the BM25
  model (:mod:`gpurag.pipeline.incremental_lexical`: the removed passages' term counts out,
  every weight recomputed; the scores a rebuild gives).

The result is within a tolerance of a full build of what stays (a typed fact first stated by a
removed chunk is dropped even when another chunk states it too; the extraction of the chunks
after the first removed one may differ from the batches a build gives them, so ``exact_below``
moves down to it) and ``gpurag compact`` restores the full build byte for byte.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa

from gpurag.arrays import unique_sorted
from gpurag.backends.part import BuildRecord
from gpurag.config import IndexConfig
from gpurag.extract.base import Extraction
from gpurag.graph import csr as csr_mod
from gpurag.graph.csr import CSRGraph
from gpurag.pipeline import incremental as inc
from gpurag.pipeline import incremental_local as local
from gpurag.pipeline.graph_stage import drop_date_entities
from gpurag.profile import hnsw_options
from gpurag.store import IndexWriter, WriteLock, layout
from gpurag.store.parts import parts_of
from gpurag.store.reader import IndexDir
from gpurag.vectors import build_index, save_index
from gpurag.vectors.codec import codec_for, decode_all
from gpurag.vectors.faiss_index import index_kind
from gpurag.vectors.parted import PartedIndex

if TYPE_CHECKING:  # the runtime is built at the edge and passed down
    from gpurag.runtime import Runtime

COMMUNITIES_DELETE = ("kept from the previous version: entities a delete left without names "
                      "stay placed (blanked); nothing is re-clustered")


# -- vectors --------------------------------------------------------------------------------
def shrunk_index(index, drop_rows: np.ndarray, rel: str, cfg: IndexConfig, hnsw: bool,
                 rebuilt: list[str]):
    """``index`` (read writable; a :class:`~gpurag.vectors.parted.PartedIndex` of a writable
    base and its parts) without the vectors ``drop_rows``, later ids shifted down:
    ``remove_ids`` on a flat index (its parts added first), the kept vectors added again to an
    emptied IVF index (its trained lists kept), a rebuild when the new size needs another
    index kind (``rebuilt`` names ``rel`` then)."""
    from gpurag.vectors.faiss_index import _faiss

    faiss = _faiss()
    parted = isinstance(index, PartedIndex)
    base = index.base if parted else index
    drop_rows = np.asarray(drop_rows, np.int64)
    if not len(drop_rows) and not parted:
        return index
    n_old = int(index.ntotal)
    hnsw_threshold = cfg.hnsw_threshold if hnsw else None
    keep = np.ones(n_old, bool)
    keep[drop_rows] = False
    same_kind = index_kind(n_old, cfg.ivf_threshold, hnsw_threshold) == index_kind(
        int(keep.sum()), cfg.ivf_threshold, hnsw_threshold)
    if same_kind and not isinstance(base, faiss.IndexIVF | faiss.IndexHNSW):
        # a flat base with parts: not reached from delete_local, whose _writable_index adds a
        # flat base's parts itself (it keeps a PartedIndex over IVF/HNSW bases only); kept so
        # that any PartedIndex shrinks alike (tests/pipeline/test_incremental_delete.py)
        for part in index.parts if parted else []:
            base.add(decode_all(part))
        base.remove_ids(drop_rows)
        return base
    kept = decode_all(index)[keep]
    if same_kind and isinstance(base, faiss.IndexIVF):
        base.reset()
        base.add(kept)
        return base
    rebuilt.append(rel)
    return build_index(kept, cfg.ivf_threshold, cfg.seed, hnsw_threshold,
                       codec=codec_for(cfg.vector_precision, kept.shape[1]),
                       hnsw=hnsw_options(cfg.build_profile()))


def blank_vectors(index, rows: np.ndarray) -> None:
    """Set the stored vectors ``rows`` of a flat, scalar-quantized or HNSW index to zero in
    place (they stay as ids, scoring 0 against every query)."""
    from gpurag.vectors.faiss_index import _faiss

    faiss = _faiss()
    rows = np.asarray(rows, np.int64)
    if not len(rows):
        return
    if isinstance(index, faiss.IndexIVF):  # the codes live in lists: take out, add back zero
        index.remove_ids(rows)
        index.add_with_ids(np.zeros((len(rows), int(index.d)), np.float32), rows)
        return
    store = faiss.downcast_index(index.storage) if isinstance(index, faiss.IndexHNSW) else index
    size = int(store.code_size)
    codes = faiss.rev_swig_ptr(store.codes.data(), int(store.ntotal) * size).reshape(-1, size)
    codes[rows] = store.sa_encode(np.zeros((1, int(index.d)), np.float32))


# -- graph ----------------------------------------------------------------------------------
def shrunk_graph(stored: CSRGraph, n_ent: int, drop_passage: np.ndarray, blanked: np.ndarray,
                 removed: pd.DataFrame) -> CSRGraph:
    """The stored graph (entities then passages) without the passages ``drop_passage`` (their
    nodes and edges; later passages renumbered), without any edge of the ``blanked`` entities,
    and with the ``removed`` relations' weights (``head_entity``, ``tail_entity``, ``weight``)
    subtracted from their entity pairs (a pair left with no weight loses its edge)."""
    indptr = np.asarray(stored.indptr, np.int64)
    n_old = len(indptr) - 1
    rows = np.repeat(np.arange(n_old, dtype=np.int64), np.diff(indptr))
    cols = np.asarray(stored.indices, np.int64)
    w = np.asarray(stored.weights, np.float64).copy()
    drop_entry = np.zeros(len(w), bool)
    if len(removed):
        pair = (removed.groupby(["head_entity", "tail_entity"], sort=False)["weight"].sum()
                .reset_index())
        h = pair["head_entity"].to_numpy(np.int64)
        t = pair["tail_entity"].to_numpy(np.int64)
        dw = pair["weight"].to_numpy(np.float64)
        src, dst, dw = np.r_[h, t], np.r_[t, h], np.r_[dw, dw]
        key = rows * n_old + cols
        order = None if np.all(key[1:] >= key[:-1]) else np.argsort(key, kind="stable")
        skey = key if order is None else key[order]
        want = src * n_old + dst
        pos = np.searchsorted(skey, want)
        found = (pos < len(skey)) & (skey[np.minimum(pos, len(skey) - 1)] == want)
        pos = pos[found] if order is None else order[pos[found]]
        sub = pd.DataFrame({"pos": pos, "dw": dw[found]}).groupby("pos")["dw"].sum()
        at = sub.index.to_numpy(np.int64)
        w[at] -= sub.to_numpy()
        drop_entry[at] = w[at] <= 1e-4 * sub.to_numpy() + 1e-6
    node_keep = np.ones(n_old, bool)
    node_keep[n_ent:] = ~drop_passage
    live = node_keep.copy()
    live[:n_ent] &= ~blanked
    keep = live[rows] & live[cols] & ~drop_entry
    new_id = np.cumsum(node_keep) - 1
    n_new = int(node_keep.sum())
    counts = np.bincount(new_id[rows[keep]], minlength=n_new)
    return CSRGraph(indptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                    indices=new_id[cols[keep]].astype(np.int32),
                    weights=w[keep].astype(np.float32))


# -- tables ---------------------------------------------------------------------------------
def renumbered_table(table: pa.Table, drop: np.ndarray, new_pos: np.ndarray
                     ) -> tuple[pa.Table, pd.DataFrame]:
    """The rows of the stored ``table`` whose ``chunk`` stays, renumbered, and those of the
    removed chunks. The kept rows stay Arrow (filtered, their ``chunk`` column replaced in its
    own type: no pandas round trip of the strings, written as they are); only the removed
    chunks' rows (few) become a frame."""
    at = table.schema.get_field_index("chunk")
    chunk = table.column(at).to_numpy().astype(np.int64)
    gone = drop[chunk]
    kept = table.filter(pa.array(~gone))
    kept = kept.set_column(at, table.schema.field(at),
                           pa.array(new_pos[chunk[~gone]], type=table.schema.field(at).type))
    return kept, table.filter(pa.array(gone)).to_pandas()


def delete_local(out: Path, lock: WriteLock, d: IndexDir, wanted: list[str],
                 runtime: Runtime, show: bool | None) -> inc.UpdateResult:
    """Remove the documents ``wanted`` from the committed version ``d`` of ``out`` as a local
    update (under the write lock ``lock``)."""
    cfg = local.stored_config(d)
    manifest = d.manifest
    old_table = d.arrow_table(layout.CHUNKS)
    old = old_table.select(["doc_id"]).to_pandas()
    found, missing, drop = inc.documents_to_drop(old, wanted, out)
    timings: dict[str, float] = {}
    record = BuildRecord()
    record.record("device", runtime.device)
    keep = ~drop
    new_pos = np.where(keep, np.cumsum(keep) - 1, -1)
    first = int(np.flatnonzero(drop)[0])
    result = inc.UpdateResult("delete", out, None, documents=found, chunks=int(drop.sum()),
                              not_found=missing, timings_s=timings)
    rebuilt: list[str] = []
    # each table is written as soon as it is known and let go (the peak is the FAISS stage's)
    writer = IndexWriter(out, lock=lock)
    try:
        t0 = time.perf_counter()
        writer.write_table(layout.CHUNKS, old_table.filter(pa.array(keep)))  # the same bytes
        no_chunks = old_table.schema.empty_table().to_pandas()
        del old_table
        raw_m, gone_m = renumbered_table(d.arrow_table(layout.EXTRACT_MENTIONS), drop, new_pos)
        writer.write_table(layout.EXTRACT_MENTIONS, raw_m)
        raw_r, gone_r = renumbered_table(d.arrow_table(layout.EXTRACT_RELATIONS), drop, new_pos)
        writer.write_table(layout.EXTRACT_RELATIONS, raw_r)
        del raw_m, raw_r
        gone = Extraction(mentions=gone_m, relations=gone_r)
        if not cfg.graph_dates:
            gone = drop_date_entities(gone)
        names = d.table(layout.NAMES)
        lost, _ = local._new_name_table(gone)
        row = local.stored_name_rows(names, lost.index.to_numpy(dtype=object))
        dec = np.zeros(len(names), np.int64)
        ok = row >= 0
        np.add.at(dec, row[ok], lost.to_numpy(np.int64)[ok])
        count = np.maximum(names["count"].to_numpy(np.int64) - dec, 0)
        dead = (dec > 0) & (count == 0)
        dead_names = set(names.loc[dead, "name"].astype(str))
        names = names.assign(count=count.astype(names["count"].dtype),
                             name=names["name"].where(~dead, ""))
        aliases = d.table(layout.ALIASES)
        gone_alias = aliases["name"].astype(str).isin(dead_names).to_numpy()
        aliases = aliases.assign(name=aliases["name"].where(~gone_alias, ""),
                                 key=aliases["key"].where(~gone_alias, ""))
        mentions, removed_m = renumbered_table(d.arrow_table(layout.MENTIONS), drop, new_pos)
        writer.write_table(layout.MENTIONS, mentions)
        n_mentions = len(mentions)
        relations, removed_r = renumbered_table(d.arrow_table(layout.RELATIONS), drop, new_pos)
        writer.write_table(layout.RELATIONS, relations)
        n_relations = len(relations)
        del mentions, relations
        entities = d.table(layout.ENTITIES)
        entities = recounted_entities(entities, names, removed_m,
                                      unique_sorted(names["entity"].to_numpy(np.int64)[dec > 0]))
        blanked = entities["name"].astype(str).eq("").to_numpy() & (
            entities["n_mentions"].to_numpy() == 0)
        timings["resolve_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        facts = d.table(layout.FACTS)
        f_chunk = facts["chunk"].to_numpy(np.int64)
        f_drop = drop[f_chunk]
        facts = facts.assign(
            chunk=np.where(f_drop, 0, new_pos[f_chunk]), text=facts["text"].where(~f_drop, ""),
            weight=np.where(f_drop, 0, facts["weight"].to_numpy()),
            **({"typed": np.where(f_drop, False, facts["typed"].to_numpy(bool))}
               if "typed" in facts.columns else {})).astype(facts.dtypes.to_dict())
        f_ptr = np.asarray(d.array(layout.FACT_ENTITY_INDPTR, mmap=False))
        f_ent = np.asarray(d.array(layout.FACT_ENTITY_INDICES, mmap=False))
        lengths = np.diff(f_ptr)
        f_ent = f_ent[np.repeat(~f_drop, lengths)]
        lengths = np.where(f_drop, 0, lengths)
        f_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(f_ptr.dtype)
        graph = shrunk_graph(csr_mod.load(d.file(layout.GRAPH_DIR), mmap=True), len(entities),
                             drop, blanked, removed_r)
        timings["graph_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        save_index(shrunk_index(local._writable_index(d, layout.PASSAGES_FAISS, True),
                                np.flatnonzero(drop), layout.PASSAGES_FAISS, cfg, False,
                                rebuilt), writer.path(layout.PASSAGES_FAISS))
        timings["passage_index_s"] = time.perf_counter() - t0
        lexical = local.write_lexical(
            writer, lambda: d.table(layout.CHUNKS)[keep].reset_index(drop=True), record,
            timings, d, keep, no_chunks)

        t0 = time.perf_counter()
        name_index = local._writable_index(d, layout.NAMES_FAISS)
        blank_vectors(name_index, np.flatnonzero(dead))
        save_index(name_index, writer.path(layout.NAMES_FAISS))
        del name_index
        fact_index = local._writable_index(d, layout.FACTS_FAISS)
        blank_vectors(fact_index, np.flatnonzero(f_drop))
        save_index(fact_index, writer.path(layout.FACTS_FAISS))
        del fact_index
        writer.write_table(layout.NAMES, names)
        writer.write_array(layout.FACT_ENTITY_INDPTR, f_ptr)
        writer.write_array(layout.FACT_ENTITY_INDICES, f_ent)
        csr_mod.save(graph, writer.path(layout.GRAPH_DIR))
        for rel, frame in ((layout.ENTITIES, entities), (layout.ALIASES, aliases),
                           (layout.FACTS, facts)):
            writer.write_table(rel, frame)
        # the counts need only the community levels and the stored extraction totals (the
        # stats table is kept as it is: its sums are the stored version's ``extract_*``)
        communities = d.table(layout.COMMUNITIES, columns=["level"])
        stats = (local.carried_stats(manifest.counts, None) if d.has(layout.EXTRACT_STATS)
                 else None)
        # unchanged by a delete: carried over as stored (linked), not re-encoded
        for rel in (layout.COMMUNITIES, layout.EXTRACT_STATS):
            for name in (rel, *parts_of(manifest.files, rel)):
                if name in manifest.files:
                    writer.keep(d, name)
        timings["graph_write_s"] = time.perf_counter() - t0

        documents = int(manifest.counts.get("documents", old["doc_id"].nunique()))
        counts = {"documents": documents - len(found), "chunks": int(keep.sum()),
                  **local.table_counts(entities, aliases, names, n_mentions, n_relations,
                                       facts, graph, communities, stats)}
        info = dict(manifest.extra.get("incremental") or {})
        change = {"op": "delete", "documents": inc._ids(found), "chunks": int(drop.sum()),
                  "not_found": missing[: inc.MAX_IDS_RECORDED], "reextracted_chunks": 0}
        incremental = {
            "mode": local.LOCAL,
            "exact_below": min(int(info.get("exact_below", len(old))), first),
            "local_updates": int(info.get("local_updates", 0)) + 1,
            "updated_locally": ["chunks and passage vectors removed",
                                "mentions, relations and facts of the removed chunks dropped",
                                "name and entity counts (names no chunk uses blanked)",
                                "graph CSR (removed passages and relation weights taken out)"],
            "communities": COMMUNITIES_DELETE,
            "recomputed": [local.lexical_note(lexical)],
            "rebuilt_indexes": rebuilt,
            "blanked_names": int(dead.sum()),
            "blanked_entities": int(blanked.sum()),
            "blanked_facts": int(f_drop.sum()),
            "tolerance": local.TOLERANCE,
        }
        result.extra = local.commit(writer, manifest, record, counts, change, timings,
                                    incremental, COMMUNITIES_DELETE)
    except BaseException:
        writer.abort()
        raise
    result.version = result.extra["version"]
    return result


def recounted_entities(entities: pd.DataFrame, names: pd.DataFrame,
                       removed_mentions: pd.DataFrame, changed: np.ndarray | None = None
                       ) -> pd.DataFrame:
    """The entity table after a delete: passage and mention counts less the removed mentions'
    (``entity``, ``chunk``: stored numbering), display name, alias and occurrence counts
    recomputed from ``names`` (blanked names count for nothing; an entity with none left gets
    an empty name); ``changed``: the entities whose names lost counts (the others keep their
    display names), None for all."""
    lost_p, lost_m = local.mention_counts(removed_mentions, len(entities))
    return local.update_entities(entities, names, len(entities), [], -lost_p, -lost_m, changed)
