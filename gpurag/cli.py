"""The ``gpurag`` command line: index, insert, delete, query, info, demo, eval, llm."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpurag.cli_runtime import make_runtime
from gpurag.device import DeviceError
from gpurag.errors import ConfigError, GpuragError, InputError
from gpurag.eval.cli import add_eval_commands
from gpurag.export.cli import add_export_command
from gpurag.llm.cli import add_llm_commands, add_llm_options
from gpurag.memory.cli import add_memory_commands
from gpurag.serve.cli import add_serve_command
from gpurag.store.diskio import describe_os_error
from gpurag.terminal import safe
from gpurag.training.cli import add_score_commands

# How each index setting is spelled on the command line (for error messages).
INDEX_FLAGS = {"embedder": "--embedder", "extractor": "--extractor", "triples": "--triples",
               "chunk_tokens": "--chunk-tokens", "graph": "--no-graph",
               "text_column": "--text-column"}


def say(line: str = "", multiline: bool = False) -> None:
    """Print a line that may hold corpus, question or model text, control characters escaped."""
    print(safe(line, keep_newlines=multiline))


def _add_index_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file with [index] and [query] tables")
    p.add_argument("--embedder", help="embedder spec: minilm | onnx:PATH | st:PATH")
    p.add_argument("--extractor", help="entity extractor: fast | ner | llm (--no-graph for none)")
    p.add_argument("--triples", help="precomputed triples.jsonl to import instead of extracting")
    p.add_argument("--chunk-tokens", type=int, help="tokens per chunk window")
    p.add_argument("--no-graph", action="store_true", help="dense index only (no graph stage)")
    p.add_argument("--text-column", help="column of CSV/TSV/Parquet files holding the text "
                   "(default: text)")
    p.add_argument("--follow-outside-links", action="store_true",
                   help="read symbolic links that lead outside the source folder")


def _index_config(args: argparse.Namespace):
    from gpurag.config import apply_overrides, load_config

    cfg, _ = load_config(args.config)
    overrides = {k: v for k, v in {
        "embedder": args.embedder, "extractor": args.extractor, "triples": args.triples,
        "chunk_tokens": args.chunk_tokens,
        "text_column": getattr(args, "text_column", None)}.items() if v is not None}
    if args.triples:
        if not Path(args.triples).is_file():
            raise InputError(f"--triples {args.triples}: no such file")
        overrides["extractor"] = "triples"
    if args.no_graph:
        overrides["graph"] = False
    if getattr(args, "follow_outside_links", False):
        overrides["follow_outside_links"] = True
    return apply_overrides(cfg, overrides, "command line", INDEX_FLAGS)


def read_questions(path: str) -> list[str]:
    """The non-blank lines of a ``--questions-file``; a clear error if it cannot be read."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"--questions-file {p}: no such file") from None
    except OSError as exc:
        raise InputError(f"--questions-file {p}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise InputError(f"--questions-file {p}: not UTF-8 text (line {line}, byte "
                         f"{exc.start})") from None
    # One question a line, split on "\n" (and "\r\n") only: str.splitlines would also cut
    # at U+2028, \x0b, \x0c, \x1c-\x1e and \x85, shifting every later answer by a line.
    return [q.strip() for q in text.split("\n") if q.strip()]


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill PID``, ``docker stop``, a batch scheduler) raises KeyboardInterrupt, as
    Ctrl-C does: the build stops its extraction workers, keeps its work and says it resumes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_index(args: argparse.Namespace) -> int:
    from gpurag import Index

    with sigterm_as_interrupt():
        index = Index.build(args.source, args.out, config=_index_config(args),
                            show_progress=not args.quiet, runtime=make_runtime(args),
                            cluster=args.cluster)
    info = index.info()
    ingest = info["extra"].get("ingest", {})
    say(f"index written to {index.path}")
    say(f"  documents: {ingest.get('documents')}  chunks: {info['counts'].get('chunks')}"
        + "".join(f"  {k}: {v}" for k, v in info["counts"].items()
                  if k not in ("documents", "chunks")))
    skipped = ingest.get("skipped", {})
    warnings = ingest.get("warnings", {})
    if any(skipped.values()):
        say("  skipped: " + ", ".join(f"{n} {r}" for r, n in skipped.items() if n))
    if any(warnings.values()):
        say("  warnings: " + ", ".join(f"{n} {r}" for r, n in warnings.items() if n))
    for problem in ingest.get("problems", [])[:10]:
        say(f"    {problem}")
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    """``gpurag insert`` / ``gpurag delete`` / ``gpurag compact``: a new index version, what
    changed printed. The update opens the index once (under its write lock); this command reads
    only the manifest, before (the embedder) and after (what to say), never the whole index."""
    from gpurag.api import trusted_embedder
    from gpurag.config import stored_plan
    from gpurag.store import current_manifest

    path = Path(args.index)
    spec = trusted_embedder(stored_plan(current_manifest(path).config).embedder, args.embedder,
                            path)
    runtime, show = make_runtime(args), not args.quiet
    if args.command == "compact":
        from gpurag.pipeline.incremental_local import compact_index

        return _report_compact(compact_index(path, runtime=runtime, embedder=spec,
                                             show_progress=show))
    exact = getattr(args, "exact", False)
    if args.command == "insert":
        from gpurag.pipeline.updates import insert_documents

        r = insert_documents(path, args.sources, runtime=runtime, embedder=spec,
                             show_progress=show, exact=exact)
    else:
        from gpurag.pipeline.incremental import read_ids_file
        from gpurag.pipeline.updates import delete_documents

        ids = list(args.doc_ids or []) + (read_ids_file(args.ids_file) if args.ids_file else [])
        r = delete_documents(path, ids, runtime=runtime, embedder=spec,
                             show_progress=show, exact=exact)
    verb = "added" if r.op == "insert" else "removed"
    if r.version is None:
        say(f"nothing {'new to insert into' if r.op == 'insert' else 'to delete from'} "
            f"{r.path} (index unchanged)")
    else:
        extra = r.extra  # the committed version's, not whatever is current now
        local = (extra.get("incremental") or {}).get("mode") == "local"
        # a delete extracts nothing new: it re-extracts the chunks whose extraction depended
        # on the removed ones (batch-dependent extractors), usually none
        extracted = "extracted" if r.op == "insert" else "re-extracted"
        say(f"{r.path}: version {r.version}: {len(r.documents)} documents ({r.chunks} chunks) "
            f"{verb}; {r.reextracted_chunks} chunks {extracted}, {r.embedded_texts} "
            f"names/facts embedded ({r.reused_vectors} reused); communities: "
            f"{str(extra.get('communities') or 'full re-cluster').split(':')[0]}"
            + ("; local update (within a tolerance of a full build: `gpurag compact` "
               "restores it)" if local else ""))
        if local and r.op == "delete":
            say("  the removed text stays on disk (tombstoned, never returned) until "
                f"`gpurag compact {r.path}`")
    if r.skipped:
        say("  skipped: " + ", ".join(f"{n} {k}" for k, n in r.skipped.items()))
    if r.not_found:
        say(f"  not in the index: {len(r.not_found)} ids (first: {r.not_found[0]})")
    return 0


def _report_compact(r) -> int:
    """What ``gpurag compact`` did."""
    if r.version is None:
        say(f"{r.path} is already a full build's (nothing to compact)")
    else:
        say(f"{r.path}: version {r.version}: compacted ({r.reextracted_chunks} chunks "
            f"extracted again, {r.embedded_texts} names/facts embedded); equals a full build")
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    from gpurag import Index
    from gpurag.config import QueryConfig, check_value

    if args.k is not None:  # else the query config's k (GPURAG_QUERY_K, [query] k)
        check_value(QueryConfig, "k", args.k, "command line", "-k")
    if args.communities < 0:
        raise ConfigError(f"command line: --communities={args.communities} is not valid: it "
                          "must be a whole number >= 0")
    if args.level < 0:
        raise ConfigError(f"command line: --level={args.level} is not valid: it must be a "
                          "whole number >= 0")
    if args.question is not None and not args.question.strip():
        raise InputError("the question is empty (only whitespace); the service refuses it too")
    questions = [args.question] if args.question else []
    if args.questions_file:
        questions += read_questions(args.questions_file)
    if not questions:
        raise GpuragError("give a question or --questions-file")
    runtime = make_runtime(args)
    index = Index.open(args.index, verify=args.verify, embedder=args.embedder,
                       runtime=runtime)
    if getattr(args, "config", None):  # --config FILE: its [query] table (then GPURAG_QUERY_*)
        from gpurag.config import load_config

        index.query_config = load_config(args.config)[1]
    k = args.k if args.k is not None else index.query_config.k
    from gpurag.llm.config import LLMConfig, require_server

    client = None
    if args.answer or (args.mode == "global" and (args.llm_url or LLMConfig.configured())):
        from gpurag.llm.client import LLMClient

        client = LLMClient(require_server(runtime.llm, given=bool(args.llm_url)))
    if args.mode == "global":
        from gpurag.query.generate import global_answers, global_results

        top = args.communities or None  # 0: every community (eager reports)
        if client is None:
            results = global_results(index, questions, k=k, level=args.level,
                                     top=top)
        else:
            cap = client.config.max_tokens  # --llm-max-tokens caps reports and answers
            results = global_answers(index, questions, client, level=args.level,
                                     communities=top, k=k, report_max_tokens=min(600, cap),
                                     answer_max_tokens=min(500, cap))
    else:
        options = {"rerank": args.rerank} if args.rerank else {}
        if args.min_confidence is not None:
            options["min_confidence"] = args.min_confidence
        results = index.query_batch(questions, k=k, mode=args.mode, **options)
        if args.answer:
            from gpurag.query.generate import answer_results

            answer_results(index, results, client)
    if args.explain:
        gold = {g.strip() for g in (args.gold or "").split(",") if g.strip()}
        _write_explain(results, Path(args.explain), gold)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2, ensure_ascii=False))
        return _llm_failures(results)
    for result in results:
        sure = (f"  confidence {result.confidence:.2f}" if result.confidence is not None
                else "")
        say(f"Q: {result.question}   [{result.mode}]{sure}")
        if not result.passages and result.confidence is not None and args.min_confidence:
            say(f"   nothing returned: confidence below --min-confidence {args.min_confidence}")
        if result.answer is not None or result.error:
            cites = f"  (cites {', '.join(result.citations)})" if result.citations else ""
            say(f"A: {result.answer if result.answer is not None else '—'}{cites}"
                + (f"  [error: {result.error}]" if result.error else ""), multiline=True)
        if result.seeds:
            say("   seeds: " + ", ".join(s.name for s in result.seeds[:8]))
        for p in result.passages:
            from gpurag.ingest.formats.markup import preview_text

            text = " ".join(preview_text(p.title, p.text).split())  # no markup, no title again
            say(f"  {p.rank:>2}. {p.score:.4f}  {p.doc_id} [{p.char_start}:{p.char_end}] "
                f"{p.title}: {text[:160]}{'…' if len(text) > 160 else ''}")
        if result.chains:
            from gpurag.query.evidence import format_chains

            say("   evidence (question entity -[relation: sentence, passage [span]]-> ...):")
            for line in format_chains(result):
                say(line)
        else:
            for path in result.paths[:3]:
                say(f"   path to {path.chunk_id}: {' -> '.join(path.entities)}")
        if result.communities:
            from gpurag.query.communities import format_communities

            say(format_communities(result), multiline=True)
        say()
    return _llm_failures(results)


def _llm_failures(results: list) -> int:
    """1 (after saying so on stderr) when any answer has an LLM error, else 0."""
    failed = [r for r in results if r.error]
    if failed:
        print(safe(f"gpurag: error: {len(failed)} of {len(results)} answers failed "
                   f"(first: {failed[0].error})"), file=sys.stderr)
    return 1 if failed else 0


def _write_explain(results: list, out: Path, gold: set[str] | None = None) -> None:
    """One evidence page per question: ``out`` itself, or ``out-1.html``... for a batch
    (its chains drawn left to right, :mod:`gpurag.export.chain_page`; ``gold`` doc ids
    outlined)."""
    from gpurag.export.chain_page import write_page

    for i, result in enumerate(results, start=1):
        path = out if len(results) == 1 else out.with_name(f"{out.stem}-{i}{out.suffix}")
        write_page(result, path, gold=gold)
        print(f"evidence graph: {safe(path)}", file=sys.stderr)


def _memory_runner(index):
    """``gpurag eval``'s mode ``memory`` (gpurag.memory sits above gpurag.eval)."""
    from gpurag.memory.evaluate import memory_runner

    return memory_runner(index)


def cmd_info(args: argparse.Namespace) -> int:
    from gpurag.info import environment_info, index_info

    report = {"environment": environment_info()}
    if args.index:
        report["index"] = index_info(args.index, verify=args.verify)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        from gpurag.info import format_info

        say(format_info(report), multiline=True)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gpurag.demo import run_demo

    return run_demo(out=args.out, k=args.k, rebuild=args.rebuild)


def _add_update_options(p: argparse.ArgumentParser) -> None:
    """What ``insert`` and ``delete`` share: the embedder spec and the LLM settings."""
    p.add_argument("--embedder", help="embedder spec, needed for an index built with a model "
                                      "other than the bundled one")
    add_llm_options(p)
    p.set_defaults(func=cmd_update)


def build_parser() -> argparse.ArgumentParser:
    from gpurag._version import __version__

    parser = argparse.ArgumentParser(prog="gpurag", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gpurag {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bars or progress lines")
    parser.add_argument("--log-format", choices=["text", "json"], default="text",
                        help="stderr log and progress lines as text or one JSON object a line "
                             "(progress is logged as lines when stderr is not a terminal)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("index", help="index a folder or file of documents")
    p.add_argument("source", help="folder of .txt/.md/.jsonl/.parquet, or one such file")
    p.add_argument("-o", "--out", required=True, help="index directory to write")
    p.add_argument("--cluster", help="run chunk+embed and extraction on a Dask cluster: "
                   "local:N (N local workers) or a scheduler address (gpurag[distributed])")
    _add_index_options(p)
    add_llm_options(p)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("insert", help="add documents to an index (a new version)")
    p.add_argument("index", help="index directory")
    p.add_argument("sources", nargs="+", help="files or folders of documents to add")
    p.add_argument("--exact", action="store_true",
                   help="re-derive the graph over all chunks (the full build's bytes) instead "
                        "of a local update")
    _add_update_options(p)

    p = sub.add_parser("compact", help="rebuild a locally updated index's graph from what it "
                                       "holds (equals a full build)")
    p.add_argument("index", help="index directory")
    _add_update_options(p)

    p = sub.add_parser(
        "delete", help="remove documents from an index (a new version)",
        description="Remove documents from an index as a new version. A local delete (the "
                    "default) marks their chunks deleted (tombstones): no query returns them and "
                    "no reader shows their text, but the text and vectors stay on disk in the "
                    "kept files, and their words in the BM25 vocabulary (lexical/"
                    "vocab.index.json), until `gpurag compact INDEX` (or --exact) rewrites the "
                    "index without them. Deleting for privacy: run `gpurag compact` after, and "
                    "remove the embedding cache beside the index (.NAME.embcache, or the "
                    "GPURAG_EMBED_CACHE folder): it keeps the deleted text's vectors even after "
                    "compact. The manifest names the deleted document ids (not their text).")
    p.add_argument("index", help="index directory")
    ids = p.add_mutually_exclusive_group(required=True)
    ids.add_argument("--doc-ids", nargs="+", help="ids of the documents to remove")
    ids.add_argument("--ids-file", help="file with one document id a line")
    p.add_argument("--exact", action="store_true",
                   help="re-derive the graph over the chunks that stay (the full build's "
                        "bytes) instead of a local update")
    _add_update_options(p)

    p = sub.add_parser("query", help="retrieve passages for a question")
    p.add_argument("index", help="index directory")
    p.add_argument("question", nargs="?", help="the question")
    p.add_argument("--questions-file", help="one question per line (answered as a batch)")
    p.add_argument("-k", "--k", type=int,
                   help="passages to return (default: GPURAG_QUERY_K, [query] k, else 5)")
    p.add_argument("--mode", choices=["dense", "bm25", "graph", "global"],
                   help="dense | bm25 | graph (default) | global (corpus-wide: the most "
                        "relevant communities; map-reduce over their reports with an LLM "
                        "server)")
    p.add_argument("--config", help="TOML file whose [query] table sets the query defaults")
    p.add_argument("--answer", action="store_true", help="answer with the LLM, citing passages")
    p.add_argument("--level", type=int, default=0, help="community level for --mode global")
    p.add_argument("--communities", type=int, default=5, metavar="N",
                   help="--mode global: the N communities most relevant to the question "
                        "(without an LLM server: their entities, passages and sentences; with "
                        "one: only their reports are written and mapped; 0: every community)")
    p.add_argument("--rerank", help="rerank graph candidates: none | gat")
    p.add_argument("--min-confidence", type=float, metavar="C",
                   help="return no passages for a question whose confidence (0 to 1: how "
                        "likely the corpus holds what it asks about) is below C")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--verify", action="store_true",
                   help="check every index file's sha256 first (open always checks block CRCs)")
    p.add_argument("--embedder", help="query embedder spec, needed for an index built with a "
                                      "model other than the bundled one: onnx:PATH | st:PATH")
    p.add_argument("--explain", metavar="OUT.html",
                   help="write the evidence chains (question -> entities -> passages, each "
                        "link's sentence on hover) as a self-contained page")
    p.add_argument("--gold", metavar="DOC_IDS",
                   help="--explain: outline these (comma-separated) documents as gold")
    add_llm_options(p)
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("info", help="environment, backends and (optionally) an index")
    p.add_argument("index", nargs="?", help="index directory")
    p.add_argument("--verify", action="store_true", help="check every file's sha256")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("demo", help="index the bundled sample corpus and answer its questions")
    p.add_argument("--out", help="where to keep the demo index (default: a temporary folder)")
    p.add_argument("-k", "--k", type=int, default=5)
    p.add_argument("--rebuild", action="store_true", help="rebuild even if --out holds an index")
    p.set_defaults(func=cmd_demo)

    add_export_command(sub)
    add_eval_commands(sub, runners={"memory": _memory_runner})
    add_llm_commands(sub)
    add_memory_commands(sub)
    add_score_commands(sub)
    add_serve_command(sub)
    # the description names every registered command (so it cannot fall behind)
    parser.description = ("gpurag: GraphRAG on one GPU or a laptop CPU. Commands: "
                          + ", ".join(sub.choices) + ". Run \"gpurag COMMAND --help\" for a "
                          "command's own options.")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from gpurag.logs import configure_logging

    configure_logging(args.verbose, args.quiet, args.log_format)
    try:
        if args.command != "info":  # info still reports on a broken environment
            from gpurag.config import check_environment

            check_environment()
        return int(args.func(args) or 0)
    except (GpuragError, DeviceError) as exc:
        print(f"gpurag: error: {safe(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpurag: interrupted (a rerun of the same index command resumes)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # ``gpurag ... | head``: the reader left; stop quietly
        return _stdout_gone()
    except OSError as exc:  # a full disk, a read-only or unwritable path: one line
        print(f"gpurag: error: {safe(describe_os_error(exc))}", file=sys.stderr)
        return 2


def _stdout_gone() -> int:
    """Point stdout at /dev/null so the interpreter's final flush cannot raise; 128 + SIGPIPE."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141


if __name__ == "__main__":
    sys.exit(main())
