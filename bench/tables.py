"""Does the build's table work (pandas) matter at a million passages? (issue 10, item 5)

Tiles a real extraction (an index built by ``gpurag index``, its ``extract/`` tables and chunks)
up to ``--passages`` passages. Each tile is a copy of the corpus with its own chunk positions;
``--shared`` of the surface names keep their spelling across tiles (the common names of a
corpus), the rest get a per-tile suffix, so the name vocabulary grows as it does in a real corpus.
Then it times the graph stage's table steps with the functions the build runs, in this process:

* ``names``: the name counts and labels alias resolution starts from (``name_labels``);
* ``map``: names to entity ids on every mention and relation, passages and mentions per entity
  (identity resolution: the kNN and union-find are timed by ``bench/scale.py``, not here);
* ``facts``: ``build_facts`` (sentence facts: one regex pass and a group-by);
* ``graph``: ``build_graph`` (the pair group-bys, mention weights and the CSR).

Prints seconds per step and passages/s, with the embedding and extraction rates of the same
machine's ``bench/scale.py`` result beside them when ``--scale-json`` is given.

    python bench/tables.py --index /tmp/idx2000 --passages 100000,1000000
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from gpurag.pipeline import graph_stage as gs
from gpurag.store import layout, open_index_dir


def tile(frame: pd.DataFrame, copies: int, n_chunks: int, columns: list[str],
         keep: set[str]) -> pd.DataFrame:
    """``copies`` copies of ``frame``: chunk positions shifted per copy, names outside ``keep``
    suffixed with the copy number."""
    reps = np.repeat(np.arange(copies), len(frame))
    out = pd.DataFrame({c: np.tile(frame[c].to_numpy(), copies) for c in frame.columns})
    out["chunk"] = out["chunk"].to_numpy(np.int64) + reps * n_chunks
    suffix = pd.Series(reps).astype(str).radd("~").to_numpy(dtype=object)
    for c in columns:
        names = out[c].astype(str).to_numpy(dtype=object)
        own = ~pd.Series(names).isin(keep).to_numpy()
        names[own] = names[own] + suffix[own]
        out[c] = names
    return out


def run(index: Path, passages: int, shared: float) -> dict:
    d = open_index_dir(index)
    chunks0 = d.table(layout.CHUNKS)
    men0, rel0 = d.table(layout.EXTRACT_MENTIONS), d.table(layout.EXTRACT_RELATIONS)
    counts0 = pd.concat([men0["name"], rel0["head"], rel0["tail"]]).value_counts()
    keep = set(counts0.index[: int(shared * len(counts0))].astype(str))  # the common names
    copies = max(1, round(passages / len(chunks0)))
    t = {}
    t0 = time.perf_counter()
    mentions = tile(men0, copies, len(chunks0), ["name"], keep)
    relations = tile(rel0, copies, len(chunks0), ["head", "tail"], keep)
    chunks = pd.DataFrame({c: np.tile(chunks0[c].to_numpy(), copies) for c in chunks0.columns})
    t["tile_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    names = pd.concat([mentions["name"], relations["head"], relations["tail"]],
                      ignore_index=True).astype(str)
    counts = names.value_counts()
    labels = gs.name_labels(mentions)
    unique = counts.index.to_numpy(dtype=object)
    t["names_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    name_to_entity = pd.Series(np.arange(len(unique)), index=pd.Index(unique, dtype=object))
    mentions["entity"] = name_to_entity.reindex(mentions["name"].astype(str)).to_numpy(np.int64)
    relations["head_entity"] = name_to_entity.reindex(relations["head"].astype(str)).to_numpy(
        np.int64)
    relations["tail_entity"] = name_to_entity.reindex(relations["tail"].astype(str)).to_numpy(
        np.int64)
    relations = relations[relations["head_entity"] != relations["tail_entity"]]
    n_ent = len(unique)
    pairs = mentions.groupby(["entity", "chunk"], sort=False).size().reset_index(name="n")
    entities = pd.DataFrame({
        "entity_id": np.arange(n_ent), "name": unique.astype(str),
        "label": labels.reindex(unique).fillna("").to_numpy(),
        "n_passages": np.bincount(pairs["entity"].to_numpy(), minlength=n_ent),
        "n_mentions": np.bincount(mentions["entity"].to_numpy(), minlength=n_ent)})
    t["map_s"] = time.perf_counter() - t0

    ents = gs.ResolvedEntities(
        entities=entities, aliases=pd.DataFrame(),
        synonym_pairs=pd.DataFrame({"a": np.zeros(0, np.int64), "b": np.zeros(0, np.int64),
                                    "score": np.zeros(0, np.float32)}),
        name_to_entity=name_to_entity, name_counts=counts.to_numpy(np.int64),
        name_vectors=np.zeros((0, 1), np.float32), mentions=mentions, relations=relations,
        merged_names=0, stats=Counter())
    t0 = time.perf_counter()
    facts = gs.build_facts(chunks, ents)
    t["facts_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    kg = gs.build_graph(ents, len(chunks), 10.0)
    t["graph_s"] = time.perf_counter() - t0
    n = len(chunks)
    total = sum(v for k, v in t.items() if k != "tile_s")
    return {"passages": n, "mentions": len(mentions), "relations": len(relations),
            "names": len(unique), "facts": len(facts.table), "edges": kg.graph.n_edges,
            **t, "table_s": total, "table_passages_per_s": n / total,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True, help="an index built with the graph")
    ap.add_argument("--passages", default="100000,1000000")
    ap.add_argument("--shared", type=float, default=0.2,
                    help="share of the most frequent names spelled the same in every tile")
    ap.add_argument("--out", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = []
    for p in [int(float(x)) for x in args.passages.split(",") if x]:
        row = run(Path(args.index), p, args.shared)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
