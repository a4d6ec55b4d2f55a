"""Stage 2: extract -> resolve aliases -> graph CSR -> Leiden communities -> entity/fact vectors.

Graph nodes are canonical entities ``[0, E)`` followed by passages (chunks) ``[E, E + P)``.
Edges: relations between entities (weighted by count), mentions (entity-passage), and synonym
edges between near-duplicate entities below the merge threshold.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from gpurag.config import IndexConfig
from gpurag.device import COMPONENTS
from gpurag.embed.base import Embedder
from gpurag.extract.base import Extraction, Extractor
from gpurag.pipeline.facts import sentence_facts, triple_facts
from gpurag.pipeline.progress import progress_bar
from gpurag.pipeline.workdir import WorkDir
from gpurag.store.writer import IndexWriter
from gpurag.vectors import build_index, save_index

log = logging.getLogger(__name__)

COOCCURS = "co-occurs"
EXTRACT_BATCH = 512


def make_stage_extractor(cfg: IndexConfig) -> Extractor:
    """The extractor named by the config (``triples`` reads ``cfg.triples``)."""
    from gpurag.extract import make_extractor

    if cfg.triples:
        return make_extractor("triples", path=cfg.triples)
    return make_extractor(cfg.extractor)


def run_extraction(chunks: pd.DataFrame, extractor: Extractor, work: WorkDir,
                   show_progress: bool) -> Extraction:
    """Extract in batches, each batch checkpointed so a killed run resumes after it."""
    stage = work.state.setdefault("extract", {"done_rows": 0, "parts": 0, "stats": {}})
    bar = progress_bar(total=len(chunks), desc=f"extract ({extractor.name})", unit="chunk",
                       disable=not show_progress)
    bar.update(stage["done_rows"])
    batch_size = int(getattr(extractor, "batch_size", EXTRACT_BATCH))
    while stage["done_rows"] < len(chunks):
        start = stage["done_rows"]
        batch = chunks.iloc[start : start + batch_size]
        part = extractor.extract(batch.reset_index(drop=True), offset=start)
        i = stage["parts"]
        pq.write_table(_to_arrow(part.mentions), work.path(f"extract/mentions-{i:05d}.parquet"))
        pq.write_table(_to_arrow(part.relations), work.path(f"extract/relations-{i:05d}.parquet"))
        descriptions = getattr(part, "descriptions", None)
        if descriptions is not None and len(descriptions):
            pq.write_table(_to_arrow(descriptions),
                           work.path(f"extract/descriptions-{i:05d}.parquet"))
        for key, value in part.stats.items():
            stage["stats"][key] = stage["stats"].get(key, 0) + int(value)
        stage["parts"] += 1
        stage["done_rows"] = start + len(batch)
        work.save()
        bar.update(len(batch))
    bar.close()
    parts = stage["parts"]
    from collections import Counter

    if not parts:
        return Extraction(stats=Counter(stage["stats"]))
    ex = Extraction(
        mentions=pd.concat([pq.read_table(work.path(f"extract/mentions-{i:05d}.parquet"))
                            .to_pandas() for i in range(parts)], ignore_index=True),
        relations=pd.concat([pq.read_table(work.path(f"extract/relations-{i:05d}.parquet"))
                             .to_pandas() for i in range(parts)], ignore_index=True),
        stats=Counter(stage["stats"]),
    )
    desc_parts = sorted(work.root.glob("extract/descriptions-*.parquet"))
    ex.descriptions = (pd.concat([pq.read_table(p).to_pandas() for p in desc_parts],
                                 ignore_index=True) if desc_parts else None)
    return ex


def _to_arrow(frame: pd.DataFrame):
    import pyarrow as pa

    return pa.Table.from_pandas(frame, preserve_index=False)


DATE_LABELS = ("DATE", "TIME", "CARDINAL", "ORDINAL", "PERCENT", "QUANTITY", "MONEY")


def drop_date_entities(ex: Extraction) -> Extraction:
    """Remove date and number mentions (and their relations): as graph nodes they are hubs that
    link unrelated passages sharing a year."""
    dates = ex.mentions["label"].isin(DATE_LABELS).to_numpy()
    dropped = set(ex.mentions.loc[dates, "name"].astype(str))
    rel = ex.relations
    keep = ~(rel["head"].astype(str).isin(dropped) | rel["tail"].astype(str).isin(dropped))
    out = Extraction(mentions=ex.mentions[~dates], relations=rel[keep.to_numpy()],
                     stats=ex.stats)
    out.descriptions = getattr(ex, "descriptions", None)
    return out


def entity_descriptions(descriptions: pd.DataFrame, name_to_entity: pd.Series,
                        entities: pd.DataFrame) -> pd.DataFrame:
    """One description per canonical entity: the LLM merges those seen in many chunks (one
    batched call above the threshold), the rest are joined."""
    from gpurag.llm.client import LLMClient
    from gpurag.llm.config import LLMConfig
    from gpurag.llm.reports import merge_descriptions

    ids = name_to_entity.reindex(descriptions["name"].astype(str)).to_numpy()
    rows = descriptions[~pd.isna(ids)].assign(entity=ids[~pd.isna(ids)].astype(np.int64))
    merged = merge_descriptions(LLMClient(LLMConfig.from_env()), rows, key="entity")
    merged = merged.rename(columns={"name": "entity"})
    names = entities.set_index("entity_id")["name"]
    return merged.assign(name=names.reindex(merged["entity"]).to_numpy())


def _entity_tables(ex: Extraction, embedder: Embedder, cfg: IndexConfig):
    """Resolve every surface name to a canonical entity; returns mentions/relations with ids."""
    from gpurag.resolve import resolve_aliases

    names = pd.concat([ex.mentions["name"], ex.relations["head"], ex.relations["tail"]],
                      ignore_index=True).astype(str)
    counts = names.value_counts()
    labels = (ex.mentions.groupby("name")["label"].agg(lambda s: s.mode().iat[0] if len(s)
                                                        else "")
              if len(ex.mentions) else pd.Series(dtype=str))
    unique = counts.index.to_numpy(dtype=object)
    name_vecs = embedder.encode(list(unique), batch_size=cfg.embed_batch_size)
    resolution = resolve_aliases(
        list(unique), embedder, merge_threshold=cfg.merge_threshold,
        synonym_threshold=cfg.synonym_threshold, embeddings=name_vecs,
        counts=counts.to_numpy(), labels=[labels.get(n, "") for n in unique],
    )
    name_to_entity = pd.Series(resolution.entity_of_name, index=pd.Index(unique, dtype=object))
    # An entity's vector: the count-weighted mean of its surface names' vectors.
    entity_vecs = np.zeros((len(resolution.entities), name_vecs.shape[1]), np.float32)
    np.add.at(entity_vecs, resolution.entity_of_name,
              name_vecs * counts.to_numpy(np.float32)[:, None])
    entity_vecs /= np.maximum(np.linalg.norm(entity_vecs, axis=1, keepdims=True), 1e-12)
    return resolution, name_to_entity, entity_vecs


def mention_weights(mentions: pd.DataFrame, title_weight: float) -> np.ndarray:
    """One weight per (entity, chunk) pair, in ``groupby(["entity", "chunk"], sort=False)``
    order: ``title_weight`` where the chunk's title names the entity, else 1."""
    is_title = (mentions["label"] == "TITLE").groupby(
        [mentions["entity"], mentions["chunk"]], sort=False).max().to_numpy(bool)
    return np.where(is_title, title_weight, 1.0).astype(np.float32)


def run_graph_stage(chunks: pd.DataFrame, embedder: Embedder, cfg: IndexConfig, work: WorkDir,
                    writer: IndexWriter, timings: dict[str, float],
                    show_progress: bool) -> dict[str, int]:
    """Build and write every graph artifact; returns counts for the manifest."""
    from gpurag.graph import build_csr, hierarchical_leiden
    from gpurag.graph import csr as csr_mod

    t0 = time.perf_counter()
    extractor = make_stage_extractor(cfg)
    COMPONENTS.record("extract", extractor.name)
    ex = run_extraction(chunks, extractor, work, show_progress)
    timings["extract_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    if not cfg.graph_dates:
        ex = drop_date_entities(ex)
    resolution, name_to_entity, ent_vecs = _entity_tables(ex, embedder, cfg)
    entities = resolution.entities.copy()
    n_ent, n_psg = len(entities), len(chunks)
    mentions = ex.mentions.copy()
    mentions["entity"] = name_to_entity.reindex(mentions["name"].astype(str)).to_numpy(np.int64)
    rel = ex.relations.copy()
    rel["head_entity"] = name_to_entity.reindex(rel["head"].astype(str)).to_numpy(np.int64)
    rel["tail_entity"] = name_to_entity.reindex(rel["tail"].astype(str)).to_numpy(np.int64)
    rel = rel[rel["head_entity"] != rel["tail_entity"]]
    timings["resolve_s"] = time.perf_counter() - t0

    # Passages per entity (specificity) and mention counts.
    ment_pairs = mentions.groupby(["entity", "chunk"], sort=False).size().reset_index(name="n")
    entities["n_passages"] = np.bincount(ment_pairs["entity"].to_numpy(),
                                         minlength=n_ent).astype(np.int32)
    entities["n_mentions"] = np.bincount(mentions["entity"].to_numpy(),
                                         minlength=n_ent).astype(np.int32)

    # Facts: labelled triples when the extractor gives them, else entity-bearing sentences.
    t0 = time.perf_counter()
    facts, fact_indptr, fact_entities = triple_facts(rel, COOCCURS)
    if not len(facts):
        facts, fact_indptr, fact_entities = sentence_facts(chunks, mentions)
    writer.write_array("arrays/fact_entity_indptr.npy", fact_indptr)
    writer.write_array("arrays/fact_entity_indices.npy", fact_entities)

    # Edges.
    pair = rel.groupby(["head_entity", "tail_entity"], sort=False)["weight"].sum().reset_index()
    syn = resolution.synonym_pairs
    src = np.concatenate([pair["head_entity"].to_numpy(np.int64),
                          ment_pairs["entity"].to_numpy(np.int64),
                          syn["a"].to_numpy(np.int64)])
    dst = np.concatenate([pair["tail_entity"].to_numpy(np.int64),
                          ment_pairs["chunk"].to_numpy(np.int64) + n_ent,
                          syn["b"].to_numpy(np.int64)])
    w = np.concatenate([pair["weight"].to_numpy(np.float32),
                        mention_weights(mentions, cfg.title_edge_weight),
                        syn["score"].to_numpy(np.float32)])
    graph = build_csr(src, dst, w, n_nodes=n_ent + n_psg, symmetric=True)
    csr_mod.save(graph, writer.path("graph"))
    timings["graph_s"] = time.perf_counter() - t0

    # Communities over the entity-entity part of the graph.
    t0 = time.perf_counter()
    ent_mask = (src < n_ent) & (dst < n_ent)
    ent_graph = build_csr(src[ent_mask], dst[ent_mask], w[ent_mask], n_nodes=n_ent,
                          symmetric=True)
    communities = hierarchical_leiden(ent_graph, max_cluster_size=cfg.max_community_size,
                                      seed=cfg.seed)
    COMPONENTS.record("leiden", getattr(communities, "attrs", {}).get("implementation",
                                                                      "graspologic-native"))
    timings["leiden_s"] = time.perf_counter() - t0

    # Vectors over entities and facts.
    t0 = time.perf_counter()
    fact_vecs = (embedder.encode(facts["text"].tolist(), batch_size=cfg.embed_batch_size)
                 if len(facts) else np.zeros((0, embedder.dim), np.float32))
    writer.write_array("arrays/entity_emb.npy", ent_vecs)
    writer.write_array("arrays/fact_emb.npy", fact_vecs)
    save_index(build_index(ent_vecs, cfg.ivf_threshold, cfg.seed, cfg.hnsw_threshold),
               writer.path("vectors/entities.faiss"))
    save_index(build_index(fact_vecs, cfg.ivf_threshold, cfg.seed, cfg.hnsw_threshold),
               writer.path("vectors/facts.faiss"))
    timings["entity_fact_vectors_s"] = time.perf_counter() - t0

    writer.write_table("tables/entities.parquet", entities)
    writer.write_table("tables/aliases.parquet", resolution.aliases)
    writer.write_table("tables/mentions.parquet",
                       mentions[["entity", "chunk", "name", "label", "start", "end"]])
    writer.write_table("tables/relations.parquet",
                       rel[["head_entity", "relation", "tail_entity", "chunk", "weight", "head",
                            "tail"]])
    writer.write_table("tables/facts.parquet", facts)
    writer.write_table("tables/communities.parquet", communities)
    descriptions = getattr(ex, "descriptions", None)
    if descriptions is not None and len(descriptions):
        writer.write_table("tables/descriptions.parquet",
                           entity_descriptions(descriptions, name_to_entity, entities))
    stats = {f"extract_{k}": int(v) for k, v in ex.stats.items()}
    return {
        "entities": n_ent,
        "aliases": len(resolution.aliases),
        "merged_names": int(resolution.stats.get("merged", 0)),
        "mentions": len(mentions),
        "relations": len(rel),
        "facts": len(facts),
        "graph_nodes": graph.n_nodes,
        "graph_edges": graph.n_edges,
        "community_levels": int(communities["level"].max()) + 1 if len(communities) else 0,
        **stats,
    }
