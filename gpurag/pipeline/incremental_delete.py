"""Local deletes: a delete that writes what the removed documents touched, not the index.

The exact delete (:mod:`gpurag.pipeline.incremental`) re-runs the graph stage over every chunk
that stays and writes every file. A local delete keeps chunk ids (nothing is renumbered) and
records the removed chunks as **tombstones**, Lucene's deletion bitset: the sorted ids in
``arrays/deleted_chunks.npy`` (:data:`~gpurag.store.layout.DELETED_CHUNKS`, cumulative over
deletes, sealed in the manifest like every file). A delete

* keeps (hard-links, the same inodes) the chunk table, the passage FAISS index, the stored
  extraction (``extract/*``), the mention and relation tables with their parts, and the
  communities: none of them is rewritten;
* writes the tombstone array; readers apply it: :meth:`~gpurag.store.reader.IndexDir.table`
  gives a deleted chunk blank (no text, title, chunk or document id) and leaves a deleted
  chunk's rows out of the extraction and the mention and relation tables
  (:data:`~gpurag.store.reader.CHUNK_KEYED`; the counts are the rows readers see), dense
  search never returns it (:class:`~gpurag.vectors.masked.MaskedIndex`: FAISS's own ID
  selector on a host index, a wider search and a drop on a device searcher), the BM25 model
  covers only the chunks that stay, and :class:`~gpurag.Index` drops any deleted row from
  every mode's results;
* subtracts what the removed chunks' mentions counted from the entities and surface names
  they named;
* **blanks** what only they supported: a surface name no remaining chunk uses keeps its row in
  the name and alias tables with its text (and lookup key) emptied and its count zero, and its
  vector row is tombstoned (``arrays/deleted_names.npy``: never found, decoded as zeros); an
  entity left without names keeps its id with its name emptied and its counts zero; a fact of
  a removed chunk becomes an empty row (no text, no entities) and its vector row is tombstoned
  (``arrays/deleted_facts.npy``). The name and fact FAISS files are kept as stored;
* takes the removed passages' edges, the removed relations' weights and every edge of a
  blanked entity out of the graph, written as a delta part beside the kept CSR files
  (:func:`write_graph`, :mod:`gpurag.graph.delta`: the entries whose weight changed and the
  removed ones, :data:`~gpurag.graph.delta.REMOVED`; merged on read, bit for bit the graph
  the whole rewrite gives; the CSR written whole, the delta folded in, past the insert's
  fold bound; passage nodes keep their ids, so the
  removed ones stay as nodes without edges), and updates the BM25 model
  (:mod:`gpurag.pipeline.incremental_lexical`: the removed passages' term counts out, every
  weight recomputed; the scores a rebuild gives).

So a delete writes the three tombstone arrays, the name, alias, entity and fact tables, the
fact-entity arrays (whole: their rows change in place, blanked), the graph delta and the
BM25 model (whole), and not the chunk table, the mention or relation table, any FAISS file,
the graph CSR or the stored extraction (at 50k passages 43.8 of 214 MB, from 57.7:
``bench/results/delete_written_2026-12-02_cpu_hostonly.md``; the FAISS files alone are 137).
**The deleted documents' text stays on disk** in the kept chunk table, extraction, mention and
relation tables (and their vectors in the passage index) until ``gpurag compact`` (or an
exact update) writes the full build of what stays: a user deleting for privacy must compact.

The result is within a tolerance of a full build of what stays (a typed fact first stated by a
removed chunk is dropped even when another chunk states it too; the extraction of the chunks
after the first removed one may differ from the batches a build gives them, so ``exact_below``,
a position among the chunks that stay, moves down to it) and ``gpurag compact`` restores the
full build byte for byte.
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
from gpurag.extract.base import Extraction
from gpurag.graph import csr as csr_mod
from gpurag.graph.csr import CSRGraph
from gpurag.pipeline import incremental as inc
from gpurag.pipeline import incremental_local as local
from gpurag.pipeline.graph_stage import drop_date_entities
from gpurag.store import IndexWriter, WriteLock, layout
from gpurag.store.reader import IndexDir

if TYPE_CHECKING:  # the runtime is built at the edge and passed down
    from gpurag.runtime import Runtime

COMMUNITIES_DELETE = ("kept from the previous version: entities a delete left without names "
                      "stay placed (blanked); nothing is re-clustered")


# -- graph ----------------------------------------------------------------------------------
def shrunk_graph(stored: CSRGraph, n_ent: int, drop_passage: np.ndarray, blanked: np.ndarray,
                 removed: pd.DataFrame) -> CSRGraph:
    """The stored graph (entities then passages) without the edges of the passages
    ``drop_passage`` (their nodes stay, without edges: ids are not renumbered), without any
    edge of the ``blanked`` entities,
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
    live = np.ones(n_old, bool)
    live[n_ent:] = ~drop_passage
    live[:n_ent] &= ~blanked
    keep = live[rows] & live[cols] & ~drop_entry
    counts = np.bincount(rows[keep], minlength=n_old)
    return CSRGraph(indptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                    indices=cols[keep].astype(np.int32),
                    weights=w[keep].astype(np.float32))


def graph_entries(stored: CSRGraph, shrunk: CSRGraph, n_ent: int) -> np.ndarray:
    """The delete's change of the graph as a delta part (:mod:`gpurag.graph.delta`): every
    entry of ``stored`` that ``shrunk`` (the same nodes, a subset of its entries) lacks, as
    :data:`~gpurag.graph.delta.REMOVED`, and every one whose weight changed (bit for bit),
    with the new weight; sorted by key."""
    from gpurag.graph import delta as delta_mod

    n = stored.n_nodes
    ip = np.asarray(stored.indptr, np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(ip))
    key = rows * n + np.asarray(stored.indices, np.int64)  # sorted (CSR rows, sorted columns)
    s_ip = np.asarray(shrunk.indptr, np.int64)
    s_key = (np.repeat(np.arange(n, dtype=np.int64), np.diff(s_ip)) * n
             + np.asarray(shrunk.indices, np.int64))
    if key.size > 1 and not np.all(key[1:] > key[:-1]):  # columns not sorted within rows
        order = np.argsort(key, kind="stable")
        pos = order[np.searchsorted(key[order], s_key)]
    else:
        pos = np.searchsorted(key, s_key)  # each kept entry's place among the stored ones
    new_w = np.full(key.size, delta_mod.REMOVED, np.float32)
    new_w[pos] = shrunk.weights
    old_w = np.asarray(stored.weights, np.float32)
    changed = np.flatnonzero(new_w.view(np.int32) != old_w.view(np.int32))
    out = np.empty(changed.size, delta_mod.ENTRY)
    out["key"] = delta_mod.keys(rows[changed], key[changed] - rows[changed] * n, n_ent)
    out["weight"] = new_w[changed]
    return out[np.argsort(out["key"], kind="stable")]


def write_graph(writer: IndexWriter, d: IndexDir, stored: CSRGraph, shrunk: CSRGraph,
                n_ent: int, fraction: float) -> str:
    """The delete's graph: the stored CSR files kept and the change (:func:`graph_entries`) a
    delta part beside them, as a local insert writes its change; the graph ``shrunk`` written
    whole when the delta would outgrow ``fraction`` of the base (a fold). Returns "delta" or
    "folded"."""
    from gpurag.graph import delta as delta_mod
    from gpurag.store.parts import ROWS

    meta_rel = f"{layout.GRAPH_DIR}/{delta_mod.META}"
    meta = delta_mod.read_meta(d.file(layout.GRAPH_DIR)) if d.has(meta_rel) else None
    parts = [] if meta is None else [f"{layout.GRAPH_DIR}/{Path(p).name}"
                                     for p in meta["parts"]]
    stored_rows = sum(int(d.manifest.files[p].get(ROWS, 0)) for p in parts)
    base_edges = int(np.load(d.file(layout.GRAPH_INDICES), mmap_mode="r").shape[0])
    entries = graph_entries(stored, shrunk, n_ent)
    if delta_mod.folds(stored_rows, entries.size, base_edges, fraction):  # the insert's rule
        csr_mod.save(shrunk, writer.path(layout.GRAPH_DIR))
        return "folded"
    local.write_graph_delta(writer, d, entries,
                            n_ent if meta is None else meta["base_entities"], n_ent,
                            shrunk.n_nodes - n_ent, shrunk.n_edges)
    return "delta"


# -- tables ---------------------------------------------------------------------------------
def split_by_chunk(table: pa.Table, drop: np.ndarray) -> tuple[pa.Table, pd.DataFrame]:
    """The rows of the stored ``table`` whose ``chunk`` stays (Arrow, ids unchanged: written
    as they are) and those of the removed chunks (few: a frame)."""
    chunk = table.column("chunk").to_numpy().astype(np.int64)
    gone = drop[chunk]
    return table.filter(pa.array(~gone)), table.filter(pa.array(gone)).to_pandas()


def delete_local(out: Path, lock: WriteLock, d: IndexDir, wanted: list[str],
                 runtime: Runtime, show: bool | None) -> inc.UpdateResult:
    """Remove the documents ``wanted`` from the committed version ``d`` of ``out`` as a local
    update (under the write lock ``lock``): tombstones, nothing renumbered."""
    cfg = local.stored_config(d)
    manifest = d.manifest
    old = d.table(layout.CHUNKS, columns=["doc_id"])  # deleted chunks: blank
    n = len(old)
    live_before = d.live_chunks(n)
    found, missing, drop_live = inc.documents_to_drop(
        old[live_before].reset_index(drop=True), wanted, out)
    drop = np.zeros(n, bool)
    drop[np.flatnonzero(live_before)[drop_live]] = True
    live = live_before & ~drop
    deleted = unique_sorted(np.concatenate([d.deleted_chunks(), np.flatnonzero(drop)]))
    timings: dict[str, float] = {}
    record = BuildRecord()
    record.record("device", runtime.device)
    first = int(np.flatnonzero(drop)[0])
    first_live = int(live_before[:first].sum())  # its position among the chunks that stay
    result = inc.UpdateResult("delete", out, None, documents=found, chunks=int(drop.sum()),
                              not_found=missing, timings_s=timings)
    writer = IndexWriter(out, lock=lock)
    try:
        t0 = time.perf_counter()
        # kept as stored (linked): the chunks, their vectors, the raw extraction, communities
        for rel in (layout.CHUNKS, layout.PASSAGES_FAISS, layout.EXTRACT_MENTIONS,
                    layout.EXTRACT_RELATIONS, layout.EXTRACT_STATS, layout.COMMUNITIES):
            for name in d.parts(rel):
                if name in manifest.files:
                    writer.keep(d, name)
        writer.write_array(layout.DELETED_CHUNKS, deleted)
        _, gone_m = split_by_chunk(d.arrow_table(layout.EXTRACT_MENTIONS), drop)
        _, gone_r = split_by_chunk(d.arrow_table(layout.EXTRACT_RELATIONS), drop)
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
        # the mention and relation tables kept as stored (linked): readers drop the rows of
        # tombstoned chunks (IndexDir.arrow_table, CHUNK_KEYED); the removed ones are read
        # here for what they counted
        for rel in (layout.MENTIONS, layout.RELATIONS):
            for name in d.parts(rel):
                writer.keep(d, name)
        mentions, removed_m = split_by_chunk(d.arrow_table(layout.MENTIONS), drop)
        n_mentions = len(mentions)
        relations, removed_r = split_by_chunk(d.arrow_table(layout.RELATIONS), drop)
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
            chunk=np.where(f_drop, 0, f_chunk), text=facts["text"].where(~f_drop, ""),
            weight=np.where(f_drop, 0, facts["weight"].to_numpy()),
            **({"typed": np.where(f_drop, False, facts["typed"].to_numpy(bool))}
               if "typed" in facts.columns else {})).astype(facts.dtypes.to_dict())
        f_ptr = np.asarray(d.array(layout.FACT_ENTITY_INDPTR, mmap=False))
        f_ent = np.asarray(d.array(layout.FACT_ENTITY_INDICES, mmap=False))
        lengths = np.diff(f_ptr)
        f_ent = f_ent[np.repeat(~f_drop, lengths)]
        lengths = np.where(f_drop, 0, lengths)
        f_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(f_ptr.dtype)
        stored_graph = csr_mod.load(d.file(layout.GRAPH_DIR), mmap=True)
        graph = shrunk_graph(stored_graph, len(entities), drop, blanked, removed_r)
        timings["graph_s"] = time.perf_counter() - t0

        # the stored BM25 model covers the chunks that stayed so far, in order: the ones
        # removed now go (a rebuild: over the chunks that stay)
        lexical = local.write_lexical(
            writer, lambda: d.table(layout.CHUNKS)[live].reset_index(drop=True), record,
            timings, d, ~drop[live_before], d.table(layout.CHUNKS, columns=["text"]).iloc[:0])

        t0 = time.perf_counter()
        # the name and fact vectors are kept as stored; the rows now unused are tombstoned
        for rel, rows in ((layout.NAMES_FAISS, np.flatnonzero(dead)),
                          (layout.FACTS_FAISS, np.flatnonzero(f_drop))):
            for name in d.parts(rel):
                writer.keep(d, name)
            tomb = layout.TOMBSTONES[rel]
            writer.write_array(tomb, unique_sorted(np.concatenate(
                [d.deleted_rows(tomb), rows.astype(np.int64)])))
        writer.write_table(layout.NAMES, names)
        writer.write_array(layout.FACT_ENTITY_INDPTR, f_ptr)
        writer.write_array(layout.FACT_ENTITY_INDICES, f_ent)
        graph_how = write_graph(writer, d, stored_graph, graph, len(entities),
                                local.fold_fraction())
        del stored_graph
        for rel, frame in ((layout.ENTITIES, entities), (layout.ALIASES, aliases),
                           (layout.FACTS, facts)):
            writer.write_table(rel, frame)
        # the counts need only the community levels and the stored extraction totals (the
        # stats table is kept as it is: its sums are the stored version's ``extract_*``)
        communities = d.table(layout.COMMUNITIES, columns=["level"])
        stats = (local.carried_stats(manifest.counts, None) if d.has(layout.EXTRACT_STATS)
                 else None)
        timings["graph_write_s"] = time.perf_counter() - t0

        documents = int(manifest.counts.get("documents", old["doc_id"].nunique()))
        counts = {"documents": documents - len(found), "chunks": int(live.sum()),
                  "deleted_chunks": len(deleted),
                  **local.table_counts(entities, aliases, names, n_mentions, n_relations,
                                       facts, graph, communities, stats)}
        info = dict(manifest.extra.get("incremental") or {})
        change = {"op": "delete", "documents": inc._ids(found), "chunks": int(drop.sum()),
                  "not_found": missing[: inc.MAX_IDS_RECORDED], "reextracted_chunks": 0}
        incremental = {
            "mode": local.LOCAL,
            "exact_below": min(int(info.get("exact_below", int(live_before.sum()))),
                               first_live),
            "local_updates": int(info.get("local_updates", 0)) + 1,
            "updated_locally": ["chunks tombstoned (arrays/deleted_chunks.npy; the chunk "
                                "table, passage vectors and extraction kept as stored)",
                                "mentions and relations of the removed chunks dropped, "
                                "their facts blanked",
                                "name and entity counts (names no chunk uses blanked)",
                                graph_note(graph_how)],
            "deleted_chunks": len(deleted),
            "deleted_text": "the removed chunks' text stays in the kept chunk table and "
                            "extraction until `gpurag compact`",
            "communities": COMMUNITIES_DELETE,
            "recomputed": [local.lexical_note(lexical)],
            "rebuilt_indexes": [],
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


def graph_note(how: str) -> str:
    """The manifest's note of how a delete wrote the graph ("delta" or "folded")."""
    return {"delta": "graph CSR (the removed passages' edges, the blanked entities' edges and "
                     "the removed relations' weights: a delta part beside the stored CSR, "
                     "merged on read)",
            "folded": "graph CSR (removed passages' edges and relation weights taken out; the "
                      "delta folded: the graph written whole)"}[how]


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
