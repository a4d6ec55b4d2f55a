"""Question embedding cost per question: one at a time against batches (issue 26).

The questions are bench/query.py's (a passage title and words of its text, from a prefix of the
shared Wikipedia passages). For each batch size (``--batches``, default 1, 64, 1,024) and each
``batch_size`` the embedder is called with (``--rows``: the rows per model run; the query path
passes 64), the report gives the ms per question (best of ``--repeats`` passes over the same
questions) and how far the vectors are from each question embedded alone (max abs difference;
int8 ONNX quantizes a run's activations with one scale, so a vector depends a little on its
batch-mates).

Usage: python bench/embed_questions.py [--questions 1024] [--batches 1,64,1024] [--rows 64,256]
       [--embedder onnx-minilm] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def questions(n: int) -> list[str]:
    """bench/query.py's questions over the first 2,000 shared passages."""
    import gzip

    from query import DEFAULT_DATA, make_questions

    rows = []
    with gzip.open(DEFAULT_DATA, "rt", encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if len(rows) >= 2000:
                break
    return make_questions(rows, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=1024)
    ap.add_argument("--batches", default="1,64,1024")
    ap.add_argument("--rows", default="64,256")
    ap.add_argument("--single", type=int, default=128, help="questions asked one at a time")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--embedder", default="onnx-minilm")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from query import machine

    from gpurag.backends.embed import load_embedder

    emb = load_embedder(args.embedder)
    qs = questions(args.questions)
    emb.encode(qs[:8])  # sessions made, caches warm
    alone = np.vstack([emb.encode([q]) for q in qs[:args.single]])
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
              "embedder": getattr(emb, "implementation", args.embedder), "args": vars(args),
              "tokens_mean": float(np.mean(emb.model_inputs(qs)[1])), "runs": []}
    for rows in [int(r) for r in args.rows.split(",")]:
        for b in [int(x) for x in args.batches.split(",")]:
            n = args.single if b == 1 else max(b, min(len(qs), 256))
            best, vecs = float("inf"), None
            for _ in range(args.repeats):
                t = time.perf_counter()
                out = [emb.encode(qs[i:i + b], batch_size=rows) for i in range(0, n, b)]
                best = min(best, time.perf_counter() - t)
                vecs = np.vstack(out)
            m = min(len(alone), n)
            row = {"batch": b, "rows": rows, "questions": n, "ms_per_question": best * 1000 / n,
                   "max_abs_diff_vs_alone": float(np.abs(vecs[:m] - alone[:m]).max()),
                   "bitwise_equal_vs_alone": bool(np.array_equal(vecs[:m], alone[:m]))}
            report["runs"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    report["machine"]["load_avg_end"] = list(os.getloadavg())
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


if __name__ == "__main__":
    main()
