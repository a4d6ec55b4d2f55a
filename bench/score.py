"""Batched GAT subgraph scoring: subgraphs/s and questions/s, on CPU or GPU.

For each batch size ``q`` (questions scored together, ``c`` candidates each) it times the
three steps of ``GATReranker.score``: subgraph extraction (NumPy, CSR), features + batch
packing (NumPy -> torch), and the network's forward pass on the device (incl. the host-to-
device copy); ``total`` is the whole call. The graph is either a real index (``--index``,
questions from ``--dataset``) or a synthetic entity-passage graph (default; needs no index,
no FAISS, no embedder, so it runs on the GPU machine as is).

    python bench/score.py                                    # synthetic, cpu (and cuda if any)
    python bench/score.py --index /tmp/gat_idx/musique_train100 \\
        --dataset /work/shared/data/musique_train100 --batches 1,16,100
    python -c "import bench.score as b; print(b.run(device='cuda'))"   # from device_check.sh

Writes ``bench/results/score_<date>_<device>.json`` (``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpurag.graph.csr import build_csr  # noqa: E402
from gpurag.rerank.features import CandidateInputs, GraphArrays, pack_batch  # noqa: E402


def synthetic(n_psg: int = 20000, n_ent: int = 60000, dim: int = 384, mentions: int = 8,
              seed: int = 0) -> GraphArrays:
    """A power-law entity-passage graph with random unit embeddings."""
    rng = np.random.default_rng(seed)
    pop = 1.0 / np.arange(1, n_ent + 1) ** 0.8
    pop /= pop.sum()
    psg = np.repeat(np.arange(n_psg), mentions)
    ent = rng.choice(n_ent, psg.size, p=pop)
    ea, eb = rng.choice(n_ent, 2 * n_ent, p=pop), rng.integers(0, n_ent, 2 * n_ent)
    graph = build_csr(np.r_[psg + n_ent, ea], np.r_[ent, eb], None, n_ent + n_psg)

    def unit(n: int) -> np.ndarray:
        x = rng.standard_normal((n, dim), dtype=np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    return GraphArrays(graph, n_ent, n_psg, unit(n_ent), unit(n_psg),
                       (1.0 / np.log2(2.0 + graph.degree()[:n_ent])).astype(np.float32))


def synthetic_inputs(arrays: GraphArrays, q: int, c: int = 30, m: int = 20,
                     seed: int = 1) -> CandidateInputs:
    """Random questions, candidates, PPR mass (sparse-ish) and dense results."""
    rng = np.random.default_rng(seed)
    n = arrays.graph.n_nodes
    qv = rng.standard_normal((q, arrays.dim), dtype=np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    ppr = np.zeros((q, n), np.float32)
    hot = rng.integers(0, n, (q, 2000))
    np.put_along_axis(ppr, hot, rng.random((q, 2000), dtype=np.float32) ** 3, axis=1)
    cand = np.stack([rng.choice(arrays.n_psg, c, replace=False) for _ in range(q)])
    rows = np.concatenate([cand[:, :m // 2], rng.integers(0, arrays.n_psg, (q, m - m // 2))], 1)
    scores = -np.sort(-rng.random((q, m), dtype=np.float32), axis=1)
    return CandidateInputs(qv, cand, ppr, scores, rows)


def _model(device: str, checkpoint: str | None, dim: int):
    from gpurag.rerank import checkpoint_path
    from gpurag.rerank.model import GATConfig, QueryGAT, ScorerSettings, load_checkpoint

    try:
        model, settings = load_checkpoint(checkpoint_path(checkpoint), device=device)
        if model.cfg.emb_dim == dim:
            return model, settings, "checkpoint"
    except Exception:
        pass
    return QueryGAT(GATConfig(emb_dim=dim)).to(device).eval(), ScorerSettings(), "random"


def time_scoring(arrays: GraphArrays, inp: CandidateInputs, device: str, model, settings,
                 repeats: int = 3) -> dict[str, float]:
    """Best-of-``repeats`` seconds of each step for one batch of questions."""
    import torch

    from gpurag.rerank.subgraph import extract_subgraphs
    from gpurag.rerank.threads import threads_for, torch_threads

    q, c = inp.cand.shape
    best = {"extract_s": np.inf, "features_s": np.inf, "forward_s": np.inf, "total_s": np.inf}
    nodes = edges = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        roots = (inp.cand + arrays.n_ent).ravel()
        sub = extract_subgraphs(arrays.graph, roots, np.repeat(np.arange(q), c), inp.ppr,
                                settings.fanout, settings.max_nodes)
        t1 = time.perf_counter()
        batch = pack_batch(arrays, inp, sub)
        t2 = time.perf_counter()
        # The thread rule the reranker applies (gpurag/rerank/threads.py), on the CPU only.
        threads = (threads_for(int(batch.num_nodes), torch.get_num_threads())
                   if str(device) == "cpu" else None)
        with torch.inference_mode(), torch_threads(threads):
            _, logits = model(batch.to(device))
            logits.cpu()
        t3 = time.perf_counter()
        nodes, edges = int(batch.num_nodes), int(batch.edge_index.shape[1])
        best["extract_s"] = min(best["extract_s"], t1 - t0)
        best["features_s"] = min(best["features_s"], t2 - t1)
        best["forward_s"] = min(best["forward_s"], t3 - t2)
        best["total_s"] = min(best["total_s"], t3 - t0)
    return {**best, "questions": q, "candidates": c, "nodes": nodes, "edges": edges,
            "subgraphs_per_s": q * c / best["total_s"], "questions_per_s": q / best["total_s"],
            "forward_subgraphs_per_s": q * c / best["forward_s"]}


def run(device: str = "cpu", batches: tuple[int, ...] = (1, 16, 64, 256), candidates: int = 30,
        n_psg: int = 20000, n_ent: int = 60000, checkpoint: str | None = None,
        index: str | None = None, dataset: str | None = None, budget_s: float = 120.0,
        repeats: int = 3) -> dict[str, Any]:
    """Time batched scoring for each batch size; returns a JSON-able dict."""
    import torch

    t_start = time.perf_counter()
    if index:
        from gpurag import Index
        from gpurag.eval.datasets import load_dataset
        from gpurag.rerank.train import record_inputs

        idx = Index.open(index)
        arrays = GraphArrays.from_retriever(idx.retriever)
        texts = [q.question for q in load_dataset(dataset).questions] if dataset else \
            [str(t)[:200] for t in idx.chunks["text"].head(max(batches))]
        pool, _ = record_inputs(idx, texts[:max(batches)], candidates)
        source = {"index": index, "dataset": dataset, "questions": len(pool)}
    else:
        arrays = synthetic(n_psg, n_ent)
        pool = synthetic_inputs(arrays, max(batches), candidates)
        source = {"synthetic": {"passages": n_psg, "entities": n_ent,
                                "edges": int(arrays.graph.n_edges)}}
    model, settings, weights = _model(device, checkpoint, arrays.dim)
    warm = pool.take(np.arange(min(len(pool), 4)))
    time_scoring(arrays, warm, device, model, settings, repeats=1)  # warm-up (kernels, caches)
    rows = []
    for q in batches:
        if time.perf_counter() - t_start > budget_s:
            rows.append({"questions": q, "skipped": "time budget"})
            continue
        idx_q = np.arange(q) % len(pool)
        rows.append(time_scoring(arrays, pool.take(idx_q), device, model, settings, repeats))
    return {
        "bench": "score", "device": device,
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "weights": weights,
        "model": model.cfg.to_dict(), "settings": settings.to_dict(), "source": source,
        "results": rows,
    }


def format_table(res: dict[str, Any]) -> str:
    head = (f"{'q':>5}{'subgraphs':>10}{'nodes':>9}{'edges':>10}{'extract ms':>12}"
            f"{'features ms':>13}{'forward ms':>12}{'subgraphs/s':>13}{'questions/s':>13}")
    lines = [f"GAT scoring on {res['device']} ({res['weights']} weights, "
             f"{res['threads']} threads)", head]
    for r in res["results"]:
        if "skipped" in r:
            lines.append(f"{r['questions']:>5}  skipped: {r['skipped']}")
            continue
        lines.append(f"{r['questions']:>5}{r['questions'] * r['candidates']:>10}{r['nodes']:>9}"
                     f"{r['edges']:>10}{r['extract_s'] * 1e3:>12.1f}"
                     f"{r['features_s'] * 1e3:>13.1f}{r['forward_s'] * 1e3:>12.1f}"
                     f"{r['subgraphs_per_s']:>13.0f}{r['questions_per_s']:>13.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", help="cpu | cuda | auto (both when a GPU is here)")
    p.add_argument("--batches", default="1,16,64,256")
    p.add_argument("--candidates", type=int, default=30)
    p.add_argument("--passages", type=int, default=20000, help="synthetic graph size")
    p.add_argument("--entities", type=int, default=60000)
    p.add_argument("--checkpoint", help="GAT checkpoint (default: the shipped one)")
    p.add_argument("--index", help="a real index instead of the synthetic graph")
    p.add_argument("--dataset", help="questions for --index (eval-format folder)")
    p.add_argument("--budget-s", type=float, default=120.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    devices = (["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
               if args.device == "auto" else [args.device])
    batches = tuple(int(b) for b in args.batches.split(","))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for device in devices:
        res = run(device, batches, args.candidates, args.passages, args.entities,
                  args.checkpoint, args.index, args.dataset, args.budget_s, args.repeats)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H%M%SZ")
        path = out / f"score_{stamp}_{device}.json"
        path.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
        print(format_table(res))
        print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
