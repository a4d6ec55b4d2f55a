"""``gpurag memory add | search | info | compact | eval``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpurag.errors import InputError
from gpurag.terminal import safe


def _read_jsonl(path: str) -> list[dict]:
    out = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
            except UnicodeDecodeError as exc:
                raise InputError(f"{path}:{lineno}: not UTF-8 text (byte {exc.start}); "
                                 "convert the file to UTF-8") from None
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{lineno}: not JSON ({exc})") from exc
            except RecursionError:
                raise InputError(f"{path}:{lineno}: JSON nested too deeply to parse") from None
            if not isinstance(rec, dict):
                raise InputError(f"{path}:{lineno}: expected an object with a 'text' field")
            out.append(rec)
    return out


def cmd_add(args: argparse.Namespace) -> int:
    from gpurag.memory import Memory
    from gpurag.memory.corpus import corpus_traces
    from gpurag.memory.memory import freeze_startup

    freeze_startup()  # this command's process: its imports' objects out of the collector
    if args.text is None and not args.file and not args.corpus:
        raise InputError("give a trace text, --file traces.jsonl or --corpus corpus.jsonl")
    with Memory.open(args.memory, create=True, lock_timeout=args.lock_timeout) as mem:
        before = len(mem)
        ids: list[int] = []
        if args.text is not None:
            ids.append(mem.add(args.text, session=args.session, turn=args.turn, time=args.time))
        traces = _read_jsonl(args.file) if args.file else []
        if args.corpus:
            traces.extend(corpus_traces(args.corpus))
        if traces:
            from gpurag.pipeline.progress import progress_bar

            quiet = getattr(args, "quiet", False)
            with progress_bar(len(traces), "memory add", unit="trace",
                              show=False if quiet else None) as bar:
                for lo in range(0, len(traces), 256):
                    ids.extend(mem.add_many(traces[lo:lo + 256]))
                    bar.update(len(traces[lo:lo + 256]))
        if args.compact:
            mem.compact()
        new = [i for i in ids if i >= before]
        known = len(ids) - len(new)
        skipped = f", {known} already present (same key) skipped" if known else ""
        print(f"added {len(new)} trace(s) (ids {new[0]}..{new[-1]}){skipped}; memory holds "
              f"{len(mem)}" if new else f"added nothing{skipped}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from gpurag.memory import Memory

    with Memory.open(args.memory, readonly=True) as mem:
        res = mem.search(args.question, k=args.k)
    if args.json:
        print(json.dumps({
            "question": res.question, "anchors": res.anchors, "confidence": res.confidence,
            "relational_weight": res.relational_weight,
            "hits": [vars(h) for h in res.hits],
            "dropped": [vars(d) for d in res.dropped]}, indent=1))
        return 0
    # stored text, session names and anchors are untrusted: control characters escaped
    print(safe(f"anchors: {', '.join(res.anchors) or '-'}  relational weight: "
               f"{res.relational_weight:.2f}  confidence: {res.confidence:.3f}"))
    for rank, h in enumerate(res.hits, start=1):
        print(safe(f"{rank:>2}. [{h.score:.3f}] #{h.id} {h.session}/{h.turn}: {h.text[:160]}"))
    for d in res.dropped:
        print(safe(f"    dropped #{d.trace}: {d.reason}"))
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from gpurag.memory import Memory

    with Memory.open(args.memory, readonly=True) as mem:
        info = mem.info()
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        for key in ("path", "traces", "sessions", "entities", "vocabulary", "graph_edges",
                    "compacted_traces", "dim", "damaged_traces"):
            print(safe(f"{key:<17} {info[key]}"))
        for d in info["damaged"]:
            print(safe(f"  damaged record at line {d['line']} (trace {d['id']}): {d['reason']}"
                       f"; kept aside in {info['quarantine']}"))
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    from gpurag.memory import Memory

    with Memory.open(args.memory, lock_timeout=args.lock_timeout) as mem:
        stats = mem.compact()
    print("compacted: " + ", ".join(f"{k} {v}" for k, v in stats.items()))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from gpurag.eval.datasets import load_dataset
    from gpurag.memory.corpus import corpus_traces
    from gpurag.memory.evaluate import (
        abstention,
        build_memory,
        cross_validate,
        unanswerable_questions,
    )

    ds = load_dataset(args.dataset)
    where = args.memory or str(Path(args.dataset).resolve()).rstrip("/") + ".memory"
    mem = build_memory(list(corpus_traces(ds.corpus)), where)
    try:
        cv = cross_validate(mem, ds.questions, folds=args.folds)
        abst = abstention(mem, [q.question for q in ds.questions],
                          unanswerable_questions(args.dataset), folds=args.folds)
    finally:
        mem.close()
    result = {"dataset": ds.name, "memory": where, "cross_validation": cv, "abstention": abst}
    row = cv["cv"]
    print(f"memory on {ds.name}, {cv['folds']}-fold cross-validated over "
          f"{len(ds.questions)} questions (grid of {cv['grid_size']}):")
    print("  " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()))
    for t, r in cv["cv_by_type"].items():
        print(f"  {t:<8} n={r['n']:<4} R@5 {r['recall@5']:.3f}  all_gold@8 {r['all_gold@8']:.3f}")
    print(f"  weights chosen on the full set: {cv['in_sample_best']}")
    print(f"abstention ({abst['n_unanswerable']} unanswerable, base rate "
          f"{abst['base_rate']:.3f}): precision {abst['precision']:.3f} at recall "
          f"{abst['recall']:.3f} (target {abst['target_recall']}), AUROC {abst['auroc']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


def add_memory_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``gpurag memory ...``."""
    p = sub.add_parser("memory", help="zero-token agent memory: add traces, search them")
    msub = p.add_subparsers(dest="memory_command", required=True)

    a = msub.add_parser("add", help="append traces (created when absent); durable on return")
    a.add_argument("memory", help="memory folder")
    a.add_argument("text", nargs="?", help="one trace text")
    a.add_argument("--session", help="session id (default: the last trace's)")
    a.add_argument("--turn", type=int, help="turn within the session (default: next)")
    a.add_argument("--time", help="ISO 8601 time or epoch seconds (default: now)")
    a.add_argument("--file", help="JSONL of {text, session, turn, time, meta} records")
    a.add_argument("--corpus", help="corpus.jsonl whose passages are chat sessions")
    a.add_argument("--compact", action="store_true", help="compact after adding")
    a.add_argument("--lock-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="wait this long for another writer to finish (default 30)")
    a.set_defaults(func=cmd_add)

    s = msub.add_parser("search", help="the best traces for a question")
    s.add_argument("memory", help="memory folder")
    s.add_argument("question")
    s.add_argument("-k", "--k", type=int, default=5)
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_search)

    i = msub.add_parser("info", help="counts and settings of a memory")
    i.add_argument("memory", help="memory folder")
    i.add_argument("--json", action="store_true", help="print JSON")
    i.set_defaults(func=cmd_info)

    c = msub.add_parser("compact", help="re-tag every trace and persist the derived state")
    c.add_argument("memory", help="memory folder")
    c.add_argument("--lock-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="wait this long for another writer to finish (default 30)")
    c.set_defaults(func=cmd_compact)

    e = msub.add_parser("eval", help="cross-validated memory retrieval and abstention")
    e.add_argument("dataset", help="folder with corpus.jsonl and questions.jsonl")
    e.add_argument("--memory", help="memory folder to build or reuse (default: DATASET.memory)")
    e.add_argument("--folds", type=int, default=5)
    e.add_argument("--json", help="write the full results here")
    e.set_defaults(func=cmd_eval)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `gpurag memory`")
