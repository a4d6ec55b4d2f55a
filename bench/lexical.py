"""BM25 top-k for a batch of questions: bm25s' own ``retrieve`` (each question scored alone,
top-k by ``argpartition`` over every passage's score) against gpurag's batched sparse product
with a tie-stable top-k (:class:`gpurag.query.lexical.BM25Index`), on prefixes of the shared
Wikipedia passages. Only BM25 is built (no index), so large prefixes fit in a short run.

Reports per prefix and batch: ms per question for each, the speed-up, whether the scores agree
to the bit, and how many rows differ (only inside ties: bm25s breaks them in no fixed order).

Usage: python bench/lexical.py [--sizes 2000,20000,147645] [--batches 1,64,1024] [--out F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from query import DEFAULT_DATA, log, machine, make_questions, write_prefix


def expansions(questions: list[str], titles: list[str], per: int, seed: int = 0) -> list[str]:
    """Second-hop style texts: each question followed by ``per`` passage titles."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(titles), size=(len(questions), per))
    return [f"{q} {titles[t]}" for q, row in zip(questions, pick, strict=True) for t in row]


def compare(bm25, texts: list[str], k: int, batch: int) -> dict:
    old_ms = new_ms = 0.0
    same_scores, diff_rows = True, 0
    for i in range(0, len(texts), batch):
        chunk = texts[i:i + batch]
        t = time.perf_counter()
        tokens = bm25._bm25s.tokenize(chunk, stopwords="en", show_progress=False)
        rows, scores = bm25.model.retrieve(tokens, k=k, show_progress=False)
        old_ms += (time.perf_counter() - t) * 1000
        old_rows = np.where(scores > 0, rows, -1)
        t = time.perf_counter()
        new_scores, new_rows = bm25.search(chunk, k)
        new_ms += (time.perf_counter() - t) * 1000
        same_scores &= bool(np.array_equal(np.where(scores > 0, scores, 0), new_scores))
        diff_rows += int((old_rows != new_rows).sum())
    n = len(texts)
    return {"batch": batch, "texts": n, "k": k, "bm25s_ms_per_text": old_ms / n,
            "batched_ms_per_text": new_ms / n, "speedup": old_ms / max(new_ms, 1e-9),
            "scores_identical": same_scores, "rows_differing_in_ties": diff_rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2000,20000")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--work", default="runs/bench")
    ap.add_argument("--batches", default="1,64,1024")
    ap.add_argument("--texts", type=int, default=1024, help="texts per batch size (at least "
                    "one batch); the single-text case uses --single")
    ap.add_argument("--single", type=int, default=64)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from gpurag.query.lexical import BM25Index

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine(), "args": vars(args), "runs": []}
    for size in [int(s) for s in args.sizes.split(",")]:
        rows = write_prefix(Path(args.data), size, work / f"enwiki-{size}.jsonl")
        chunks = pd.DataFrame({"title": [r["title"] for r in rows],
                               "text": [r["text"] for r in rows]})
        t = time.perf_counter()
        bm25 = BM25Index(chunks)
        build_s = time.perf_counter() - t
        questions = make_questions(rows, max(args.texts, args.single))
        texts = expansions(questions, chunks["title"].tolist(), per=1)
        bm25.search(texts[:2], 5)  # the vocabulary lookup, once per index
        run = {"passages": len(rows), "bm25_build_s": build_s, "cases": []}
        for b in [int(x) for x in args.batches.split(",")]:
            n = args.single if b == 1 else max(b, args.texts)
            for what, k in (("seeds", 40), ("expansions", 5)):
                case = compare(bm25, texts[:n] if what == "expansions" else questions[:n], k, b)
                case["what"] = what
                run["cases"].append(case)
                log(f"[{len(rows)}] {what} batch {b}: bm25s {case['bm25s_ms_per_text']:.2f} "
                    f"ms/text, batched {case['batched_ms_per_text']:.3f} ms/text "
                    f"({case['speedup']:.1f}x), scores identical {case['scores_identical']}, "
                    f"rows differing in ties {case['rows_differing_in_ties']}")
        report["runs"].append(run)
    report["machine"]["load_avg_end"] = list(__import__("os").getloadavg())
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


if __name__ == "__main__":
    main()
