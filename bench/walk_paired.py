"""In-process paired A/B of the host walk: another tree's walk against this one's, end to end.

On a machine shared with other work, runs of one tree after the other differ by more than a
few-percent change (bench/query.py's graph p50 at 2k moved 6.2-13.4 ms between runs of the
same code at load 4-5). Here one process opens the index once and asks each question (or
batch) twice in turn, once through the other tree's ``gpurag/graph/ppr.py`` and
``ppr_top.py`` (loaded as separate modules: ``_split_topk`` and the solvers it calls) and
once through this tree's, alternating which goes first; the question vectors are embedded
once beforehand (the walk is what differs). It asserts the two arms return the same
passages and scores, and reports per arm the median wall ms per question of the whole
``query_batch`` call and of its ``walk`` stage, CPU ms per question, and the paired
medians of the differences (new - base).

Usage: PYTHONPATH=$PWD python bench/walk_paired.py --base /work/wt/base --work runs/bench
       [--size 2000] [--batch 1] [--questions 200] [--rounds 3] [--out FILE.json]
(the index of the first ``size`` passages as bench/query.py builds it in ``--work``; 20k and
more: its ``-standin`` index).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from query import DEFAULT_DATA, make_questions, write_prefix


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class _Cached:
    """The index's embedder with each question's vector computed once beforehand."""

    def __init__(self, embedder, vectors: dict) -> None:
        self._embedder, self._vectors = embedder, vectors

    def encode(self, questions, batch_size=64):
        return np.stack([self._vectors[q] for q in questions])

    def __getattr__(self, name):
        return getattr(self._embedder, name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the other tree (its gpurag/graph/ppr*.py)")
    ap.add_argument("--work", default="runs/bench")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--size", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    os.environ.setdefault("GPURAG_DEVICE", "cpu")
    import gpurag.graph.ppr_top as ppr_top
    from gpurag import Index

    base_ppr = _load(Path(args.base) / "gpurag/graph/ppr.py", "walk_paired_base_ppr")
    base_top = _load(Path(args.base) / "gpurag/graph/ppr_top.py", "walk_paired_base_ppr_top")
    base_top.host_ppr = base_ppr
    splits = {"base": base_top._split_topk, "new": ppr_top._split_topk}
    work = Path(args.work)
    rows = write_prefix(Path(args.data), args.size, work / f"enwiki-{args.size}.jsonl")
    name = f"enwiki-{args.size}.index"
    if not (work / name / "manifest.json").is_file():
        name = f"enwiki-{args.size}-standin.index"
    index = Index.open(work / name)
    n, batch = args.questions, args.batch
    questions = make_questions(rows, max(n, 1024))[:n]
    index.query_batch(questions[:4], k=10, mode="graph")
    vectors = index.embedder.encode(questions, batch_size=64)
    index._embedder = _Cached(index.embedder, dict(zip(questions, vectors, strict=True)))
    for i in range(0, min(n, 30 * batch), batch):  # warm-up
        index.query_batch(questions[i:i + batch], k=10, mode="graph")
    wall: dict = {"base": [], "new": []}
    walk: dict = {"base": [], "new": []}
    cpu = {"base": 0.0, "new": 0.0}
    load_start = os.getloadavg()
    try:
        for rnd in range(args.rounds):
            for j, i in enumerate(range(0, n, batch)):
                got = {}
                for arm in (("base", "new") if (j + rnd) % 2 == 0 else ("new", "base")):
                    ppr_top._split_topk = splits[arm]
                    c, t = time.process_time(), time.perf_counter()
                    res = index.query_batch(questions[i:i + batch], k=10, mode="graph",
                                            evidence=False)
                    wall[arm].append((time.perf_counter() - t) * 1000 / len(res))
                    cpu[arm] += time.process_time() - c
                    walk[arm].append(res[0].timings_ms["walk"])
                    got[arm] = [[(p.chunk_id, p.score) for p in r.passages] for r in res]
                if got["base"] != got["new"]:
                    sys.exit(f"the two walks returned different passages for batch {j}")
    finally:
        ppr_top._split_topk = splits["new"]
    calls = len(wall["base"])
    out = {"index": str(work / name), "base": args.base, "batch": batch, "questions": n,
           "calls_per_arm": calls, "load_start": load_start, "load_end": os.getloadavg(),
           "identical_results": True}
    for arm in ("base", "new"):
        out[f"{arm}_wall_median_ms_per_q"] = float(np.median(wall[arm]))
        out[f"{arm}_walk_median_ms_per_q"] = float(np.median(walk[arm]))
        out[f"{arm}_cpu_ms_per_q"] = cpu[arm] * 1000 / (calls * batch)
    for key, vals in (("wall", wall), ("walk", walk)):
        out[f"paired_{key}_diff_median_ms"] = float(np.median(np.subtract(vals["new"],
                                                                          vals["base"])))
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
