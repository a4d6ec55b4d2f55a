"""``gpurag eval``: retrieval quality of each mode on a dataset, baselines in the same run."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def cmd_eval(args: argparse.Namespace, runners: Mapping[str, Any] | None = None) -> int:
    """``runners``: modes evaluated by code above this package, by name (``gpurag``'s
    main passes the memory's)."""
    from gpurag.cli_runtime import make_runtime
    from gpurag.config import IndexConfig, check_value
    from gpurag.eval.datasets import load_dataset
    from gpurag.eval.runner import evaluate, format_table, open_or_build_index
    from gpurag.terminal import safe

    overrides: dict = {}
    query_cfg = None
    if getattr(args, "config", None):  # [index] for the build, [query] for the questions
        from gpurag.config import load_config

        overrides["config"], query_cfg = load_config(args.config)
    if args.extractor:
        overrides["extractor"] = check_value(IndexConfig, "extractor", args.extractor,
                                             "command line", "--extractor")
    if args.plot:
        from gpurag.eval.plot import require_matplotlib

        require_matplotlib()
    ds = load_dataset(args.dataset)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    index, tmp, index_s = open_or_build_index(ds, args.index, args.triples,
                                              show_progress=not args.quiet,
                                              runtime=make_runtime(args), **overrides)
    if query_cfg is not None:
        index.query_config = query_cfg
    try:
        client = None
        if args.answer:
            from gpurag.llm.cli import config_from_args
            from gpurag.llm.client import LLMClient

            client = LLMClient(config_from_args(args))
        result = evaluate(ds, index, modes, index_time_s=index_s, answer_client=client,
                          show=False if args.quiet else None,
                          runners=runners)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print(safe(format_table(result), keep_newlines=True))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(safe(f"\nfull results: {args.json}", keep_newlines=True))
    if args.plot:
        from gpurag.eval.plot import plot_eval

        plot_eval(result, args.plot)
        print(safe(f"plot: {args.plot}", keep_newlines=True))
    errors = sum(row.get("answer_errors", 0) for row in result["modes"].values())
    if errors:
        print(f"gpurag: error: {errors} LLM answers failed (see the table)", file=sys.stderr)
    return 1 if errors else 0


def add_eval_commands(sub: argparse._SubParsersAction,
                      runners: Mapping[str, Any] | None = None) -> None:
    p = sub.add_parser("eval", help="retrieval quality on a multi-hop dataset")
    p.add_argument("dataset", help="folder with corpus.jsonl and questions.jsonl")
    p.add_argument("--modes", default="bm25,dense,graph",
                   help="comma-separated: bm25, dense, graph, graph+gat")
    p.add_argument("--triples", help="precomputed triples.jsonl to build the graph from")
    p.add_argument("--extractor", help="entity extractor for the graph (fast | ner | llm)")
    p.add_argument("--index", help="index folder to reuse (built there if absent)")
    p.add_argument("--config", help="TOML file: [index] settings of the index built, [query] "
                                    "settings of the questions")
    p.add_argument("--json", help="write the full results (per question ranks) here")
    p.add_argument("--plot", metavar="OUT.png",
                   help="draw recall per mode and by hops as a PNG (needs gpurag[viz])")
    p.add_argument("--answer", action="store_true",
                   help="also answer with the LLM and report exact match and F1")
    from gpurag.llm.cli import add_llm_options

    add_llm_options(p)
    p.set_defaults(func=functools.partial(cmd_eval, runners=runners))
