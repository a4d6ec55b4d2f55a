"""Time the build's BM25 stage (``BM25Index(chunks).save``) over a passage file.

Run it once per tree, alternating, to A/B the stage: ``PYTHONPATH=<tree> python
bench/bm25_build_ab.py LABEL [--passages PATH] [--limit N]``. Prints one line: label, passages,
seconds, the 1-minute load before the run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

DEFAULT = Path(__file__).resolve().parents[2] / "shared/data/enwiki_passages/passages.jsonl.gz"


def read_passages(path: Path, limit: int | None) -> pd.DataFrame:
    """Title and text of the first ``limit`` records of a (gzipped) JSON-lines passage file."""
    opener = gzip.open if path.suffix == ".gz" else open
    titles, texts = [], []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if limit is not None and len(texts) >= limit:
                break
            record = json.loads(line)
            titles.append(record.get("title", ""))
            texts.append(record["text"])
    return pd.DataFrame({"title": titles, "text": texts})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("label")
    parser.add_argument("--passages", type=Path, default=DEFAULT)
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    if not args.passages.is_file():
        raise SystemExit(f"no passage file at {args.passages} (give --passages)")
    chunks = read_passages(args.passages, args.limit)
    from gpurag.query.lexical import BM25Index

    load = os.getloadavg()[0]
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        BM25Index(chunks).save(folder)
    print(f"{args.label} {len(chunks)} passages {time.perf_counter() - t:.1f} s (load {load:.2f})")


if __name__ == "__main__":
    main()
