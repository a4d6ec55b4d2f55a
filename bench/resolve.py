"""Benchmark alias resolution at scale; prints one JSON object.

Names come from the fast extractor run over a prefix of the enwiki passages (or are synthetic
with ``--synthetic``): unique surface names with mention counts and labels. The name vectors
come from ``--embed``: ``model`` (the default embedder, slow on CPU: its throughput is the
number to watch), ``hash`` (character-trigram hashing vectors: realistic lexical neighbours at
no cost, to time everything else) or ``none`` (exact + rule stages only).

    python bench/resolve.py --passages 115000 --embed hash
    python bench/resolve.py --passages 5000 --embed model
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from itertools import islice
from pathlib import Path

import numpy as np
import pandas as pd

from gpurag.extract import FastExtractor
from gpurag.extract.base import Extraction
from gpurag.resolve import normalize_name, resolve_aliases

DEFAULT_CORPUS = Path("/work/shared/data/enwiki_passages/passages.jsonl.gz")


class HashEmbedder:
    """Signed feature hashing of character trigrams into unit vectors (bench stand-in)."""

    name = "hash-trigram"
    max_tokens = 10_000

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        rows, cols, vals = [], [], []
        for i, text in enumerate(texts):
            padded = f"  {text} "
            grams = {padded[j : j + 3] for j in range(len(padded) - 2)}
            hashes = np.fromiter((hash(g) for g in grams), dtype=np.int64, count=len(grams))
            rows.append(np.full(len(hashes), i))
            cols.append(hashes % self.dim)
            vals.append(np.where((hashes >> 20) & 1, 1.0, -1.0))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if rows:
            np.add.at(out, (np.concatenate(rows), np.concatenate(cols)), np.concatenate(vals))
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(t) for t in texts]


def extracted_names(path: Path, passages: int, batch: int = 5000) -> tuple[pd.DataFrame, dict]:
    """Unique names (with mention counts and most frequent label) from the fast extractor."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in islice(fh, passages)]
    chunks = pd.DataFrame(rows).rename(columns={"id": "doc_id"})
    chunks["chunk_id"] = chunks["doc_id"]
    extractor = FastExtractor()
    t = time.perf_counter()
    parts = [extractor.extract(chunks.iloc[i : i + batch], i) for i in range(0, len(chunks), batch)]
    seconds = time.perf_counter() - t
    mentions = Extraction.concat(parts).mentions
    per_label = (
        mentions.groupby(["name", "label"], observed=True).size().rename("n").reset_index()
    )
    names = (
        per_label.sort_values("n", ascending=False)
        .drop_duplicates("name")
        .merge(per_label.groupby("name", observed=True)["n"].sum().rename("count"), on="name")
        .drop(columns="n")
        .sort_values("count", ascending=False)
    )
    info = {
        "passages": len(chunks),
        "extract_s": round(seconds, 2),
        "extract_passages_per_s": round(len(chunks) / seconds, 1),
        "mentions": len(mentions),
    }
    return names.reset_index(drop=True), info


def synthetic_names(n: int, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """Random person/organisation-like names with variants (case, suffixes, initials)."""
    rng = np.random.default_rng(seed)
    syll = np.array(["ka", "lo", "mi", "ren", "tor", "va", "el", "dan", "so", "ri", "ne", "mar"])
    words = ["".join(rng.choice(syll, rng.integers(2, 4))).title() for _ in range(20_000)]
    words = np.unique(words)
    first = rng.choice(words, n)
    last = rng.choice(words, n)
    kind = rng.integers(0, 4, n)
    base = np.char.add(np.char.add(first.astype(str), " "), last.astype(str))
    variant = np.where(
        kind == 0,
        np.char.add(base, " Ltd."),
        np.where(kind == 1, np.char.add("The ", base), np.where(kind == 2, last, base)),
    )
    names = pd.Series(np.r_[base, variant]).drop_duplicates()
    frame = pd.DataFrame({"name": names.to_numpy(), "label": "", "count": 1})
    return frame.reset_index(drop=True), {"synthetic": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--passages", type=int, default=20_000)
    parser.add_argument("--synthetic", type=int, default=0, help="N synthetic base names")
    parser.add_argument("--embed", choices=["model", "hash", "none"], default="hash")
    parser.add_argument("--embed-sample", type=int, default=2000,
                        help="names embedded with the model to measure its throughput")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--labels", action="store_true", help="pass extractor labels")
    args = parser.parse_args()

    if args.synthetic:
        names, info = synthetic_names(args.synthetic)
    else:
        names, info = extracted_names(args.corpus, args.passages)
    info["unique_names"] = len(names)
    info["mentions_resolved"] = int(names["count"].sum())

    embedder = HashEmbedder() if args.embed == "hash" else None
    if args.embed == "model" or args.embed_sample:
        from gpurag.backends.embed import load_embedder

        model = load_embedder()
        if args.embed_sample:
            sample = normalize_name(names["name"].sample(
                min(args.embed_sample, len(names)), random_state=0).tolist())
            t = time.perf_counter()
            model.encode(sample, batch_size=256)
            rate = len(sample) / (time.perf_counter() - t)
            info["model_embed_names_per_s"] = round(rate, 1)
            info["model_embed_s_estimate_all"] = round(len(names) / rate, 1)
        if args.embed == "model":
            embedder = model

    t = time.perf_counter()
    result = resolve_aliases(
        names["name"].tolist(),
        embedder,
        k=args.k,
        counts=names["count"].to_numpy(),
        labels=names["label"].tolist() if args.labels else None,
    )
    info["resolve_s"] = round(time.perf_counter() - t, 2)
    info["embed"] = args.embed
    info["stats"] = result.stats
    sizes = result.entities["n_aliases"].to_numpy()
    info["largest_entities"] = (
        result.entities.loc[np.argsort(-sizes)[:5], ["name", "n_aliases"]].to_dict("records")
    )
    print(json.dumps(info, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


if __name__ == "__main__":
    main()
