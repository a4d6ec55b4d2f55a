"""cProfile of graph queries on a built index: single questions and one large batch.

Usage: python bench/profile_query.py INDEX_DIR CORPUS.jsonl [--batch 1024] [--single 30]
       [--top 30] [--mode graph] [--out PREFIX]
Prints the top functions by cumulative and by own time for each case (PREFIX.{single,batch}.txt
with --out)."""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def report(prof: cProfile.Profile, top: int) -> str:
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    st.sort_stats("cumulative").print_stats(top)
    st.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> None:
    from query import make_questions

    from gpurag import Index

    ap = argparse.ArgumentParser()
    ap.add_argument("index")
    ap.add_argument("corpus")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--single", type=int, default=30)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--mode", default="graph")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    with open(args.corpus, encoding="utf-8") as fh:
        rows = [json.loads(x) for x in fh]
    questions = make_questions(rows, max(args.batch, args.single))
    index = Index.open(args.index)
    index.query_batch(questions[:8], k=10, mode=args.mode)  # opens what it needs
    cases = {}
    prof = cProfile.Profile()
    prof.enable()
    for q in questions[:args.single]:
        index.query_batch([q], k=10, mode=args.mode)
    prof.disable()
    cases["single"] = report(prof, args.top)
    prof = cProfile.Profile()
    prof.enable()
    index.query_batch(questions[:args.batch], k=10, mode=args.mode)
    prof.disable()
    cases["batch"] = report(prof, args.top)
    for name, text in cases.items():
        if args.out:
            Path(f"{args.out}.{name}.txt").write_text(text)
        print(f"==== {name}\n{text}")


if __name__ == "__main__":
    main()
