"""Per-question ranks of graph (and dense) mode on the shared evaluation sets, for rank identity.

Builds (or reuses, under ``--work``) one index per set, ranks every question as one batch and
writes ``{set: {mode: {question id: [[doc_id, chunk_id, score], ...]}}}``. ``--compare A B``
counts the questions whose top-k rows differ, the changed ranks, and recall of both.

Usage: python bench/ranks.py [--sets musique_train100,hotpotqa_train100,lihua_world]
       [--work runs/ranks] [--k 20] --out FILE.json
       python bench/ranks.py --compare BEFORE.json AFTER.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared_data import SHARED_DATA as DATA  # bench/, this script's folder, is on sys.path

SETS = ("musique_train100", "hotpotqa_train100", "lihua_world")
MODES = ("dense", "graph")


def dump(sets: list[str], work: Path, k: int) -> dict:
    from gpurag.eval.datasets import load_dataset
    from gpurag.eval.runner import open_or_build_index

    out: dict = {}
    for name in sets:
        ds = load_dataset(str(DATA / name))
        triples = DATA / name / "triples.jsonl"
        index, _tmp, _ = open_or_build_index(
            ds, str(work / Path(name).name), str(triples) if triples.is_file() else None, False)
        texts = [q.question for q in ds.questions]
        out[name] = {}
        for mode in MODES:
            res = index.query_batch(texts, k=k, mode=mode, evidence=False)
            out[name][mode] = {
                q.id: [[p.doc_id, p.chunk_id, round(float(p.score), 6)] for p in r.passages]
                for q, r in zip(ds.questions, res, strict=True)}
        out[name]["gold"] = {q.id: list(q.gold_ids) for q in ds.questions}
    return out


def recall(ranked: dict, gold: dict, at: int) -> float:
    vals = [len(set(d[0] for d in ranked[q][:at]) & set(g)) / len(g)
            for q, g in gold.items() if g]
    return round(sum(vals) / max(len(vals), 1), 4)


def compare(a: dict, b: dict) -> dict:
    rep = {}
    for name in a:
        for mode in MODES:
            ra, rb = a[name][mode], b[name][mode]
            gold = a[name]["gold"]
            same = sum([r[1] for r in ra[q]] == [r[1] for r in rb[q]] for q in ra)
            changed = sum(x[1] != y[1] for q in ra for x, y in zip(ra[q], rb[q], strict=False))
            rep[f"{name}/{mode}"] = {
                "questions": len(ra), "identical": same, "changed_ranks": changed,
                "recall@2": [recall(ra, gold, 2), recall(rb, gold, 2)],
                "recall@5": [recall(ra, gold, 5), recall(rb, gold, 5)],
                "recall@10": [recall(ra, gold, 10), recall(rb, gold, 10)]}
    return rep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--work", default="runs/ranks")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2)
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        print(json.dumps(compare(a, b), indent=1))
        return
    res = dump(args.sets.split(","), Path(args.work), args.k)
    text = json.dumps(res)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
