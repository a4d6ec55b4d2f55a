"""Calibrate and check the result confidence (gpurag/query/confidence.py) on the shared sets.

For each set, the questions are split in two by position: the even ones stay answerable, the
odd ones become questions about absent entities: their gold passages, and every passage whose
title or text names one of those gold titles (without disambiguation), are removed from the
corpus. Both halves are asked against that one reduced index (graph mode), and a logistic model
over the confidence features is fitted (Newton, small L2) on all of them. Reported: AUROC of
answerable vs absent questions per set cross-validated two ways, out of fold over the pooled
questions (5 stratified folds, 3 repeats) and with the model fitted on the *other* sets only
(leave one set out), besides in sample (the weights to store) and with the stored weights.

Usage: python bench/confidence.py [--sets hotpotqa_train100,musique_train100] [--work DIR]
       [--limit N] [--data /work/shared/data]
Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")
MAX_NAMING = 40  # a title named by more passages than this removes only its own pages


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def negative_split(corpus: list[dict], questions: list[dict]
                   ) -> tuple[list[dict], list[dict], list[dict]]:
    """(reduced corpus, answerable questions, absent-entity questions)."""
    by_id = {p["id"]: p for p in corpus}
    absent = questions[1::2]
    names = {_DISAMBIGUATION.sub("", by_id[g]["title"]).strip()
             for q in absent for g in q["gold_ids"] if g in by_id}
    names = {n for n in names if len(n) >= 3}
    drop = {g for q in absent for g in q["gold_ids"]}
    for name in names:
        hits = [p["id"] for p in corpus if name in p["title"] or name in p["text"]]
        drop.update(hits if len(hits) <= MAX_NAMING else
                    [p["id"] for p in corpus if _DISAMBIGUATION.sub("", p["title"]) == name])
    kept = [p for p in corpus if p["id"] not in drop]
    kept_ids = {p["id"] for p in kept}
    answerable = [q for q in questions[0::2] if all(g in kept_ids for g in q["gold_ids"])]
    return kept, answerable, absent


def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a positive scores above a negative), ties counting half."""
    allv = np.r_[pos, neg]
    order = allv.argsort(kind="stable")
    ranks = np.empty(len(allv))
    ranks[order] = np.arange(1, len(allv) + 1)
    for v in np.unique(allv):  # average ranks of ties
        same = allv == v
        ranks[same] = ranks[same].mean()
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2)
                 / (len(pos) * len(neg)))


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1e-2
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Logistic regression on standardized ``x``: (mean, scale, weights, bias)."""
    mean, scale = x.mean(axis=0), np.maximum(x.std(axis=0), 1e-6)
    z = np.c_[(x - mean) / scale, np.ones(len(x))]
    w = np.zeros(z.shape[1])
    reg = np.r_[np.full(z.shape[1] - 1, l2), 0.0]
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-z @ w))
        grad = z.T @ (p - y) / len(y) + reg * w
        hess = (z.T * (p * (1 - p))) @ z / len(y) + np.diag(reg + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return mean, scale, w[:-1], float(w[-1])


def set_features(name: str, work: Path, limit: int | None, data: Path = DATA) -> dict:
    from gpurag import Index
    from gpurag.query.confidence import features

    corpus = read_jsonl(data / name / "corpus.jsonl")
    questions = read_jsonl(data / name / "questions.jsonl")[:limit]
    kept, answerable, absent = negative_split(corpus, questions)
    out = work / f"{name}-negative"
    src = work / f"{name}-negative.jsonl"
    t0 = time.perf_counter()
    if not (out / "manifest.json").exists():
        work.mkdir(parents=True, exist_ok=True)
        src.write_text("".join(json.dumps(p) + "\n" for p in kept), encoding="utf-8")
        Index.build(src, out, show_progress=False)
    index = Index.open(out)
    build_s = time.perf_counter() - t0
    qs = [q["question"] for q in answerable + absent]
    qvecs = index.embedder.encode(qs, batch_size=64)
    x = features(index, qs, qvecs)
    y = np.r_[np.ones(len(answerable)), np.zeros(len(absent))]
    log(f"{name}: {len(corpus)} -> {len(kept)} passages, {len(answerable)} answerable, "
        f"{len(absent)} absent ({build_s:.0f} s)")
    return {"x": x, "y": y, "passages": len(corpus), "kept": len(kept),
            "answerable": len(answerable), "absent": len(absent)}


def out_of_fold(x: np.ndarray, y: np.ndarray, folds: int = 5, repeats: int = 3
                ) -> list[np.ndarray]:
    """Logits of each question from a model fitted without its fold (folds stratified by
    label), for ``repeats`` seeded splits."""
    out = []
    for seed in range(repeats):
        rng = np.random.default_rng(seed)
        fold = np.empty(len(y), np.int64)
        for label in (0, 1):
            idx = np.flatnonzero(y == label)
            rng.shuffle(idx)
            fold[idx] = np.arange(len(idx)) % folds
        z = np.empty(len(y))
        for f in range(folds):
            m, sc, w, b = fit(x[fold != f], y[fold != f])
            z[fold == f] = ((x[fold == f] - m) / sc) @ w + b
        out.append(z)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sets", default="hotpotqa_train100,musique_train100")
    ap.add_argument("--work", default="runs/confidence")
    ap.add_argument("--limit", type=int, help="first N questions of each set")
    ap.add_argument("--data", default=str(DATA), help="folder of the shared sets")
    args = ap.parse_args()
    from gpurag.query.confidence import FEATURES, confidence

    t0 = time.perf_counter()
    sets = {name: set_features(name, Path(args.work), args.limit, Path(args.data))
            for name in args.sets.split(",")}
    x = np.concatenate([s["x"] for s in sets.values()])
    y = np.concatenate([s["y"] for s in sets.values()])
    owner = np.concatenate([[name] * len(s["y"]) for name, s in sets.items()])
    mean, scale, weights, bias = fit(x, y)
    oof = out_of_fold(x, y)
    report: dict = {
        "date": time.strftime("%Y-%m-%d"), "features": list(FEATURES),
        "cv": "out of fold: 5 folds stratified by label over the pooled questions, 3 seeded "
              "repeats (mean AUROC); leave one set out: fitted on the other sets",
        "sets": {}, "fit": {"mean": mean.round(6).tolist(), "scale": scale.round(6).tolist(),
                            "weights": weights.round(6).tolist(), "bias": round(bias, 6)}}
    for name, s in sets.items():
        pos, neg = s["y"] == 1, s["y"] == 0
        row = {k: s[k] for k in ("passages", "kept", "answerable", "absent")}
        z = ((s["x"] - mean) / scale) @ weights + bias
        row["auroc_in_sample"] = auroc(z[pos], z[neg])
        sel = owner == name
        row["auroc_out_of_fold"] = float(np.mean(
            [auroc(zz[sel & (y == 1)], zz[sel & (y == 0)]) for zz in oof]))
        others = [o for o in sets if o != name]
        if others:
            ox = np.concatenate([sets[o]["x"] for o in others])
            oy = np.concatenate([sets[o]["y"] for o in others])
            m, sc, w, b = fit(ox, oy)
            zh = ((s["x"] - m) / sc) @ w + b
            row["auroc_leave_set_out"] = auroc(zh[pos], zh[neg])
        row["auroc_per_feature"] = {f: auroc(s["x"][pos, i], s["x"][neg, i])
                                    for i, f in enumerate(FEATURES)}
        row["auroc_stored_weights"] = auroc(confidence(s["x"])[pos], confidence(s["x"])[neg])
        report["sets"][name] = row
    z = ((x - mean) / scale) @ weights + bias
    report["auroc_pooled_in_sample"] = auroc(z[y == 1], z[y == 0])
    report["auroc_pooled_out_of_fold"] = float(np.mean([auroc(zz[y == 1], zz[y == 0])
                                                        for zz in oof]))
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["machine"] = {"cpu": f"{platform.machine()}, {os.cpu_count()} cores",
                         "python": platform.python_version(),
                         "load_1_5_15": [round(v, 1) for v in os.getloadavg()]}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
