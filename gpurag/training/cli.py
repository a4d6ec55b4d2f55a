"""``gpurag train-scorer``: train the GAT reranker on eval-format datasets, write a checkpoint."""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpurag.config import bounded_workers


def _fmt(row: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:.3f}" for k, v in row.items() if isinstance(v, float))


def cmd_train_scorer(args: argparse.Namespace) -> int:
    from gpurag.errors import ConfigError
    from gpurag.eval.datasets import load_dataset
    from gpurag.eval.runner import open_or_build_index
    from gpurag.rerank import require_gnn

    require_gnn()
    from gpurag.rerank.train import (
        TrainConfig,
        cross_validate,
        evaluate_model,
        prepare,
        split,
        train,
    )

    indexes = list(args.index or [])
    if indexes and args.datasets and len(indexes) != len(args.datasets):
        raise ConfigError("give one --index per dataset (or none)")
    cfg = TrainConfig(seed=args.seed, epochs=args.epochs, patience=args.patience,
                      lr=args.lr, weight_decay=args.weight_decay, dropout=args.dropout,
                      point_loss_weight=args.point_loss,
                      val_frac=args.val_frac, test_frac=args.test_frac,
                      candidates=args.candidates, hidden=args.hidden, layers=args.layers,
                      heads=args.heads, conv=args.conv,
                      fanout=tuple(int(f) for f in args.fanout.split(",")),
                      max_nodes=args.max_nodes,
                      threads=bounded_workers(args.threads, "--threads"),
                      balance_sets=args.balance_sets)
    quiet = args.quiet
    data, train_sets, val_sets, test_sets, keep = [], [], [], [], []
    cv_results: dict[str, Any] = {}
    for i, root in enumerate(args.datasets):
        ds = load_dataset(root)
        index, tmp, _ = open_or_build_index(ds, indexes[i] if indexes else None, None,
                                            show_progress=not quiet)
        keep.append((index, tmp, ds))
        t0 = time.perf_counter()
        qs = prepare(index, ds, cfg.candidates, fanout=cfg.fanout)
        record_s = time.perf_counter() - t0
        if args.cv > 1:
            cv = cross_validate(qs, cfg, args.cv)
            cv.pop("scores")
            cv_results[ds.name] = cv
            if not quiet:
                print(f"{args.cv}-fold CV {ds.name}: gat {_fmt(cv['gat'])} | "
                      f"graph {_fmt(cv.get('base', {}))}")
        tr, va, te = split(len(qs), cfg.val_frac, cfg.test_frac, cfg.seed)
        train_sets.append(qs.take(tr))
        if len(va):
            val_sets.append(qs.take(va))
        if len(te):
            test_sets.append((index, ds, qs.take(te)))
        data.append({"dataset": ds.name, "path": str(Path(root).resolve()),
                     "passages": int(index.manifest.counts.get("documents", 0)),
                     "questions": len(qs), "train": len(tr), "val": len(va), "test": len(te),
                     "test_ids": [qs.ids[j] for j in te], "val_ids": [qs.ids[j] for j in va]})
        if not quiet:
            print(f"{ds.name}: {len(tr)} train / {len(va)} val / {len(te)} test questions "
                  f"(candidates recorded in {record_s:.1f}s)")
    if args.synthetic:
        paths = args.synthetic_index or ([] if args.datasets else indexes)
        sources = ([(p, None) for p in paths] if paths
                   else [(str(index.path), index) for index, _, _ in keep])
        if not sources:
            raise ConfigError("--synthetic needs index folders: --synthetic-index IDX or "
                              "--index IDX")
        skipped = []
        for path, index in sources:
            try:
                _add_synthetic(index or _open(path), args, cfg, bool(args.datasets),
                               train_sets, val_sets, data, quiet)
            except ConfigError as exc:  # another index may still yield some
                skipped.append(str(exc))
                print(f"skipped: {exc}", file=sys.stderr)
        if len(skipped) == len(sources) and not train_sets:
            raise ConfigError("; ".join(skipped))
    if not train_sets:
        raise ConfigError("nothing to train on: give datasets, or --synthetic N with "
                          "--index IDX")
    model, info = train(train_sets, val_sets, cfg, progress=not quiet)
    metrics: dict[str, Any] = {"best_epoch": info["best_epoch"], "seconds": info["seconds"]}
    if cv_results:
        metrics["cross_validation"] = cv_results
    for name, sets in (("val", val_sets), ("test", [t[2] for t in test_sets])):
        for qs in sets:
            metrics[f"{name}/{qs.name}"] = evaluate_model(model, qs, cfg)
            if not quiet:
                print(f"{name} {qs.name}: {_fmt(metrics[f'{name}/{qs.name}'])}")
    if args.eval:
        metrics["eval"] = _eval_heldout(model, cfg, test_sets, args.eval_sets or [],
                                        args.eval_index or [], quiet)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_checkpoint(out, model, cfg, data, metrics, info)
    print(f"checkpoint written to {out} (model card {out.with_suffix('.json')})")
    for _, tmp, _ in keep:
        if tmp is not None:
            tmp.cleanup()
    return 0


def _open(path: str):
    from gpurag import Index

    return Index.open(path)


def _add_synthetic(index, args: argparse.Namespace, cfg, with_real: bool, train_sets: list,
                   val_sets: list, data: list[dict], quiet: bool) -> None:
    """Synthetic questions of ``index`` for training (:mod:`gpurag.training.synthetic`): all of
    them beside real datasets (which validate), else split into train and validation."""
    from gpurag.rerank.train import split
    from gpurag.training.synthetic import parse_kinds, prepare_synthetic

    t0 = time.perf_counter()
    qs, syn = prepare_synthetic(index, args.synthetic, cfg, draw=args.synthetic_per_epoch,
                                kinds=parse_kinds(args.synthetic_kinds),
                                trivial_top=args.synthetic_trivial_top,
                                aspects=args.synthetic_aspects)
    if with_real:
        tr, va = np.arange(len(qs)), np.zeros(0, np.int64)
    else:
        tr, va, _ = split(len(qs), cfg.val_frac, 0.0, cfg.seed)
    train_sets.append(qs.take(tr))
    if len(va):
        val_sets.append(qs.take(va))
    data.append({"dataset": syn.name, "synthetic": True, "path": str(index.path),
                 "passages": int(index.manifest.counts.get("documents", 0)),
                 "questions": len(qs), "train": len(tr), "val": len(va), "test": 0,
                 "test_ids": [], "val_ids": [qs.ids[j] for j in va], "kinds": syn.stats,
                 "draw_per_epoch": args.synthetic_per_epoch,
                 "trivial_top": args.synthetic_trivial_top, "aspects": syn.aspects,
                 "examples": [q.question for q in syn.questions[:: max(1, len(qs) // 8)]]})
    if not quiet:
        kinds = ", ".join(f"{k} {v['kept']}" for k, v in syn.stats.items())
        print(f"{syn.name}: {len(tr)} train / {len(va)} val synthetic questions ({kinds}; "
              f"generated and recorded in {time.perf_counter() - t0:.1f}s)")


def _eval_heldout(model, cfg, test_sets, extra_sets: list[str], extra_index: list[str],
                  quiet: bool) -> dict[str, Any]:
    """``gpurag eval`` numbers (graph with and without the GAT) on test splits and other sets."""
    from gpurag.eval.datasets import load_dataset
    from gpurag.eval.runner import evaluate, open_or_build_index
    from gpurag.rerank import GATReranker, using_reranker
    from gpurag.rerank.features import GraphArrays
    from gpurag.rerank.model import ScorerSettings

    settings = ScorerSettings(tuple(cfg.fanout), cfg.max_nodes)
    jobs = []
    for index, ds, qs in test_sets:
        wanted = set(qs.ids)
        ds.questions = [q for q in ds.questions if q.id in wanted]
        jobs.append((f"{ds.name}[test split]", index, ds))
    for i, root in enumerate(extra_sets):
        ds = load_dataset(root)
        index, _, _ = open_or_build_index(ds, extra_index[i] if i < len(extra_index) else None,
                                          None, show_progress=not quiet)
        jobs.append((ds.name, index, ds))
    out = {}
    for label, index, ds in jobs:
        rr = GATReranker(GraphArrays.from_retriever(index.retriever), model, settings)
        with using_reranker(index.retriever, "gat", rr):
            res = evaluate(ds, index, ["dense", "graph", "graph+gat"], latency_sample=5)
        keys = ("recall@2", "recall@5", "all_gold@8", "mrr")
        out[label] = {m: {k: round(float(r[k]), 4) for k in keys}
                      for m, r in res["modes"].items()}
        out[label]["n_questions"] = res["n_questions"]
        if not quiet:
            for m, r in out[label].items():
                if isinstance(r, dict):
                    print(f"eval {label} {m}: {_fmt({k: float(v) for k, v in r.items()})}")
    return out


def write_checkpoint(out: Path, model, cfg, data: list[dict], metrics: dict,
                     info: dict) -> None:
    """The safetensors weights and their model card (``.json`` beside them)."""
    import torch
    import torch_geometric

    from gpurag._version import __version__
    from gpurag.rerank.model import ScorerSettings, save_checkpoint

    settings = ScorerSettings(tuple(cfg.fanout), cfg.max_nodes)
    save_checkpoint(out, model, settings)
    out.chmod(0o644)
    blob = out.read_bytes()
    card = {
        "name": out.stem, "format": "gpurag-gat/1", "gpurag_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seed": cfg.seed,
        "task": "rerank the graph retriever's top candidate passages per question",
        "data": data, "train_config": info["config"], "model_config": model.cfg.to_dict(),
        "settings": settings.to_dict(),
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "metrics": metrics,
        "history": info["history"],
        "file": {"name": out.name, "bytes": len(blob),
                 "sha256": hashlib.sha256(blob).hexdigest()},
        "software": {"python": platform.python_version(), "torch": torch.__version__,
                     "torch_geometric": torch_geometric.__version__},
    }
    out.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")


def auto_default(name: str):
    from gpurag.rerank.auto import PROFILE

    return getattr(PROFILE, name)


def cmd_decide_rerank(args: argparse.Namespace) -> int:
    """``gpurag decide-rerank INDEX``: whether the GAT pays on this index (rerank="auto")."""
    from gpurag import Index
    from gpurag.rerank import auto

    index = Index.open(args.index)
    profile = auto.AutoProfile(questions=args.questions, seed=args.seed)
    decision = auto.decide(index, profile)
    auto.record(args.index, decision)
    print(f"{args.index}: rerank=auto -> {decision['rerank']} ({decision['reason']})")
    return 0


def add_score_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``train-scorer`` and ``decide-rerank``."""
    d = sub.add_parser("decide-rerank",
                       help="decide whether the GAT reranker pays on an index (rerank=auto) "
                            "from synthetic questions of its own graph; record it in the "
                            "manifest")
    d.add_argument("index", help="index folder")
    d.add_argument("--questions", type=int, default=auto_default("questions"),
                   help="synthetic questions to decide on")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=cmd_decide_rerank)
    p = sub.add_parser("train-scorer", help="train the GAT reranker on eval-format datasets")
    p.add_argument("datasets", nargs="*", metavar="DATASET_DIR",
                   help="folders with corpus.jsonl and questions.jsonl (none: train on "
                        "--synthetic questions only)")
    p.add_argument("--index", action="append",
                   help="index folder per dataset, in order (reused, or built there); without "
                        "datasets, the indexes to generate --synthetic questions from")
    p.add_argument("-o", "--out", default="gat.safetensors", help="checkpoint to write")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--patience", type=int, default=6, help="early-stopping patience (epochs)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=1e-2)
    p.add_argument("--dropout", type=float, default=0.3)
    p.add_argument("--point-loss", type=float, default=1.0,
                   help="weight of the per-candidate BCE term beside the listwise loss")
    p.add_argument("--val-frac", type=float, default=0.2, help="questions for validation")
    p.add_argument("--test-frac", type=float, default=0.2, help="questions held out")
    p.add_argument("--candidates", type=int, default=30, help="candidates per question")
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--conv", choices=["gatv2", "gat"], default="gatv2")
    p.add_argument("--fanout", default="5,2", help="neighbours kept per node at each hop")
    p.add_argument("--max-nodes", type=int, default=16, help="nodes per candidate subgraph")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads while training (0: torch's default; 1 is fastest "
                        "for these small batches)")
    p.add_argument("--balance-sets", action="store_true",
                   help="every epoch takes as many questions from each dataset as the smallest "
                        "has; validation weighs the datasets alike")
    p.add_argument("--cv", type=int, default=0, metavar="K",
                   help="also report K-fold cross-validated recall per dataset (slower)")
    p.add_argument("--synthetic", type=int, default=0, metavar="N",
                   help="also train on N synthetic multi-hop questions generated from each "
                        "index's own graph (no labels needed; see gpurag.training.synthetic)")
    p.add_argument("--synthetic-index", action="append", metavar="IDX",
                   help="index folder to generate synthetic questions from (repeatable; "
                        "default: the datasets' indexes)")
    from gpurag.training.synthetic import add_mix_arguments

    add_mix_arguments(p)
    p.add_argument("--eval", action="store_true",
                   help="run gpurag eval (graph vs graph+gat) on the test split and --eval-sets")
    p.add_argument("--eval-sets", nargs="*", metavar="DATASET_DIR",
                   help="more datasets to evaluate on (not used for training)")
    p.add_argument("--eval-index", action="append", help="index folder per --eval-sets entry")
    p.set_defaults(func=cmd_train_scorer)
