"""The local push's threshold, chosen by cross-validation over questions (issue 26).

Each shared set's graph query runs once with power iteration (``ppr_method="power"``) and once
per candidate ``push_eps`` with the local push for every question (``ppr_method="push"``),
as one batch (``evidence=False``); per question: R@2, R@5 (share of gold documents in the
top 2 / 5) and all-gold@8, by ``gpurag.metrics`` (ranks over documents, a document's
repeated passages folded, as the eval tables and ``rerank="auto"`` count). Then
``--folds``-fold cross-validation over the questions of all sets (each set split alike,
``--repeats`` shuffles): on the training folds the **largest** eps whose mean of the three
metrics is not below power iteration's (ties keep the faster walk) is picked, and scored on
the held-out fold against power iteration on the same fold.

Usage: python bench/walk_cv.py [--sets musique_train100,hotpotqa_train100] [--work DIR]
       [--eps 3e-6,1e-5,3e-5,1e-4,3e-4] [--folds 5] [--repeats 5] [--out FILE.json]
``--work`` holds (or gets) one index per set, as ``bench/ranks.py`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

METRICS = ("r2", "r5", "all8")


def per_question(docs: list[list[str]], gold: list[list[str]]) -> np.ndarray:
    """``(questions, 3)``: R@2, R@5 and all-gold@8 of each ranked doc-id list (documents, not
    passages: :func:`gpurag.metrics.gold_ranks` folds a document's repeats)."""
    from gpurag.metrics import all_gold_per_question, gold_ranks, recall_per_question

    ranks = [gold_ranks(d, g) for d, g in zip(docs, gold, strict=True)]
    if not ranks:
        return np.zeros((0, 3))
    return np.stack([recall_per_question(ranks, 2), recall_per_question(ranks, 5),
                     all_gold_per_question(ranks, 8)], axis=1)


def run_set(name: str, work: Path, eps_list: list[float], k: int) -> dict:
    """Per variant (``power`` and each eps) the per-question metrics and the walk's time."""
    from shared_data import SHARED_DATA as DATA  # bench/ (this script's folder) is on sys.path

    from gpurag.eval.datasets import load_dataset
    from gpurag.eval.runner import open_or_build_index

    ds = load_dataset(str(DATA / name))
    triples = DATA / name / "triples.jsonl"
    index, _tmp, _ = open_or_build_index(
        ds, str(work / name), str(triples) if triples.is_file() else None, False)
    texts = [q.question for q in ds.questions]
    gold = [list(q.gold_ids) for q in ds.questions if q.gold_ids]
    keep = [i for i, q in enumerate(ds.questions) if q.gold_ids]
    variants = [("power", {"ppr_method": "power"})] + [
        (f"{e:g}", {"ppr_method": "push", "push_eps": e}) for e in eps_list]
    out = {"questions": len(keep), "nodes": index.retriever.graph.n_nodes,
           "edges": index.retriever.graph.n_edges, "variants": {}}
    with index:
        index.query_batch(texts[:2], k=k, mode="graph", evidence=False)  # opens its parts
        for label, opts in variants:
            t = time.perf_counter()
            res = index.query_batch(texts, k=k, mode="graph", evidence=False, **opts)
            wall = time.perf_counter() - t
            docs = [[p.doc_id for p in res[i].passages] for i in keep]
            walk = float(np.mean([r.timings_ms.get("walk", 0.0) for r in res]))
            out["variants"][label] = {"metrics": per_question(docs, gold).tolist(),
                                      "batch_s": wall, "walk_ms_per_question": walk}
            m = per_question(docs, gold).mean(axis=0)
            print(f"{name} {label}: R@2 {m[0]:.4f} R@5 {m[1]:.4f} all@8 {m[2]:.4f} "
                  f"(batch {wall:.1f} s)", file=sys.stderr, flush=True)
    return out


def cross_validate(sets: dict, eps_list: list[float], folds: int, repeats: int) -> dict:
    """Pick eps on training folds (largest not below power), score on the held-out fold."""
    labels = [f"{e:g}" for e in sorted(eps_list, reverse=True)]  # largest (fastest) first
    picks: dict[str, int] = {}
    held: dict[str, dict[str, list]] = {s: {"picked": [], "power": []} for s in sets}
    for rep in range(repeats):
        rng = np.random.default_rng(rep)
        fold_of = {s: rng.permutation(d["questions"]) % folds for s, d in sets.items()}
        for f in range(folds):
            def mean(label: str, fold: int = f, split: dict = fold_of) -> float:
                vals = [np.asarray(d["variants"][label]["metrics"])[split[s] != fold]
                        for s, d in sets.items()]
                return float(np.concatenate(vals).mean())
            base = mean("power")
            pick = next((lab for lab in labels if mean(lab) >= base), "power")
            picks[pick] = picks.get(pick, 0) + 1
            for s, d in sets.items():
                test = fold_of[s] == f
                held[s]["picked"].append(np.asarray(d["variants"][pick]["metrics"])[test])
                held[s]["power"].append(np.asarray(d["variants"]["power"]["metrics"])[test])
    report: dict = {"picks": picks, "held_out": {}}
    for s, h in held.items():
        a, b = np.concatenate(h["picked"]), np.concatenate(h["power"])
        report["held_out"][s] = {
            m: {"picked": round(float(a[:, j].mean()), 4), "power": round(float(b[:, j].mean()), 4)}
            for j, m in enumerate(METRICS)}
    return report


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # gpurag without an install
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="musique_train100,hotpotqa_train100")
    ap.add_argument("--work", default="runs/ranks")
    ap.add_argument("--eps", default="3e-6,1e-5,3e-5,1e-4,3e-4")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    eps_list = [float(e) for e in args.eps.split(",")]
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "load_avg": list(os.getloadavg()), "args": vars(args), "sets": {}}
    for name in args.sets.split(","):
        report["sets"][name] = run_set(name, Path(args.work), eps_list, args.k)
    report["cv"] = cross_validate(report["sets"], eps_list, args.folds, args.repeats)
    report["load_avg_end"] = list(os.getloadavg())
    for s, d in report["sets"].items():  # full-set means per variant, for the record
        report.setdefault("means", {})[s] = {
            lab: [round(float(x), 4) for x in np.asarray(v["metrics"]).mean(axis=0)]
            for lab, v in d["variants"].items()}
    text = json.dumps(report, indent=1)
    print(json.dumps({"cv": report["cv"], "means": report["means"]}, indent=1),
          file=sys.stderr)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


if __name__ == "__main__":
    main()
