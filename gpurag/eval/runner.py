"""Runs every question of a dataset through each retrieval mode and scores the rankings."""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gpurag.errors import ConfigError
from gpurag.eval.datasets import Dataset, Question
from gpurag.metrics import gold_ranks, summarize

log = logging.getLogger(__name__)

DEFAULT_MODES = ("bm25", "dense", "graph")
RANK_DEPTH = 20


def corpus_ids(path: Path) -> list[str]:
    """The passage ids of a corpus file, in order (streamed)."""
    ids = []
    with open(path, "rb") as fh:
        for raw in fh:
            if raw.strip():
                try:
                    ids.append(str(json.loads(raw)["id"]))
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue
    return ids


def check_index_matches(index: Any, index_dir: str, corpus: Path) -> None:
    """Raise :class:`ConfigError` unless ``index`` was built from ``corpus``: its passages are
    the corpus's, and it read as many documents as the corpus holds (a passage whose text
    repeats an earlier one is dropped by the build, so it may be absent from the index). A
    blank doc id is a chunk a local delete removed (its row kept, blanked), not a passage."""
    records = corpus_ids(corpus)
    want = set(records)
    have = set(index.chunks["doc_id"].unique()) - {""}
    read = (index.manifest.counts or {}).get("documents")
    if have <= want and (have == want or read == len(records)):
        return
    foreign = len(have - want)
    detail = (f"{foreign} of its passage ids are not in the corpus" if foreign else
              f"{len(want - have)} corpus passages are missing and it read {read} documents, "
              f"not {len(records)}")
    raise ConfigError(f"index {index_dir} was not built from {corpus}: {detail}; give another "
                      "--index folder or remove it to rebuild")


def open_or_build_index(ds: Dataset, index_dir: str | None, triples: str | None,
                        show_progress: bool, runtime: Any = None, **overrides: Any):
    """Reuse ``index_dir`` when it indexes this corpus, else build it (or a temporary one);
    ``runtime`` (:class:`gpurag.runtime.Runtime`) is the one the caller built."""
    from gpurag import Index

    tmp = None
    if index_dir and (Path(index_dir) / "manifest.json").is_file():
        index = Index.open(index_dir, runtime=runtime)
        check_index_matches(index, index_dir, ds.corpus)
        return index, None, 0.0
    if not index_dir:
        tmp = tempfile.TemporaryDirectory(prefix=f"gpurag-eval-{ds.name}-")
        index_dir = str(Path(tmp.name) / "index")
    if triples:
        overrides = {**overrides, "triples": triples, "extractor": "triples"}
    t0 = time.perf_counter()
    index = Index.build(ds.corpus, index_dir, show_progress=show_progress, runtime=runtime,
                        **overrides)
    return index, tmp, time.perf_counter() - t0


Runner = Callable[[list[str], int], list[list[str]]]
# a mode evaluated by code above this package (e.g. gpurag.memory's "memory"): index -> runner
ModeRunner = Callable[[Any], "Runner | str"]


def _mode_runner(index, mode: str, runners: Mapping[str, ModeRunner] | None = None,
                 ) -> Runner | str:
    """A function questions -> ranked doc ids for ``mode``, or the reason it is unavailable."""
    if runners and mode in runners:
        return runners[mode](index)
    if mode == "bm25":
        from gpurag.eval.bm25 import BM25Retriever

        try:
            bm25 = BM25Retriever(index.chunks)
        except ImportError:
            return "bm25s is not installed (pip install bm25s)"
        doc_ids = index.chunks["doc_id"].to_numpy()

        def run_bm25(qs: list[str], k: int) -> list[list[str]]:
            _, rows = bm25.search(qs, k)
            return [list(doc_ids[r[r >= 0]]) for r in rows]

        return run_bm25
    if mode in ("dense", "graph") or mode.startswith("graph"):
        base, _, rerank = mode.partition("+")
        if base == "graph" and index.retriever is None:
            return "the index has no knowledge graph"
        options = {"rerank": rerank} if rerank else {}
        if rerank:
            try:
                index.query_batch(["probe"], k=1, mode=base, **options)
            except Exception as exc:
                return f"rerank {rerank!r} unavailable: {exc}"

        def run_index(qs: list[str], k: int) -> list[list[str]]:
            return [r.doc_ids for r in index.query_batch(qs, k=k, mode=base, evidence=False,
                                                           **options)]

        return run_index
    if mode == "memory":
        return "mode memory is evaluated by gpurag eval (it passes gpurag.memory's runner)"
    return f"unknown mode {mode!r}"


def answer_quality(index, questions: list[Question], mode: str, client, k: int = 5) -> dict:
    """Exact match and token F1 of LLM answers over the top-``k`` passages of ``mode``."""
    from gpurag.llm.metrics import answer_scores
    from gpurag.query.generate import answer_results

    base, _, rerank = mode.partition("+")
    options = {"rerank": rerank} if rerank else {}
    results = index.query_batch([q.question for q in questions], k=k, mode=base, **options)
    answer_results(index, results, client)
    golds = [[q.answer, *q.answer_aliases] for q in questions]
    scores = answer_scores([r.answer or "" for r in results], golds)
    return {"answer_em": scores["em"], "answer_f1": scores["f1"],
            "answer_errors": sum(r.error is not None for r in results)}


def evaluate(ds: Dataset, index, modes: list[str], index_time_s: float = 0.0,
             latency_sample: int | None = None, answer_client=None,
             show: bool | None = False,
             runners: Mapping[str, ModeRunner] | None = None) -> dict[str, Any]:
    """Score each mode; latency is measured one question at a time (the interactive case).
    ``show``: progress (None: bars on a terminal, log lines elsewhere; False: none).
    ``runners``: modes this package does not know, by name (index -> runner or reason)."""
    from gpurag.pipeline.progress import progress_bar, stage

    questions = ds.questions
    texts = [q.question for q in questions]
    out: dict[str, Any] = {
        "dataset": ds.name, "n_questions": len(questions), "skipped_questions": ds.skipped,
        "index": {"path": str(index.path), "counts": index.manifest.counts,
                  "index_time_s": index_time_s,
                  "stage_times_s": index.manifest.extra.get("timings_s", {})},
        "modes": {}, "unavailable": {}, "questions": [],
    }
    per_q: list[dict[str, Any]] = [
        {"id": q.id, "type": q.type, "hops": q.hops, "gold_ids": list(q.gold_ids), "ranks": {}}
        for q in questions]
    for mode in modes:
        runner = _mode_runner(index, mode, runners)
        if isinstance(runner, str):
            out["unavailable"][mode] = runner
            log.warning("mode %s unavailable: %s", mode, runner)
            continue
        stage("eval", f"{mode}: ranking {len(texts):,} questions as one batch", show)
        t0 = time.perf_counter()
        ranked = runner(texts, RANK_DEPTH)
        batch_s = time.perf_counter() - t0
        sample = texts[: latency_sample or len(texts)]
        lat = []
        bar = progress_bar(len(sample), f"eval {mode} latency", "question", show)
        for q in sample:
            t1 = time.perf_counter()
            runner([q], RANK_DEPTH)
            lat.append((time.perf_counter() - t1) * 1000)
            bar.update(1)
        bar.close()
        ranks = [gold_ranks(r, q.gold_ids) for r, q in zip(ranked, questions, strict=False)]
        row = summarize(ranks)
        row.update({
            "latency_ms_mean": float(np.mean(lat)) if lat else 0.0,
            "latency_ms_p50": float(np.percentile(lat, 50)) if lat else 0.0,
            "latency_ms_p95": float(np.percentile(lat, 95)) if lat else 0.0,
            "batch_queries_per_s": len(texts) / batch_s if batch_s > 0 else 0.0,
            "by_type": _breakdown(questions, ranks, lambda q: q.type),
            "by_hops": _breakdown(questions, ranks, lambda q: str(q.hops)),
        })
        if answer_client is not None and mode != "bm25":
            row.update(answer_quality(index, questions, mode, answer_client))
        out["modes"][mode] = row
        for entry, r in zip(per_q, ranks, strict=False):
            entry["ranks"][mode] = r
    out["questions"] = per_q
    return out


def _breakdown(questions: list[Question], ranks: list, key: Callable[[Question], str]) -> dict:
    groups: dict[str, list] = defaultdict(list)
    for q, r in zip(questions, ranks, strict=False):
        groups[key(q)].append(r)
    return {k: {"n": len(v), **summarize(v)} for k, v in sorted(groups.items())}


def format_table(result: dict[str, Any]) -> str:
    """The readable table printed by ``gpurag eval``."""
    cols = ["recall@2", "recall@5", "all_gold@8", "mrr", "latency_ms_p50", "latency_ms_p95"]
    head = f"{'mode':<14}" + "".join(f"{c:>15}" for c in cols)
    lines = [f"dataset: {result['dataset']}  questions: {result['n_questions']}  "
             f"passages: {result['index']['counts'].get('documents')}  "
             f"index time: {result['index']['index_time_s']:.1f}s", head, "-" * len(head)]
    for mode, row in result["modes"].items():
        lines.append(f"{mode:<14}" + "".join(
            f"{row[c]:>15.3f}" if "latency" not in c else f"{row[c]:>15.1f}" for c in cols))
    for mode, why in result["unavailable"].items():
        lines.append(f"{mode:<14}  unavailable: {why}")
    answered = {m: r for m, r in result["modes"].items() if "answer_em" in r}
    if answered:
        lines.append("")
        lines.append("LLM answers (top-5 passages): " + "; ".join(
            f"{m}: EM {r['answer_em']:.3f} F1 {r['answer_f1']:.3f}"
            + (f" ({r['answer_errors']} failed)" if r.get("answer_errors") else "")
            for m, r in answered.items()))
    types = sorted({t for row in result["modes"].values() for t in row["by_type"]})
    if len(types) > 1:
        lines.append("")
        lines.append("all_gold@8 by type: " + "; ".join(
            f"{t}: " + ", ".join(f"{m} {row['by_type'][t]['all_gold@8']:.2f}"
                                 for m, row in result["modes"].items() if t in row["by_type"])
            for t in types))
    return "\n".join(lines)
