"""K-fold cross-validation of the GAT reranker pooled over several datasets, scored end to end.

Each dataset's questions are shuffled (seeded) and split into ``folds`` parts. For fold ``k``
one model trains on parts ``k+2 ..`` of every dataset, validates on part ``k+1`` of every
dataset (early stopping) and is installed as the ``gat`` reranker to rank part ``k`` of every
dataset through ``Index.query_batch(mode="graph", rerank="gat")``; so every question is
ranked by a model that never saw it, with ``gpurag eval``'s document-level metrics. Graph
mode without a reranker runs on the same questions for comparison. With ``--synthetic N``,
N synthetic questions generated from each set's index (:mod:`gpurag.training.synthetic`) join
every fold's training part, never its validation or test part. With ``--auto``, each fold's
model also makes ``rerank="auto"``'s decision on each index (:mod:`gpurag.rerank.auto`: its
synthetic questions, which are then left out of the synthetic training questions; reranking
``--candidates`` candidates, as ``auto.decide(index, candidates=N)`` does), and the
fold's questions of that index are ranked as the decision says ("graph+auto").

    python -m gpurag.training.crossval OUT.json DATA:INDEX [DATA:INDEX ...] [--balance-sets]
        [--synthetic N [--synthetic-per-epoch M] [--synthetic-aspects]] [--auto]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from gpurag.rerank.train import QuestionSet, TrainConfig, prepare, train


def fold_parts(n: int, folds: int, seed: int) -> list[np.ndarray]:
    """``folds`` disjoint sorted index arrays covering ``range(n)`` (a seeded shuffle)."""
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(p) for p in np.array_split(perm, folds)]


def fold_split(parts: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, validation, test) of fold ``k``: test part ``k``, validation part ``k+1``,
    training the rest."""
    folds = len(parts)
    test, val = parts[k], parts[(k + 1) % folds]
    rest = [p for i, p in enumerate(parts) if i not in (k, (k + 1) % folds)]
    train_idx = np.sort(np.concatenate(rest)) if rest else np.zeros(0, np.int64)
    return train_idx, val, test


def _ranks(index, questions: list, **options) -> list[list[int | None]]:
    from gpurag.eval.runner import RANK_DEPTH
    from gpurag.metrics import gold_ranks

    res = index.query_batch([q.question for q in questions], k=RANK_DEPTH, mode="graph",
                            **options)
    return [gold_ranks(r.doc_ids, q.gold_ids) for r, q in zip(res, questions, strict=True)]


def job_labels(jobs: list[tuple[Any, Any]]) -> list[str]:
    """One unique label per job: the dataset's name, with ``#2``, ``#3`` .. for later jobs on
    the same dataset (e.g. its index with LLM triples beside the rule-based one)."""
    seen: dict[str, int] = {}
    labels = []
    for _, ds in jobs:
        seen[ds.name] = seen.get(ds.name, 0) + 1
        labels.append(ds.name if seen[ds.name] == 1 else f"{ds.name}#{seen[ds.name]}")
    return labels


def _add_synthetic(index, n: int, cfg: TrainConfig, draw: int | None,
                   kinds: dict[str, float] | None, trivial_top: int,
                   extra: list[QuestionSet], aspects: bool = False,
                   exclude: set[frozenset[str]] | None = None) -> dict[str, Any]:
    """Append ``n`` synthetic questions of ``index`` to ``extra`` (none with the gold of
    ``exclude``); what was made (an index that yields none is skipped, with the reason)."""
    from gpurag.errors import ConfigError
    from gpurag.training.synthetic import prepare_synthetic

    try:
        qs, syn = prepare_synthetic(index, n, cfg, draw=draw, kinds=kinds,
                                    trivial_top=trivial_top, aspects=aspects, exclude=exclude)
    except ConfigError as exc:
        return {"questions": 0, "skipped": str(exc)}
    extra.append(qs)
    return {"questions": len(qs), "kinds": syn.stats, "excluded": syn.excluded}


class _AutoJudge:
    """``rerank="auto"``'s decision on one index for any model, as
    :func:`gpurag.rerank.auto.decide` makes it (the same :func:`~gpurag.rerank.auto.ranked`
    rankings and :func:`~gpurag.rerank.auto.verdict`): its synthetic questions and graph
    mode's ranking of them, made once."""

    def __init__(self, index, profile=None) -> None:
        from gpurag.rerank import auto

        self.index, self.profile = index, profile or auto.PROFILE
        self.syn = auto.decision_questions(index, self.profile)
        self.base = auto.ranked(index, self.syn, self.profile) if self.syn.questions else []

    @property
    def gold(self) -> set[frozenset[str]]:
        return {frozenset(q.gold_ids) for q in self.syn.questions}

    def decide(self, candidates: int | None = None) -> dict[str, Any]:
        """The decision with the ``gat`` reranker installed now, reranking ``candidates``
        candidates (None: the index's): ``auto.decide(index, candidates=candidates)``."""
        from gpurag.rerank import auto

        empty = auto.no_questions(self.syn)
        if empty is not None:
            return empty
        return auto.verdict(self.index, self.syn, self.base, self.profile, "gat", candidates)


def pooled_cv(jobs: list[tuple[Any, Any]], cfg: TrainConfig, folds: int = 5,
              progress: bool = False, labels: list[str] | None = None, synthetic: int = 0,
              synthetic_draw: int | None = None,
              synthetic_kinds: dict[str, float] | None = None,
              trivial_top: int = 2, synthetic_aspects: bool = False,
              auto: bool = False) -> dict[str, Any]:
    """Cross-validate over ``jobs`` ``[(index, dataset), ...]``; per job (keyed by ``labels``,
    default :func:`job_labels`) the pooled out-of-fold metrics of graph and graph+gat, and the
    per question ranks. Jobs over the same questions share their folds, so no question is
    scored by a model trained on it through another index. ``synthetic`` questions of each
    job's index (``synthetic_draw`` of each drawn per epoch) are added to every fold's
    training sets, never to validation or test. ``auto``: each fold's model also decides
    ``rerank="auto"`` per job (:class:`_AutoJudge`; its questions are kept out of the synthetic
    training questions) and ranks the job's fold as decided ("graph+auto")."""
    from gpurag.metrics import summarize
    from gpurag.rerank import GATReranker, using_reranker
    from gpurag.rerank.model import ScorerSettings

    labels = labels or job_labels(jobs)
    if len(set(labels)) != len(labels):
        raise ValueError(f"crossval labels must be unique: {labels}")
    t0 = time.perf_counter()
    sets: list[tuple[Any, Any, QuestionSet, list[np.ndarray]]] = []
    extra: list[QuestionSet] = []
    synthetic_info = {}
    judges = [_AutoJudge(index) for index, _ in jobs] if auto else []
    for index, ds in jobs:
        qs = prepare(index, ds, cfg.candidates, fanout=cfg.fanout)
        sets.append((index, ds, qs, fold_parts(len(qs), folds, cfg.seed)))
        if synthetic > 0:
            lab = labels[len(sets) - 1]
            synthetic_info[lab] = _add_synthetic(
                index, synthetic, cfg, synthetic_draw, synthetic_kinds, trivial_top, extra,
                synthetic_aspects, judges[len(sets) - 1].gold if auto else None)
            if progress:
                made = synthetic_info[lab]
                why = (f"skipped: {made['skipped']}" if "skipped" in made else
                       f"{made['excluded']} left out: rerank=auto decides on them"
                       if made["excluded"] else "")
                print(f"{lab}: {made['questions']} synthetic questions "
                      f"({f'{why}; ' if why else ''}{time.perf_counter() - t0:.0f}s)", flush=True)
    oof: dict[str, list] = {lab: [None] * len(qs) for lab, (_, _, qs, _) in zip(labels, sets,
                                                                                 strict=True)}
    settings = ScorerSettings(tuple(cfg.fanout), cfg.max_nodes)
    base_ranks = {lab: _ranks(index, ds.questions)
                  for lab, (index, ds, _, _) in zip(labels, sets, strict=True)}
    oof_auto: dict[str, list] = {lab: [None] * len(qs) for lab, (_, _, qs, _) in
                                 zip(labels, sets, strict=True)}
    fold_info = []
    for k in range(folds):
        splits = [fold_split(parts, k) for *_, parts in sets]
        model, info = train([*(qs.take(sp[0]) for (_, _, qs, _), sp in zip(sets, splits,
                                                                              strict=True)),
                             *extra],
                            [qs.take(sp[1]) for (_, _, qs, _), sp in zip(sets, splits,
                                                                           strict=True)],
                            cfg)
        fold_info.append({"best_epoch": info["best_epoch"], "epochs": len(info["history"]),
                          "seconds": round(info["seconds"], 1), "auto": {}})
        for j, (lab, (index, ds, qs, _), (_, _, test)) in enumerate(zip(labels, sets, splits,
                                                                        strict=True)):
            retriever = index.retriever
            with using_reranker(retriever, "gat", GATReranker(qs.arrays, model, settings)):
                got = _ranks(index, [ds.questions[i] for i in test], rerank="gat",
                             rerank_candidates=cfg.candidates)
                decision = judges[j].decide(cfg.candidates) if auto else None
            for i, r in zip(test, got, strict=True):
                oof[lab][i] = r
            if decision is not None:
                fold_info[-1]["auto"][lab] = {key: decision[key] for key in
                                              ("rerank", "reason") if key in decision}
                on = decision["rerank"] == "gat"
                for i, r in zip(test, got, strict=True):
                    oof_auto[lab][i] = r if on else base_ranks[lab][i]
        if progress:
            print(f"fold {k}: best epoch {info['best_epoch']} of {len(info['history'])} "
                  f"({time.perf_counter() - t0:.0f}s)", flush=True)
    out: dict[str, Any] = {"folds": fold_info, "sets": {},
                           "seconds": round(time.perf_counter() - t0, 1)}
    if synthetic_info:
        out["synthetic"] = {"per_set": synthetic, "draw_per_epoch": synthetic_draw,
                            "trivial_top": trivial_top, "sets": synthetic_info}
    for lab, (_, ds, _, _) in zip(labels, sets, strict=True):
        ranks = {"graph": base_ranks[lab], "graph+gat": oof[lab]}
        if auto:
            ranks["graph+auto"] = oof_auto[lab]
        row: dict[str, Any] = {mode: summarize(r) for mode, r in ranks.items()}
        deep = [i for i, q in enumerate(ds.questions) if (q.hops or 0) >= 3]
        if deep and len(deep) < len(ds.questions):  # the 3- and 4-hop questions alone
            row["hops>=3"] = {mode: summarize([r[i] for i in deep]) for mode, r in ranks.items()}
            row["hops>=3"]["questions"] = len(deep)
        out["sets"][lab] = {**row, "ranks": ranks}
    return out


def main(argv: list[str] | None = None) -> int:
    from gpurag.eval.datasets import load_dataset
    from gpurag.eval.runner import open_or_build_index

    p = argparse.ArgumentParser(prog="python -m gpurag.training.crossval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="JSON file to write")
    p.add_argument("sets", nargs="+", metavar="DATA:INDEX",
                   help="dataset folder and its index folder (reused, or built there)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--balance-sets", action="store_true")
    p.add_argument("--point-loss", type=float, default=1.0)
    p.add_argument("--candidates", type=int, default=30,
                   help="candidates per question, in training and when ranking")
    p.add_argument("--synthetic", type=int, default=0, metavar="N",
                   help="synthetic questions per set's index, added to every fold's training")
    p.add_argument("--auto", action="store_true",
                   help="also decide rerank=auto per fold and index, and score it")
    from gpurag.training.synthetic import add_mix_arguments, parse_kinds

    add_mix_arguments(p)
    args = p.parse_args(argv)
    jobs = []
    for spec in args.sets:
        root, _, index_dir = spec.partition(":")
        ds = load_dataset(root)
        index, _, _ = open_or_build_index(ds, index_dir or None, None, show_progress=False)
        jobs.append((index, ds))
    cfg = TrainConfig(seed=args.seed, epochs=args.epochs, balance_sets=args.balance_sets,
                      point_loss_weight=args.point_loss, candidates=args.candidates)
    res = pooled_cv(jobs, cfg, args.folds, progress=True, synthetic=args.synthetic,
                    synthetic_draw=args.synthetic_per_epoch,
                    synthetic_kinds=parse_kinds(args.synthetic_kinds),
                    trivial_top=args.synthetic_trivial_top,
                    synthetic_aspects=args.synthetic_aspects, auto=args.auto)
    res["config"] = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(cfg).items()}
    keys = ("recall@2", "recall@5", "all_gold@8", "mrr")
    for name, row in res["sets"].items():
        for mode in row["ranks"]:
            print(f"{name:24s} {mode:10s} " + " · ".join(f"{row[mode][k]:.3f}" for k in keys))
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
