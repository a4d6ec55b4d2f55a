"""Training the GAT reranker on (question, gold passages) pairs of eval-format datasets.

The candidates are exactly the ones the query path hands the reranker: each question runs
through ``Index.query_batch(mode="graph")`` with a recording reranker in place, which keeps the
question vectors, candidate rows, PPR scores and dense results. Candidates are labelled by the
gold passages; the loss is a listwise softmax cross-entropy over each question's candidates
(target spread evenly over the gold ones) plus a small node-level term (gold passages and the
entities they mention). Questions split into train / validation / test by a seeded shuffle;
training stops when the validation loss has not improved for ``patience`` epochs and keeps the
best epoch. With the same seed, data and machine a run is repeated exactly.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gpurag.arrays import isin_sorted, setdiff_sorted, unique_sorted
from gpurag.rerank.features import (
    CandidateInputs,
    GraphArrays,
    build_batch,
    concat_batches,
)
from gpurag.rerank.subgraph import ranges

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """Settings of one training run (recorded in the model card)."""

    seed: int = 0
    epochs: int = 40
    patience: int = 6
    batch_questions: int = 8
    lr: float = 3e-3
    weight_decay: float = 1e-2
    node_loss_weight: float = 0.2
    point_loss_weight: float = 1.0
    val_frac: float = 0.2
    test_frac: float = 0.2
    candidates: int = 30
    hidden: int = 16
    layers: int = 2
    heads: int = 2
    dropout: float = 0.3
    conv: str = "gatv2"
    fanout: tuple[int, ...] = (5, 2)
    max_nodes: int = 16
    threads: int = 1  # torch CPU threads (0: torch's setting); one is fastest for 8 questions
    balance_sets: bool = False  # each epoch draws as many questions from every set as the
    # smallest has, and the validation loss weighs every set alike


@dataclass
class QuestionSet:
    """Recorded reranker inputs and gold labels of some questions over one index."""

    name: str
    ids: list[str]
    arrays: GraphArrays
    inputs: CandidateInputs
    gold: list[np.ndarray]  # gold passage rows per question
    base: np.ndarray | None = None  # (q, c) the retriever's own ranking score (higher first)
    draw: int | None = None  # questions drawn per epoch (a fresh draw each); None: all, or the
    # balanced count with ``balance_sets`` (synthetic sets set it: thousands of questions)
    labels: np.ndarray = field(init=False)  # (q, c) 1.0 where the candidate is gold
    _pieces: dict = field(init=False, default_factory=dict, repr=False)

    def pieces(self, cfg: TrainConfig) -> list[tuple[Any, Any]]:
        """Per question: its candidate-subgraph batch and node labels (built once, cached)."""
        import torch

        key = (tuple(cfg.fanout), cfg.max_nodes)
        if key not in self._pieces:
            out = []
            for i in range(len(self)):
                one = self.take([i])
                batch = build_batch(self.arrays, one.inputs, cfg.fanout, cfg.max_nodes)
                out.append((batch, torch.from_numpy(node_labels(one, batch))))
            self._pieces[key] = out
        return self._pieces[key]

    def __post_init__(self) -> None:
        cand = self.inputs.cand
        self.labels = np.zeros(cand.shape, dtype=np.float32)
        for i, rows in enumerate(self.gold):
            self.labels[i] = isin_sorted(cand[i], rows)

    def take(self, idx: np.ndarray | list[int]) -> QuestionSet:
        """The questions ``idx`` only."""
        idx = np.asarray(idx, dtype=np.int64)
        out = QuestionSet(self.name, [self.ids[i] for i in idx], self.arrays,
                          self.inputs.take(idx), [self.gold[i] for i in idx],
                          None if self.base is None else self.base[idx], self.draw)
        for key, pieces in self._pieces.items():  # per-question batches carry over
            out._pieces[key] = [pieces[i] for i in idx]
        return out

    def __len__(self) -> int:
        return len(self.ids)


class _Recorder:
    """A reranker that keeps its inputs and changes nothing (the PPR scores as recorded for
    ``fanout``)."""

    def __init__(self, fanout: tuple[int, ...] = (5, 2)) -> None:
        self.fanout = tuple(fanout)
        self.parts: list[tuple[Any, ...]] = []

    def score(self, qvecs, cand, ppr_scores, dense) -> np.ndarray:
        self.parts.append((np.asarray(qvecs, np.float32), np.asarray(cand, np.int64),
                           ppr_scores,
                           np.asarray(dense[0], np.float32), np.asarray(dense[1], np.int64)))
        return np.zeros(np.shape(cand), dtype=np.float32)


def _concat_scores(parts: list[Any]) -> Any:
    from gpurag.graph.ppr_local import DenseScores, LocalScores, as_node_scores

    held = [as_node_scores(p) for p in parts]
    if all(isinstance(p, LocalScores) for p in held):
        return LocalScores.concat(held)
    return DenseScores(np.concatenate([np.asarray(p.scores, np.float32) for p in held]))


def record_inputs(index, questions: list[str], candidates: int = 30,
                  batch: int = 64, fanout: tuple[int, ...] = (5, 2)
                  ) -> tuple[CandidateInputs, np.ndarray]:
    """Run ``questions`` through the graph query path and keep what a reranker would see
    (subgraphs up to ``fanout`` can be built from it).

    Returns the recorded inputs and ``(q, c)`` scores of the retriever's own ranking of the
    candidates (``-rank``, from a second pass without a reranker), for comparison.
    """
    from gpurag.rerank import using_reranker

    retriever = index.retriever
    if retriever is None:
        from gpurag.errors import ConfigError

        raise ConfigError(f"index {index.path} has no knowledge graph: cannot train the GAT")
    rec = _Recorder(fanout)
    row_of = {c: i for i, c in enumerate(index.chunks["chunk_id"].tolist())}
    base_rows = []
    with using_reranker(retriever, "_record", rec):
        for s in range(0, len(questions), batch):
            part = questions[s:s + batch]
            index.query_batch(part, k=1, mode="graph", rerank="_record",
                              rerank_candidates=candidates)
            for res in index.query_batch(part, k=candidates, mode="graph"):
                base_rows.append([row_of[p.chunk_id] for p in res.passages])
    cols = list(zip(*rec.parts, strict=True))
    width = max(p.shape[1] for p in cols[3])
    ds = np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1])), constant_values=-1e9)
                         for p in cols[3]])
    di = np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1])), constant_values=-1)
                         for p in cols[4]])
    inputs = CandidateInputs(np.concatenate(cols[0]), np.concatenate(cols[1]),
                             _concat_scores(list(cols[2])), ds, di)
    base = np.full(inputs.cand.shape, -1e6, dtype=np.float32)
    for i, rows in enumerate(base_rows):
        pos = {r: j for j, r in enumerate(rows)}
        base[i] = [-pos.get(int(r), 1e6) for r in inputs.cand[i]]
    return inputs, base


def prepare(index, dataset, candidates: int = 30,
            fanout: tuple[int, ...] = (5, 2)) -> QuestionSet:
    """Recorded inputs and gold rows for every question of an eval-format ``dataset``
    (subgraphs up to ``fanout`` can be built from them)."""
    qs = dataset.questions
    rows_of = index.chunks.groupby("doc_id").indices
    gold = [np.concatenate([rows_of.get(g, np.zeros(0, np.int64)) for g in q.gold_ids])
            .astype(np.int64) for q in qs]
    inputs, base = record_inputs(index, [q.question for q in qs], candidates, fanout=fanout)
    return QuestionSet(dataset.name, [q.id for q in qs],
                       GraphArrays.from_retriever(index.retriever), inputs, gold, base)


def split(n: int, val_frac: float, test_frac: float, seed: int
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded question-level (train, val, test) index arrays."""
    perm = np.random.default_rng(seed).permutation(n)
    n_test = round(n * test_frac)
    n_val = round(n * val_frac)
    return (np.sort(perm[n_test + n_val:]), np.sort(perm[n_test:n_test + n_val]),
            np.sort(perm[:n_test]))


def node_labels(qs: QuestionSet, batch) -> np.ndarray:
    """Per batch node: 1 for a gold passage of its question or an entity one mentions."""
    arrays = qs.arrays
    n, indptr = arrays.graph.n_nodes, arrays.graph.indptr
    counts = np.array([len(g) for g in qs.gold], dtype=np.int64)
    gq = np.repeat(np.arange(len(qs.gold), dtype=np.int64), counts)
    gnode = (np.concatenate(qs.gold) if counts.sum() else np.zeros(0, np.int64)) + arrays.n_ent
    deg = indptr[gnode + 1] - indptr[gnode]
    nbr = arrays.graph.indices[ranges(indptr[gnode], deg)].astype(np.int64)
    nq = np.repeat(gq, deg)
    ent = nbr < arrays.n_ent
    keys = np.concatenate([gq * n + gnode, nq[ent] * n + nbr[ent]])
    question = batch.question.numpy()[batch.batch.numpy()]
    return isin_sorted(question * n + batch.node_id.numpy(), keys).astype(np.float32)


def listwise_loss(logits, labels):
    """Mean over questions with a gold candidate of the softmax cross-entropy (torch)."""
    import torch

    has = labels.sum(dim=1) > 0
    if not bool(has.any()):
        return logits.sum() * 0.0
    logp = torch.log_softmax(logits[has], dim=1)
    target = labels[has] / labels[has].sum(dim=1, keepdim=True)
    return -(target * logp).sum(dim=1).mean()


def _batch_loss(model, qs: QuestionSet, idx: np.ndarray, cfg: TrainConfig):
    """Loss of questions ``idx`` of ``qs`` and their (q, c) subgraph logits."""
    import torch

    pieces = qs.pieces(cfg)
    batch = concat_batches([pieces[i][0] for i in idx])
    node_logits, sub_logits = model(batch)
    labels = torch.from_numpy(qs.labels[idx])
    logits = sub_logits.view(labels.shape)
    loss = listwise_loss(logits, labels)
    if cfg.point_loss_weight:  # every gold candidate up, not just the easiest one
        loss = loss + cfg.point_loss_weight * torch.nn.functional.binary_cross_entropy_with_logits(
            logits, labels)
    if cfg.node_loss_weight:
        y = torch.cat([pieces[i][1] for i in idx])
        loss = loss + cfg.node_loss_weight * torch.nn.functional.binary_cross_entropy_with_logits(
            node_logits, y)
    return loss, sub_logits.detach().view(labels.shape).numpy()


def ranking_metrics(scores: np.ndarray, qs: QuestionSet) -> dict[str, float]:
    """Recall@2/5 and all-gold@8 of the candidates ordered by ``scores`` (passage rows)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked = np.take_along_axis(qs.inputs.cand, order, axis=1)
    out: dict[str, list[float]] = {"recall@2": [], "recall@5": [], "all_gold@8": []}
    for i, gold in enumerate(qs.gold):
        if len(gold) == 0:
            continue
        g = unique_sorted(gold)
        for k in (2, 5):
            out[f"recall@{k}"].append(isin_sorted(g, ranked[i, :k]).mean())
        out["all_gold@8"].append(float(isin_sorted(g, ranked[i, :8]).all()))
    return {k: float(np.mean(v)) if v else 0.0 for k, v in out.items()}


def evaluate_model(model, qs: QuestionSet, cfg: TrainConfig) -> dict[str, float]:
    """Loss and candidate-ranking metrics of ``model`` (no gradient) vs the retriever's own."""
    import torch

    model.eval()
    losses, scores = [], []
    with torch.no_grad():
        for s in range(0, len(qs), 32):
            part = np.arange(s, min(len(qs), s + 32))
            loss, sc = _batch_loss(model, qs, part, cfg)
            losses.append(float(loss) * len(part))
            scores.append(sc)
    scores_all = np.concatenate(scores) if scores else np.zeros((0, 0))
    out = {"loss": sum(losses) / max(len(qs), 1)}
    out.update({f"gat_{k}": v for k, v in ranking_metrics(scores_all, qs).items()})
    if qs.base is not None:
        out.update({f"base_{k}": v for k, v in ranking_metrics(qs.base, qs).items()})
    out["candidate_recall"] = float(np.mean([isin_sorted(unique_sorted(g), qs.inputs.cand[i]).mean()
                                             for i, g in enumerate(qs.gold) if len(g)]))
    return out


def train(train_sets: list[QuestionSet], val_sets: list[QuestionSet], cfg: TrainConfig,
          progress: bool = False) -> tuple[Any, dict[str, Any]]:
    """Fit a :class:`QueryGAT`; returns the best-validation model and the training history."""
    from gpurag.rerank.threads import torch_threads

    with torch_threads(cfg.threads):
        return _train(train_sets, val_sets, cfg, progress)


def _train(train_sets: list[QuestionSet], val_sets: list[QuestionSet], cfg: TrainConfig,
           progress: bool) -> tuple[Any, dict[str, Any]]:
    import torch

    from gpurag.rerank.model import GATConfig, QueryGAT

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    prev_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        dim = train_sets[0].arrays.dim
        model = QueryGAT(GATConfig(emb_dim=dim, hidden=cfg.hidden, layers=cfg.layers,
                                   heads=cfg.heads, dropout=cfg.dropout, conv=cfg.conv))
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        # Questions whose gold never reaches the candidates carry no ranking signal.
        usable = [np.flatnonzero(s.labels.sum(axis=1) > 0) for s in train_sets]
        history: list[dict[str, float]] = []
        best, best_loss, best_epoch, bad = None, np.inf, -1, 0
        t0 = time.perf_counter()
        for epoch in range(cfg.epochs):
            model.train()
            batches = []
            per_set = None
            if cfg.balance_sets:  # sets with their own ``draw`` take no part in balancing
                sizes = [i.size for i, s in zip(usable, train_sets, strict=True) if s.draw is None]
                per_set = min(sizes) if sizes else None
            for si, idx in enumerate(usable):
                draw = train_sets[si].draw
                idx = rng.permutation(idx)[:draw if draw is not None else per_set]
                batches += [(si, idx[s:s + cfg.batch_questions])
                            for s in range(0, idx.size, cfg.batch_questions)]
            train_loss = 0.0
            for bi in rng.permutation(len(batches)):
                si, idx = batches[bi]
                loss, _ = _batch_loss(model, train_sets[si], idx, cfg)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                train_loss += float(loss.detach()) * len(idx)
            n_train = sum(b[1].size for b in batches)
            row = {"epoch": epoch, "train_loss": train_loss / max(n_train, 1),
                   "train_questions": n_train}
            if val_sets:
                vals = [evaluate_model(model, v, cfg) for v in val_sets]
                w = np.array([1.0 if cfg.balance_sets else len(v) for v in val_sets])
                for key in vals[0]:
                    row[f"val_{key}"] = float(np.dot(w, [v[key] for v in vals]) / w.sum())
                score = row["val_loss"]
            else:
                score = row["train_loss"]
            history.append(row)
            if progress:
                print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in row.items()), flush=True)
            if score < best_loss - 1e-4:
                best, best_loss, best_epoch, bad = copy.deepcopy(model.state_dict()), score, \
                    epoch, 0
            else:
                bad += 1
                if bad >= cfg.patience:
                    break
        if best is not None:
            model.load_state_dict(best)
        model.eval()
        return model, {"history": history, "best_epoch": best_epoch,
                       "best_score": float(best_loss),
                       "train_questions_used": int(sum(i.size for i in usable)),
                       "seconds": time.perf_counter() - t0, "config": asdict(cfg)}
    finally:
        torch.use_deterministic_algorithms(prev_det)


def cross_validate(qs: QuestionSet, cfg: TrainConfig, folds: int = 5,
                   extra_train: list[QuestionSet] | None = None,
                   progress: bool = False) -> dict[str, Any]:
    """Out-of-fold scores: fold ``k`` is scored by a model trained on the others (the next
    fold validating, ``extra_train`` sets added to training), so every question of ``qs`` is
    scored by a model that never saw it."""
    import torch

    from gpurag.rerank.threads import torch_threads

    n = len(qs)
    perm = np.random.default_rng(cfg.seed).permutation(n)
    parts = np.array_split(perm, folds)
    scores = np.zeros(qs.inputs.cand.shape, dtype=np.float32)
    best_epochs = []
    for k in range(folds):
        test, val = np.sort(parts[k]), np.sort(parts[(k + 1) % folds])
        train_idx = np.sort(setdiff_sorted(perm, np.r_[test, val]))
        model, info = train([qs.take(train_idx), *(extra_train or [])], [qs.take(val)], cfg,
                            progress=progress)
        best_epochs.append(info["best_epoch"])
        held = qs.take(test)
        with_scores = []
        with torch.no_grad(), torch_threads(cfg.threads):
            for s in range(0, len(held), 32):
                part = np.arange(s, min(len(held), s + 32))
                with_scores.append(_batch_loss(model, held, part, cfg)[1])
        scores[test] = np.concatenate(with_scores)
    out = {"folds": folds, "best_epochs": best_epochs,
           "gat": ranking_metrics(scores, qs)}
    if qs.base is not None:
        out["base"] = ranking_metrics(qs.base, qs)
    out["scores"] = scores
    return out
