"""Memory retrieval on an evaluation set: the ``memory`` mode of ``gpurag eval``, k-fold
cross-validated tuning of the fusion weights, and abstention on unanswerable questions.

Traces are the chat turns of each passage (:mod:`gpurag.memory.corpus`); a passage is ranked
where its first trace is ranked.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from gpurag.memory.config import MemoryConfig
from gpurag.memory.corpus import corpus_traces, frame_traces
from gpurag.memory.memory import Memory
from gpurag.metrics import gold_ranks, summarize

log = logging.getLogger(__name__)

BATCH = 256
GRID: dict[str, tuple[float, ...]] = {
    "w_dense": (0.5, 1.0),
    "w_bm25": (0.5, 1.0, 1.5),
    "w_graph": (0.0, 0.25, 0.5, 1.0),
    "neighbour": (0.0, 0.2),
    "session_weight": (0.0, 0.1, 0.2),
}


def build_memory(traces: list[dict[str, Any]], path: str | Path, **settings: Any) -> Memory:
    """Open the memory at ``path`` when it holds exactly these traces, else (re)build it."""
    path = Path(path)
    if (path / "memory.json").exists():
        mem = Memory.open(path, **settings)
        if len(mem) == len(traces) and all(
                mem.texts[i] == traces[i]["text"] for i in range(0, len(traces), 97)):
            return mem
        mem.close()
        import shutil

        shutil.rmtree(path)
    mem = Memory.create(path, **settings)
    for lo in range(0, len(traces), BATCH):
        mem.add_many(traces[lo:lo + BATCH])
    mem.compact()
    return mem


def memory_for_index(index) -> Memory:
    """The memory of an index's corpus, kept beside the index folder."""
    source = index.manifest.extra.get("source")
    if source and Path(source).is_file() and str(source).endswith(".jsonl"):
        traces = list(corpus_traces(source))
    else:
        chunks = index.chunks
        traces = list(frame_traces(chunks["doc_id"], chunks["text"]))
    return build_memory(traces, index.path.parent / f"{index.path.name}.memory")


def rank_docs(mem: Memory, questions: list[str], depth: int) -> list[list[str]]:
    """Sessions (passage ids) in rank order for each question."""
    out = []
    for lo in range(0, len(questions), BATCH):
        for res in mem.search_batch(questions[lo:lo + BATCH], k=max(10 * depth, 100)):
            out.append(res.docs[:depth])
    return out


def memory_runner(index) -> Callable[[list[str], int], list[list[str]]]:
    """The ``memory`` mode of ``gpurag eval``."""
    mem = memory_for_index(index)
    return lambda qs, k: rank_docs(mem, qs, k)


# -- cross-validated tuning -------------------------------------------------------------------
def _ranking(mem: Memory, view: dict, cfg: MemoryConfig, depth: int = 20) -> list[str]:
    ids, _, _ = mem.rank(view, cfg)
    docs = [mem.doc(i) for i in ids[: 20 * depth]]
    return list(dict.fromkeys(docs))[:depth]


def _objective(ranks: list[list[int | None]]) -> float:
    s = summarize(ranks)
    return s["recall@5"] + s["all_gold@8"]


def cross_validate(mem: Memory, questions: list, folds: int = 5, seed: int = 0,
                   grid: dict[str, tuple[float, ...]] | None = None) -> dict[str, Any]:
    """Choose fusion weights on k-1 folds, score the held-out fold; returns held-out metrics
    (every question is scored exactly once, by weights chosen without it)."""
    grid = grid or GRID
    texts = [q.question for q in questions]
    views = []
    for lo in range(0, len(texts), BATCH):
        views.extend(mem.views(texts[lo:lo + BATCH]))
    names = list(grid)
    configs = [replace(mem.config, **dict(zip(names, vals, strict=True)))
               for vals in itertools.product(*(grid[n] for n in names))]
    # ranks[c][q]: gold ranks of question q under config c
    ranks = [[gold_ranks(_ranking(mem, v, c), q.gold_ids)
              for v, q in zip(views, questions, strict=True)] for c in configs]
    rng = np.random.default_rng(seed)
    fold_of = rng.permutation(len(questions)) % folds
    held: list[Any] = [None] * len(questions)
    chosen = []
    for f in range(folds):
        train = np.flatnonzero(fold_of != f)
        best = max(range(len(configs)),
                   key=lambda c: _objective([ranks[c][i] for i in train]))
        chosen.append({n: getattr(configs[best], n) for n in names})
        for i in np.flatnonzero(fold_of == f):
            held[i] = ranks[best][i]
    full = max(range(len(configs)), key=lambda c: _objective(ranks[c]))
    by_type: dict[str, list] = {}
    for q, r in zip(questions, held, strict=True):
        by_type.setdefault(q.type, []).append(r)
    return {"folds": folds, "cv": summarize(held),
            "cv_by_type": {t: {"n": len(v), **summarize(v)} for t, v in sorted(by_type.items())},
            "chosen_per_fold": chosen,
            "in_sample_best": {n: getattr(configs[full], n) for n in names},
            "in_sample": summarize(ranks[full]), "grid_size": len(configs)}


# -- abstention -------------------------------------------------------------------------------
def unanswerable_questions(root: str | Path) -> list[str]:
    """Questions of a dataset folder with no gold passage (``load_dataset`` skips them)."""
    out = []
    with open(Path(root) / "questions.jsonl", "rb") as fh:
        for raw in fh:
            if raw.strip():
                rec = json.loads(raw)
                if not rec.get("gold_ids"):
                    out.append(str(rec["question"]))
    return out


def abstention(mem: Memory, answerable: list[str], unanswerable: list[str],
               recall: float = 0.5, folds: int = 5, seed: int = 0) -> dict[str, Any]:
    """Abstain when ``confidence`` is below a threshold chosen on the other folds to abstain on
    ``recall`` of the unanswerable questions; held-out precision and recall of abstaining."""
    conf = np.asarray([r.confidence for lo in range(0, len(answerable + unanswerable), BATCH)
                       for r in mem.search_batch((answerable + unanswerable)[lo:lo + BATCH],
                                                 k=5)])
    y = np.r_[np.zeros(len(answerable)), np.ones(len(unanswerable))].astype(bool)
    fold_of = np.random.default_rng(seed).permutation(len(y)) % folds
    abstain = np.zeros(len(y), dtype=bool)
    for f in range(folds):
        tr, te = fold_of != f, fold_of == f
        pos = conf[tr & y]
        thr = np.quantile(pos, recall) if len(pos) else -np.inf  # abstain at or below
        abstain[te] = conf[te] <= thr
    tp = int((abstain & y).sum())
    order = np.argsort(conf)  # lowest confidence first
    auc = float(np.mean(conf[y][:, None] < conf[~y][None, :])) if y.any() and (~y).any() else 0
    return {"target_recall": recall, "precision": tp / max(int(abstain.sum()), 1),
            "recall": tp / max(int(y.sum()), 1), "base_rate": float(y.mean()),
            "auroc": auc, "n_unanswerable": int(y.sum()), "n_answerable": int((~y).sum()),
            "lowest_confidence_is_unanswerable@20": float(y[order[:20]].mean())}
