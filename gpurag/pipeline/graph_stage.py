"""Stage 2, the knowledge graph, as named steps with typed inputs and outputs:

extract -> :func:`resolve_entities` -> :func:`build_facts` -> :func:`build_graph` ->
:func:`detect_communities` -> :func:`write_names` -> :func:`embed_facts` -> :func:`write_graph`.

Graph nodes are canonical entities ``[0, E)`` followed by passages (chunks) ``[E, E + P)``.
Edges: relations between entities (weighted by count), mentions (entity-passage), and synonym
edges between near-duplicate entities below the merge threshold. Each step takes arrays and
tables (and, where it runs a component, the runtime's backend for it) and is testable alone;
:func:`run_graph_stage` runs them in order, times them and records what ran.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from gpurag.backends.part import implementation_name
from gpurag.config import IndexConfig
from gpurag.embed.base import Embedder
from gpurag.extract.base import COOCCURS, Extraction, Extractor
from gpurag.graph.csr import CSRGraph
from gpurag.pipeline.checkpoints import extract_part, write_durably
from gpurag.pipeline.facts import sentence_facts, triple_facts
from gpurag.pipeline.progress import progress_bar
from gpurag.pipeline.workdir import WorkDir
from gpurag.profile import alias_options, hnsw_options
from gpurag.store import layout
from gpurag.store.writer import IndexWriter
from gpurag.vectors import build_index, save_index
from gpurag.vectors.codec import codec_for

if TYPE_CHECKING:  # the runtime is built at the edge and passed down
    from gpurag.backends.part import BuildRecord
    from gpurag.llm.config import LLMConfig
    from gpurag.runtime import Runtime

log = logging.getLogger(__name__)

EXTRACT_BATCH = 512
# Name vectors up to this size are indexed while the facts embed; larger ones (about 175k
# names at 384-d: a 148k-passage corpus has 390k) first, so the peak memory stays that of the
# sequential build, which holds them only until they are written.
NAMES_ALONGSIDE_BYTES = 256 << 20
# ... and only with cores to spare: on 2 cores the HNSW build and the fact embedding share
# them, and at 50k passages the two together took 126 s alongside against 84 s in turn.
NAMES_ALONGSIDE_MIN_CORES = 4


def make_stage_extractor(cfg: IndexConfig, llm: LLMConfig | None = None,
                         progress: bool | None = None) -> Extractor:
    """The extractor named by the config (``triples`` reads ``cfg.triples``; ``llm`` gets
    the runtime's LLM settings with the config's model and endpoint, and its output goes on
    top of the rule-based extraction, as imported triples do)."""
    from gpurag.extract import make_extractor
    from gpurag.extract.combined import OnTopOfBase

    if cfg.triples:
        return make_extractor("triples", path=cfg.triples)
    if cfg.extractor.strip().lower() == "llm" and llm is not None:
        return OnTopOfBase(make_extractor("llm", config=index_llm_config(cfg, llm),
                                          progress=progress is not False),
                           make_extractor("fast"))
    return make_extractor(cfg.extractor)


def index_llm_config(cfg: IndexConfig, llm: LLMConfig) -> LLMConfig:
    """The runtime's LLM settings with the model and endpoint the index config names (these
    change the index, so they live in :class:`IndexConfig` and the build key covers them)."""
    changes = {k: v for k, v in {"url": cfg.llm_url, "model": cfg.llm_model}.items() if v}
    return llm.replace(**changes) if changes else llm


def run_extraction(chunks: pd.DataFrame, extractor: Extractor, work: WorkDir,
                   show_progress: bool | None) -> Extraction:
    """Extract in batches, each batch checkpointed so a killed run resumes after it; the
    batches of a CPU-bound extractor run in worker processes (:mod:`extract_pool`)."""
    from gpurag.pipeline.extract_pool import extract_batches, pool_workers

    stage = extract_state(work)
    bar = progress_bar(total=len(chunks), desc=f"extract ({extractor.name})", unit="chunk",
                       show=show_progress)
    bar.update(stage["done_rows"])
    batch_size = int(getattr(extractor, "batch_size", EXTRACT_BATCH))
    first = stage["done_rows"]
    workers = pool_workers(extractor, -(-(len(chunks) - first) // batch_size))
    for start, rows, part in extract_batches(chunks, extractor, first, batch_size, workers):
        checkpoint_extraction(work, start, rows, part)
        bar.update(rows)
    bar.close()
    return read_extraction(work, stage)


def write_extraction_part(work: WorkDir, i: int, part: Extraction) -> None:
    """Checkpoint files of extraction part ``i`` (its state is :func:`add_extraction_part`)."""
    tables = {"mentions": part.mentions, "relations": part.relations}
    descriptions = getattr(part, "descriptions", None)
    if descriptions is not None and len(descriptions):
        tables["descriptions"] = descriptions
    for kind, frame in tables.items():
        table = _to_arrow(frame)
        write_durably(work, extract_part(kind, i), lambda fh, t=table: pq.write_table(t, fh))


def add_extraction_part(stage: dict[str, Any], start: int, rows: int,
                        stats: dict[str, int]) -> None:
    """Count the next part (chunks ``start`` to ``start + rows``) as done in ``stage``."""
    for key, value in stats.items():
        stage["stats"][key] = stage["stats"].get(key, 0) + int(value)
    stage.setdefault("batch_stats", []).append(
        {"start": start, "stats": {k: int(v) for k, v in stats.items()}})
    stage["parts"] += 1
    stage["done_rows"] = start + rows


def read_extraction(work: WorkDir, stage: dict[str, Any]) -> Extraction:
    """The finished extraction stage, from its checkpoints in ``work``."""
    parts = stage["parts"]
    if not parts:
        ex = Extraction(stats=Counter(stage["stats"]))
        ex.batch_stats = batch_stats_frame(stage.get("batch_stats", []))
        return ex
    ex = Extraction(
        mentions=pd.concat([pq.read_table(work.path(extract_part("mentions", i)))
                            .to_pandas() for i in range(parts)], ignore_index=True),
        relations=pd.concat([pq.read_table(work.path(extract_part("relations", i)))
                             .to_pandas() for i in range(parts)], ignore_index=True),
        stats=Counter(stage["stats"]),
    )
    desc_parts = sorted(work.root.glob("extract/descriptions-*.parquet"))
    ex.descriptions = (pd.concat([pq.read_table(p).to_pandas() for p in desc_parts],
                                 ignore_index=True) if desc_parts else None)
    ex.batch_stats = batch_stats_frame(stage.get("batch_stats", []))
    return ex


def extract_state(work: WorkDir) -> dict[str, Any]:
    """The extract stage's checkpoint state in ``work`` (made empty when absent)."""
    return work.state.setdefault("extract", {"done_rows": 0, "parts": 0, "stats": {},
                                             "batch_stats": []})


def checkpoint_extraction(work: WorkDir, start: int, rows: int, part: Extraction) -> None:
    """Write the extraction of chunk rows ``[start, start + rows)`` (the next batch in order)
    as the stage's next checkpoint and save the state naming it."""
    stage = extract_state(work)
    write_extraction_part(work, stage["parts"], part)
    add_extraction_part(stage, start, rows, part.stats)
    work.save()


def batch_stats_frame(batches: list[dict[str, Any]]) -> pd.DataFrame:
    """Per-batch extraction counters as rows (``start``: the batch's first chunk, ``key``,
    ``value``), so an incremental update can drop the counters of batches it re-extracts."""
    rows = [(int(b["start"]), str(k), int(v)) for b in batches for k, v in b["stats"].items()]
    return pd.DataFrame({"start": pd.Series([r[0] for r in rows], dtype="int64"),
                         "key": pd.Series([r[1] for r in rows], dtype=object),
                         "value": pd.Series([r[2] for r in rows], dtype="int64")})


def batch_stats_sums(stats: pd.DataFrame | None) -> dict[str, int]:
    """Per key, the sum of a :func:`batch_stats_frame`'s values in first-seen key order (what
    a full build sums over its batches: the manifest's ``extract_*`` counts)."""
    if stats is None or not len(stats):
        return {}
    return {str(k): int(v) for k, v in stats.groupby("key", sort=False)["value"].sum().items()}


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
                        entities: pd.DataFrame, llm: Any) -> pd.DataFrame:
    """One description per canonical entity: the LLM client ``llm`` merges those seen in
    many chunks (one batched call above the threshold), the rest are joined."""
    from gpurag.llm.reports import merge_descriptions

    ids = name_to_entity.reindex(descriptions["name"].astype(str)).to_numpy()
    rows = descriptions[~pd.isna(ids)].assign(entity=ids[~pd.isna(ids)].astype(np.int64))
    merged = merge_descriptions(llm, rows, key="entity")
    merged = merged.rename(columns={"name": "entity"})
    names = entities.set_index("entity_id")["name"]
    return merged.assign(name=names.reindex(merged["entity"]).to_numpy())


# -- the steps ------------------------------------------------------------------------------
@dataclass
class ResolvedEntities:
    """Output of :func:`resolve_entities`: canonical entities and the extraction in their ids.

    ``entities`` (``entity_id``, ``name``, ..., ``n_passages``, ``n_mentions``), ``aliases``,
    ``synonym_pairs`` (``a``, ``b``, ``score``), ``name_to_entity`` (surface name -> id),
    ``vectors`` (one unit vector per entity: the count-weighted mean of its names' vectors),
    ``mentions`` (with ``entity``), ``relations`` (with ``head_entity``/``tail_entity``, no self
    loops), ``merged_names`` and the extraction's ``stats``/``descriptions``.
    """

    entities: pd.DataFrame
    aliases: pd.DataFrame
    synonym_pairs: pd.DataFrame
    name_to_entity: pd.Series
    name_counts: np.ndarray  # occurrences of each ``name_to_entity`` row
    name_vectors: np.ndarray | None  # one per ``name_to_entity`` row, as stored (None: written)
    mentions: pd.DataFrame
    relations: pd.DataFrame
    merged_names: int
    stats: Counter
    descriptions: pd.DataFrame | None = None
    alias_keys: list[str] | None = None  # each alias's lookup key, as resolution computed it


@dataclass
class Facts:
    """Output of :func:`build_facts`: the fact table and its fact -> entity CSR."""

    table: pd.DataFrame
    indptr: np.ndarray
    entities: np.ndarray


@dataclass
class KnowledgeGraph:
    """Output of :func:`build_graph`: the full graph and its entity-entity part."""

    graph: CSRGraph
    entity_graph: CSRGraph


def name_labels(mentions: pd.DataFrame) -> pd.Series:
    """Each surface name's most frequent label (ties: the alphabetically first, as
    ``Series.mode`` orders them), indexed by name."""
    if not len(mentions):
        return pd.Series(dtype=str)
    n = mentions.groupby(["name", "label"], observed=True).size().reset_index(name="n")
    n = n.sort_values(["name", "n", "label"], ascending=[True, False, True], kind="stable")
    first = n.drop_duplicates("name")
    return pd.Series(first["label"].to_numpy(), index=first["name"].to_numpy())


def resolve_entities(ex: Extraction, embedder: Embedder, cfg: IndexConfig,
                     knn: Callable[..., Any] | None = None) -> ResolvedEntities:
    """Resolve every surface name to a canonical entity (``knn``: the backends' kNN)."""
    from gpurag.resolve import resolve_aliases

    if not cfg.graph_dates:
        ex = drop_date_entities(ex)
    names = pd.concat([ex.mentions["name"], ex.relations["head"], ex.relations["tail"]],
                      ignore_index=True).astype(str)
    counts = names.value_counts()
    labels = name_labels(ex.mentions)
    unique = counts.index.to_numpy(dtype=object)
    name_vecs = codec_for(cfg.vector_precision, embedder.dim).round_trip(
        embedder.encode(list(unique), batch_size=cfg.embed_batch_size), in_place=True)
    resolution = resolve_aliases(
        list(unique), embedder, **alias_options(cfg.build_profile()), embeddings=name_vecs,
        counts=counts.to_numpy(),
        labels=labels.reindex(unique).fillna("").astype(str).tolist(), knn=knn,
    )
    name_to_entity = pd.Series(resolution.entity_of_name, index=pd.Index(unique, dtype=object))

    entities = resolution.entities.copy()
    n_ent = len(entities)
    mentions = ex.mentions.copy()
    mentions["entity"] = name_to_entity.reindex(mentions["name"].astype(str)).to_numpy(np.int64)
    rel = ex.relations.copy()
    rel["head_entity"] = name_to_entity.reindex(rel["head"].astype(str)).to_numpy(np.int64)
    rel["tail_entity"] = name_to_entity.reindex(rel["tail"].astype(str)).to_numpy(np.int64)
    rel = rel[rel["head_entity"] != rel["tail_entity"]]
    # Passages per entity (specificity) and mention counts.
    ment_pairs = mentions.groupby(["entity", "chunk"], sort=False).size().reset_index(name="n")
    entities["n_passages"] = np.bincount(ment_pairs["entity"].to_numpy(),
                                         minlength=n_ent).astype(np.int32)
    entities["n_mentions"] = np.bincount(mentions["entity"].to_numpy(),
                                         minlength=n_ent).astype(np.int32)
    return ResolvedEntities(
        entities=entities, aliases=resolution.aliases,
        synonym_pairs=resolution.synonym_pairs, name_to_entity=name_to_entity,
        name_counts=counts.to_numpy(np.int64), name_vectors=name_vecs,
        mentions=mentions, relations=rel,
        merged_names=int(resolution.stats.get("merged", 0)), stats=Counter(ex.stats),
        descriptions=getattr(ex, "descriptions", None), alias_keys=resolution.keys,
    )


def alias_table(aliases: pd.DataFrame, keys: list[str] | None = None) -> pd.DataFrame:
    """The alias table as written: each name with its entity and its lookup key
    (:func:`~gpurag.resolve.normalize.normalize_name`, or ``keys`` when alias resolution
    already computed them), which question linking and the second hop match against; keyed
    once here instead of on every opening of the index."""
    from gpurag.resolve.normalize import alias_keys

    if keys is not None and len(keys) == len(aliases):
        return aliases.assign(key=keys)
    return aliases.assign(key=alias_keys(aliases.drop(columns=["key"], errors="ignore")))


def build_facts(chunks: pd.DataFrame, ents: ResolvedEntities) -> Facts:
    """Facts: the labelled triples the extractor gives, then the sentences naming two or more
    located entities. Both: a triple says how two entities relate in the extractor's words,
    the sentence in the passage's, and an LLM leaves relations out (the bridge of a two-hop
    question is often one it dropped)."""
    parts = [triple_facts(ents.relations, COOCCURS), sentence_facts(chunks, ents.mentions)]
    parts = [p for p in parts if len(p[0])]
    if len(parts) < 2:
        return Facts(*(parts[0] if parts else sentence_facts(chunks, ents.mentions)))
    (fa, ia, ea), (fb, ib, eb) = parts
    return Facts(pd.concat([fa, fb], ignore_index=True),
                 np.concatenate([ia, ib[1:] + ia[-1]]), np.concatenate([ea, eb]))


def mention_weights(mentions: pd.DataFrame, title_weight: float) -> np.ndarray:
    """One weight per (entity, chunk) pair, in ``groupby(["entity", "chunk"], sort=False)``
    order: ``title_weight`` where the chunk's title names the entity, else 1."""
    is_title = (mentions["label"] == "TITLE").groupby(
        [mentions["entity"], mentions["chunk"]], sort=False).max().to_numpy(bool)
    return np.where(is_title, title_weight, 1.0).astype(np.float32)


def build_graph(ents: ResolvedEntities, n_passages: int, title_weight: float = 1.0
                ) -> KnowledgeGraph:
    """The symmetric CSR graph over entities then passages: relations (summed weights),
    mentions (``title_weight`` where the passage's title names the entity, else 1) and synonym
    pairs (their cosine); and its entity-entity part."""
    from gpurag.graph import build_csr

    n_ent = len(ents.entities)
    rel, mentions, syn = ents.relations, ents.mentions, ents.synonym_pairs
    ment_pairs = mentions.groupby(["entity", "chunk"], sort=False).size().reset_index(name="n")
    pair = rel.groupby(["head_entity", "tail_entity"], sort=False)["weight"].sum().reset_index()
    src = np.concatenate([pair["head_entity"].to_numpy(np.int64),
                          ment_pairs["entity"].to_numpy(np.int64),
                          syn["a"].to_numpy(np.int64)])
    dst = np.concatenate([pair["tail_entity"].to_numpy(np.int64),
                          ment_pairs["chunk"].to_numpy(np.int64) + n_ent,
                          syn["b"].to_numpy(np.int64)])
    w = np.concatenate([pair["weight"].to_numpy(np.float32),
                        mention_weights(mentions, title_weight),
                        syn["score"].to_numpy(np.float32)])
    graph = build_csr(src, dst, w, n_nodes=n_ent + n_passages, symmetric=True)
    ent_mask = (src < n_ent) & (dst < n_ent)
    ent_graph = build_csr(src[ent_mask], dst[ent_mask], w[ent_mask], n_nodes=n_ent,
                          symmetric=True)
    return KnowledgeGraph(graph, ent_graph)


def detect_communities(kg: KnowledgeGraph, cfg: IndexConfig,
                       leiden: Callable[..., pd.DataFrame]) -> pd.DataFrame:
    """Hierarchical Leiden over the entity-entity graph, capped at ``max_community_size``
    (``leiden``: the runtime's Leiden part)."""
    return leiden(kg.entity_graph, max_cluster_size=cfg.max_community_size, seed=cfg.seed)


def embed_facts(facts: Facts, embedder: Embedder, cfg: IndexConfig) -> np.ndarray:
    """One vector per fact text, as stored (an empty ``(0, dim)`` array without facts)."""
    if not len(facts.table):
        return np.zeros((0, embedder.dim), np.float32)
    return codec_for(cfg.vector_precision, embedder.dim).round_trip(
        embedder.encode(facts.table["text"].tolist(), batch_size=cfg.embed_batch_size),
        in_place=True)


def write_names(writer: IndexWriter, cfg: IndexConfig, ents: ResolvedEntities) -> None:
    """Write the surface names (their FAISS index and table) and drop their vectors
    (``ents.name_vectors`` becomes None): the largest array of the stage is not held while
    the facts embed."""
    if ents.name_vectors is None:
        raise ValueError("the name vectors were already written and dropped")
    codec = codec_for(cfg.vector_precision, ents.name_vectors.shape[1])
    save_index(build_index(ents.name_vectors, cfg.ivf_threshold, cfg.seed, cfg.hnsw_threshold,
                           codec=codec, hnsw=hnsw_options(cfg.build_profile())),
               writer.path(layout.NAMES_FAISS))
    writer.write_table(layout.NAMES, pd.DataFrame({
        "name": ents.name_to_entity.index.to_numpy(dtype=object).astype(str),
        "entity": ents.name_to_entity.to_numpy(np.int64),
        "count": ents.name_counts}))
    ents.name_vectors = None


@contextlib.contextmanager
def names_alongside(writer: IndexWriter, cfg: IndexConfig, ents: ResolvedEntities,
                    timings: dict[str, float]) -> Iterator[Callable[[], None]]:
    """:func:`write_names` on a thread while the block runs; the block calls the function it
    is given to wait for it (an error of the names' write is raised there). Leaving the block
    waits too, so nothing is written after the caller aborts. Above
    :data:`NAMES_ALONGSIDE_BYTES` of name vectors the names are written before the block."""
    def run() -> None:
        t0 = time.perf_counter()
        write_names(writer, cfg, ents)
        timings["names_index_s"] = time.perf_counter() - t0

    from gpurag.pipeline.extract_pool import available_cores

    if (ents.name_vectors is None or ents.name_vectors.nbytes > NAMES_ALONGSIDE_BYTES
            or available_cores() < NAMES_ALONGSIDE_MIN_CORES):
        run()  # first, as a sequential build: the vectors are not held while the facts embed
        yield lambda: None
        return
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gpurag-names") as pool:
        future = pool.submit(run)
        yield future.result


def write_graph(writer: IndexWriter, cfg: IndexConfig, ents: ResolvedEntities, facts: Facts,
                kg: KnowledgeGraph, communities: pd.DataFrame, fact_vecs: np.ndarray,
                descriptions: pd.DataFrame | None = None) -> None:
    """Write the other graph artifacts (after :func:`write_names`): arrays, the CSR graph,
    the fact FAISS file and tables."""
    from gpurag.graph import csr as csr_mod

    writer.write_array(layout.FACT_ENTITY_INDPTR, facts.indptr)
    writer.write_array(layout.FACT_ENTITY_INDICES, facts.entities)
    csr_mod.save(kg.graph, writer.path(layout.GRAPH_DIR))
    codec = codec_for(cfg.vector_precision, fact_vecs.shape[1])
    save_index(build_index(fact_vecs, cfg.ivf_threshold, cfg.seed, cfg.hnsw_threshold,
                           codec=codec, hnsw=hnsw_options(cfg.build_profile())),
               writer.path(layout.FACTS_FAISS))
    writer.write_table(layout.ENTITIES, ents.entities)
    writer.write_table(layout.ALIASES, alias_table(ents.aliases, ents.alias_keys))
    writer.write_table(layout.MENTIONS,
                       ents.mentions[["entity", "chunk", "name", "label", "start", "end"]])
    writer.write_table(layout.RELATIONS,
                       ents.relations[["head_entity", "relation", "tail_entity", "chunk",
                                       "weight", "head", "tail"]])
    writer.write_table(layout.FACTS, facts.table)
    writer.write_table(layout.COMMUNITIES, communities)
    if descriptions is not None:
        writer.write_table(layout.DESCRIPTIONS, descriptions)


def write_extraction(writer: IndexWriter, ex: Extraction) -> None:
    """Keep what an incremental update reuses: the raw extraction (by chunk position) and its
    per-batch counters (the names and their vectors are part of the graph)."""
    writer.write_table(layout.EXTRACT_MENTIONS, ex.mentions)
    writer.write_table(layout.EXTRACT_RELATIONS, ex.relations)
    descriptions = getattr(ex, "descriptions", None)
    if descriptions is not None and len(descriptions):
        writer.write_table(layout.EXTRACT_DESCRIPTIONS, descriptions)
    stats = getattr(ex, "batch_stats", None)
    if stats is not None:
        writer.write_table(layout.EXTRACT_STATS, stats)


def graph_counts(ents: ResolvedEntities, facts: Facts, kg: KnowledgeGraph,
                 communities: pd.DataFrame) -> dict[str, int]:
    """The manifest counts of the graph stage."""
    stats = {f"extract_{k}": int(v) for k, v in ents.stats.items()}
    return {
        "entities": len(ents.entities),
        "aliases": len(ents.aliases),
        "merged_names": ents.merged_names,
        "mentions": len(ents.mentions),
        "relations": len(ents.relations),
        "facts": len(facts.table),
        "graph_nodes": kg.graph.n_nodes,
        "graph_edges": kg.graph.n_edges,
        "community_levels": int(communities["level"].max()) + 1 if len(communities) else 0,
        **stats,
    }


def _recording(fn: Callable[..., Any], record: BuildRecord, component: str,
               name: str) -> Callable[..., Any]:
    """``fn`` that notes ``component: name`` in ``record`` when (and only when) it runs."""

    def call(*args: Any, **kwargs: Any) -> Any:
        record.record(component, name)
        return fn(*args, **kwargs)

    return call


def run_graph_stage(chunks: pd.DataFrame, embedder: Embedder, cfg: IndexConfig,
                    work: WorkDir | None,
                    writer: IndexWriter, timings: dict[str, float], runtime: Runtime,
                    record: BuildRecord, show_progress: bool | None = None,
                    ex: Extraction | None = None, cluster: Any = None) -> dict[str, int]:
    """Run the steps in order, write every graph artifact; returns counts for the manifest.

    ``ex``: the extraction of ``chunks``, when the caller has it (an incremental update);
    ``cluster``: a :class:`~gpurag.pipeline.distributed.Cluster` to extract on."""
    if ex is None:
        t0 = time.perf_counter()
        extractor = make_stage_extractor(
            cfg, runtime.llm if cfg.extractor.strip().lower() == "llm" else None, show_progress)
        record.record("extract", extractor.name)
        if work is None:
            raise ValueError("run_graph_stage needs a work folder to extract")
        ex = (run_extraction if cluster is None else cluster.run_extraction)(
            chunks, extractor, work, show_progress)
        timings["extract_s"] = time.perf_counter() - t0

    # The steps after extraction take minutes on a large corpus: one bar names the running one.
    steps = progress_bar(total=5, desc="graph", unit="step", show=show_progress)
    steps.set_postfix_str("resolving aliases (embedding the names)")
    t0 = time.perf_counter()
    knn = _recording(runtime.knn, record, "knn", implementation_name(runtime.knn))
    ents = resolve_entities(ex, embedder, cfg, knn=knn)
    timings["resolve_s"] = time.perf_counter() - t0
    steps.update(1)

    steps.set_postfix_str(f"facts and CSR ({len(ents.entities):,} entities)")
    t0 = time.perf_counter()
    facts = build_facts(chunks, ents)
    kg = build_graph(ents, len(chunks), cfg.build_profile().title_edge_weight)
    timings["graph_s"] = time.perf_counter() - t0
    steps.update(1)

    steps.set_postfix_str(f"Leiden communities ({kg.entity_graph.n_nodes:,} nodes)")
    t0 = time.perf_counter()
    communities = detect_communities(kg, cfg, runtime.leiden)
    if kg.entity_graph.n_nodes:
        record.record("leiden", communities.attrs.get("implementation",
                                                      implementation_name(runtime.leiden)))
    timings["leiden_s"] = time.perf_counter() - t0
    steps.update(1)

    # The names' index (an HNSW graph over every surface name: the stage's largest FAISS
    # build) is built and written on a thread while the facts embed (FAISS releases the GIL).
    steps.set_postfix_str(f"embedding {len(facts.table):,} facts")
    with names_alongside(writer, cfg, ents, timings) as names_done:
        t0 = time.perf_counter()
        fact_vecs = embed_facts(facts, embedder, cfg)
        timings["entity_fact_vectors_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        names_done()
        write_s = time.perf_counter() - t0  # the wait for the names' index, if any
    steps.update(1)
    steps.set_postfix_str("writing")

    descriptions = None
    if ents.descriptions is not None and len(ents.descriptions):
        client = runtime.llm_client_for(index_llm_config(cfg, runtime.llm))
        descriptions = entity_descriptions(ents.descriptions, ents.name_to_entity,
                                           ents.entities, client)
    t0 = time.perf_counter()
    write_graph(writer, cfg, ents, facts, kg, communities, fact_vecs, descriptions)
    write_extraction(writer, ex)
    timings["graph_write_s"] = write_s + time.perf_counter() - t0
    steps.update(1)
    steps.close()
    return graph_counts(ents, facts, kg, communities)
