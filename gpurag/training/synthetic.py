"""Synthetic multi-hop questions as reranker training data: :func:`prepare_synthetic` and the
command line. The generator itself (four kinds of question from an index's own graph, seeded
and deterministic) is :mod:`gpurag.query.synthetic`, re-exported here.

    python -m gpurag.training.synthetic INDEX -n 50 [-o questions.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys

from gpurag.query.synthetic import (
    HOPS,
    KINDS,
    Corpus,
    SyntheticQuestion,
    SyntheticSet,
    bridge_triples,
    generate,
)


def prepare_synthetic(index, n: int, cfg, seed: int | None = None, draw: int | None = None,
                      kinds: dict[str, float] | None = None, trivial_top: int = 2,
                      aspects: bool = False, exclude: set[frozenset[str]] | None = None):
    """Generate ``n`` synthetic questions of ``index`` and record their reranker inputs
    (:func:`gpurag.rerank.train.prepare` with the ``TrainConfig`` ``cfg``); returns the
    ``QuestionSet`` (drawing ``draw`` questions per epoch) and the :class:`SyntheticSet`.
    ``aspects``: bridges also go to aspect pages (:func:`generate`); ``exclude``: gold
    document sets whose questions are left out (e.g. those ``rerank="auto"`` decides on;
    counted in ``excluded``, overall and per kind). Raises ``ConfigError`` when the index
    yields no question, saying why (none made, all answered by dense retrieval, all left out)."""
    from gpurag.errors import ConfigError
    from gpurag.rerank.train import prepare

    syn = generate(index, n, cfg.seed if seed is None else seed, kinds, trivial_top,
                   aspects=aspects)
    if exclude:
        kept = [q for q in syn.questions if frozenset(q.gold_ids) not in exclude]
        for q in syn.questions:  # each kind's count of kept questions follows
            if frozenset(q.gold_ids) in exclude:
                stats = syn.stats[q.kind]
                stats["kept"] -= 1
                stats["excluded"] = stats.get("excluded", 0) + 1
        syn.excluded, syn.questions = len(syn.questions) - len(kept), kept
    if syn.empty_reason:
        raise ConfigError(f"index {index.path} yields no synthetic questions: "
                          f"{syn.empty_reason}")
    qs = prepare(index, syn, cfg.candidates, fanout=cfg.fanout)
    qs.draw = draw
    return qs, syn


def add_mix_arguments(p) -> None:
    """The options of how synthetic questions are drawn, made and filtered (``train-scorer``
    and ``crossval`` share them): ``--synthetic-per-epoch``, ``--synthetic-kinds``,
    ``--synthetic-aspects``, ``--synthetic-trivial-top``."""
    p.add_argument("--synthetic-per-epoch", type=int, default=None, metavar="M",
                   help="synthetic questions drawn per index and epoch (default: all, or the "
                        "balanced count with --balance-sets)")
    p.add_argument("--synthetic-kinds", metavar="KIND=W,...",
                   help="mix of bridge, chain, chain4, comparison and shared questions "
                        "(default bridge=0.5,chain=0.15,comparison=0.15,shared=0.2)")
    p.add_argument("--synthetic-aspects", action="store_true",
                   help="bridges and chains also go to aspect pages (History of X for X)")
    p.add_argument("--synthetic-trivial-top", type=int, default=2, metavar="K",
                   help="drop synthetic questions dense retrieval answers in its top K "
                        "documents (0: keep all)")


def parse_kinds(spec: str | None) -> dict[str, float] | None:
    """``"bridge=0.6,shared=0.4"`` as weights (None: the default mix)."""
    from gpurag.errors import ConfigError

    if not spec:
        return None
    out = {}
    for part in spec.split(","):
        kind, _, weight = part.partition("=")
        try:
            out[kind.strip()] = float(weight) if weight else 1.0
        except ValueError:
            raise ConfigError(f"bad synthetic kind weight {part!r}: use KIND=WEIGHT") from None
    return out


def main(argv: list[str] | None = None) -> int:
    from gpurag import Index

    p = argparse.ArgumentParser(prog="python -m gpurag.training.synthetic",
                                description="write synthetic multi-hop questions of an index "
                                            "(eval-format questions.jsonl)")
    p.add_argument("index", help="index folder")
    p.add_argument("-n", type=int, default=100, help="questions wanted")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trivial-top", type=int, default=2,
                   help="drop questions dense retrieval answers in its top K documents (0: keep)")
    p.add_argument("--kinds", help="kind weights, e.g. bridge=0.5,chain=0.15,comparison=0.15,"
                                   "shared=0.2 (the default)")
    p.add_argument("-o", "--out", help="questions.jsonl to write (default: print)")
    args = p.parse_args(argv)
    syn = generate(Index.open(args.index), args.n, args.seed, parse_kinds(args.kinds),
                   trivial_top=args.trivial_top)
    print(json.dumps({"questions": len(syn.questions), "stats": syn.stats}), file=sys.stderr)
    if syn.empty_reason:
        print(f"no synthetic questions: {syn.empty_reason}", file=sys.stderr)
        return 1
    lines = [json.dumps(q.record(), ensure_ascii=False) for q in syn.questions]
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    else:
        print("\n".join(lines))
    return 0


__all__ = ["HOPS", "KINDS", "Corpus", "SyntheticQuestion", "SyntheticSet", "add_mix_arguments",
           "bridge_triples", "generate", "parse_kinds", "prepare_synthetic"]

if __name__ == "__main__":
    raise SystemExit(main())
