"""Benchmark gpurag's CPU graph algorithms against what GraphRAG-style systems call.

Builds a synthetic power-law graph (Chung-Lu degrees with topical locality: a share ``--mix``
of edges is global, the rest stays inside ~``--community-size``-node topics, as in a knowledge
graph extracted from documents), then times

* personalized PageRank: our ``ppr_power`` (single query, batch), ``ppr_push`` (single, batch),
  igraph ``personalized_pagerank`` (HippoRAG, fast-graphrag), networkx ``pagerank`` with a
  personalization dict (LightRAG), each with its accuracy against an exact float64 solve;
* hierarchical Leiden: our ``hierarchical_leiden`` vs ``graspologic_native.hierarchical_leiden``
  on a string edge list (what GraphRAG calls through graspologic).

Prints one JSON object on stdout (progress on stderr). Ratios are ours / theirs (below 1 means
ours is faster). Usage: ``python bench/graph_algos.py [--nodes 100000 --edges 1000000]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpurag.graph.csr import CSRGraph, build_csr
from gpurag.graph.leiden import hierarchical_leiden, modularity
from gpurag.graph.ppr import choose_method, ppr_power, ppr_push, ppr_push_batch


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def synthetic_graph(
    n_nodes: int,
    n_edges: int,
    seed: int = 0,
    exponent: float = 2.1,
    mix: float = 0.3,
    community_size: int = 1000,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edge list of a power-law graph with topical locality (Chung-Lu inside topics)."""
    rng = np.random.default_rng(seed)
    theta = np.arange(1, n_nodes + 1, dtype=np.float64) ** (-1.0 / (exponent - 1.0))
    theta = theta[rng.permutation(n_nodes)]
    n_topics = max(1, n_nodes // community_size)
    topic = rng.integers(0, n_topics, n_nodes)
    cdf = np.cumsum(theta)
    cdf /= cdf[-1]
    src = np.minimum(np.searchsorted(cdf, rng.random(n_edges), side="right"), n_nodes - 1)
    dst = np.minimum(np.searchsorted(cdf, rng.random(n_edges), side="right"), n_nodes - 1)
    local = rng.random(n_edges) >= mix
    order = np.argsort(topic, kind="stable")
    cum = np.cumsum(theta[order])
    bounds = np.searchsorted(topic[order], np.arange(n_topics + 1))
    t = topic[src[local]]
    lo, hi = bounds[t], bounds[t + 1]
    base = np.where(lo > 0, cum[np.maximum(lo - 1, 0)], 0.0)
    target = base + rng.random(lo.size) * (cum[hi - 1] - base)
    dst[local] = order[np.minimum(np.searchsorted(cum, target, side="right"), hi - 1)]
    weight = (rng.random(n_edges) + 0.1).astype(np.float32)
    return src, dst, weight


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """Best wall time over ``repeat`` runs, and the last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def random_reset(n: int, q: int, seeds: int, rng: np.random.Generator) -> sp.csr_array:
    rows = np.repeat(np.arange(q), seeds)
    cols = np.concatenate([rng.choice(n, seeds, replace=False) for _ in range(q)])
    return sp.csr_array((rng.random(q * seeds) + 0.1, (rows, cols)), shape=(q, n))


def accuracy(est: np.ndarray, exact: np.ndarray, k: int = 20) -> dict[str, float]:
    """Max L1 error and mean top-k overlap of each row against the exact scores."""
    est, exact = np.atleast_2d(est), np.atleast_2d(exact)
    top_e = np.argpartition(-est, k, axis=1)[:, :k]
    top_x = np.argpartition(-exact, k, axis=1)[:, :k]
    overlap = [np.intersect1d(a, b).size / k for a, b in zip(top_e, top_x, strict=True)]
    return {
        "l1_max": float(np.abs(est - exact).sum(axis=1).max()),
        f"top{k}_overlap": float(np.mean(overlap)),
    }


def bench_ppr(
    g: CSRGraph, edges: tuple, args: argparse.Namespace, rng: np.random.Generator
) -> dict[str, Any]:
    n, q = g.n_nodes, args.queries
    out: dict[str, Any] = {}
    n_ref = min(q, args.reference_queries)
    cases = (("few_seeds", args.seeds, q), ("many_seeds", args.many_seeds, n_ref))
    for label, n_seeds, q_case in cases:
        reset = random_reset(n, q_case, n_seeds, rng)
        log(f"ppr [{label}]: exact reference (float64, tol 1e-10) for {n_ref} queries")
        exact = ppr_power(g, reset[:n_ref], tol=1e-10, max_iter=200, dtype=np.float64)
        one = reset[[0]]
        t_pow1, _ = timed(lambda one=one: ppr_power(g, one), repeat=3)
        t_powb, xb = timed(lambda reset=reset: ppr_power(g, reset))
        n_single = n_ref
        times, ests = [], []
        for i in range(n_single):
            row = reset[[i]]
            t, (nodes, scores) = timed(lambda row=row: ppr_push(g, row.indices, row.data))
            dense = np.zeros(n, dtype=np.float32)
            dense[nodes] = scores
            times.append(t)
            ests.append(dense)
        t_pushb, yb = timed(lambda reset=reset: ppr_push_batch(g, reset))
        out[label] = {
            "seeds_per_query": n_seeds,
            "auto_choice": choose_method(g, reset),
            "power_single_s": t_pow1,
            "batch_queries": q_case,
            "power_batch_s": t_powb,
            "power_batch_per_query_s": t_powb / q_case,
            "power_accuracy": accuracy(xb[:n_ref], exact),
            "push_single_median_s": float(np.median(times)),
            "push_single_accuracy": accuracy(np.vstack(ests), exact[:n_single]),
            "push_batch_s": t_pushb,
            "push_batch_per_query_s": t_pushb / q_case,
            "push_accuracy": accuracy(yb[:n_ref].toarray(), exact),
            "push_touched_nodes_mean": float(np.diff(yb.indptr).mean()),
            "power_single_over_push_single": t_pow1 / float(np.median(times)),
            "power_batch_over_push_batch": t_powb / t_pushb,
        }
    src, dst, w = edges
    base = out["few_seeds"]
    reset = random_reset(n, args.baseline_queries, args.seeds, np.random.default_rng(7))
    exact = ppr_power(g, reset, tol=1e-10, max_iter=200, dtype=np.float64)
    import igraph as ig

    keep = src != dst
    log("ppr: igraph graph + personalized_pagerank (prpack)")
    t_build, graph = timed(
        lambda: ig.Graph(n=n, edges=np.column_stack([src[keep], dst[keep]]), directed=False)
    )
    graph.es["weight"] = w[keep].astype(np.float64).tolist()
    ig_times, ig_est = [], []
    for i in range(reset.shape[0]):
        r = reset[[i]].toarray().ravel().tolist()
        t, x = timed(
            lambda r=r: graph.personalized_pagerank(
                damping=0.5, reset=r, weights="weight", directed=False, implementation="prpack"
            )
        )
        ig_times.append(t)
        ig_est.append(np.asarray(x))
    t_ig = float(np.median(ig_times))
    out["igraph"] = {
        "graph_build_s": t_build,
        "single_median_s": t_ig,
        "accuracy": accuracy(np.vstack(ig_est), exact),
        "ratio_power_single": base["power_single_s"] / t_ig,
        "ratio_power_batch_per_query": base["power_batch_per_query_s"] / t_ig,
        "ratio_push_single": base["push_single_median_s"] / t_ig,
    }
    if args.skip_networkx:
        out["networkx"] = "skipped"
        return out
    import networkx as nx

    m = min(args.nx_edges, src.size)
    nx_n = n if m == src.size else int(min(n, max(src[:m].max(), dst[:m].max()) + 1))
    note = "same graph" if m == src.size else f"first {m} edges only (full graph too slow)"
    log(f"ppr: networkx graph + pagerank ({note})")
    g_nx_csr = build_csr(src[:m], dst[:m], w[:m], nx_n)
    rows = np.repeat(np.arange(nx_n), g_nx_csr.degree())
    upper = rows < g_nx_csr.indices  # coalesced edges: the same weighted graph as ours

    def build_nx() -> nx.Graph:
        graph = nx.Graph()
        graph.add_nodes_from(range(nx_n))
        graph.add_weighted_edges_from(
            zip(
                rows[upper].tolist(),
                g_nx_csr.indices[upper].tolist(),
                g_nx_csr.weights[upper].astype(np.float64).tolist(),
                strict=True,
            )
        )
        return graph

    t_build, gx = timed(build_nx)
    r_nx = random_reset(nx_n, args.nx_queries, args.seeds, np.random.default_rng(9))
    exact = ppr_power(g_nx_csr, r_nx, tol=1e-10, max_iter=200, dtype=np.float64)
    nx_times, nx_est = [], []
    for i in range(args.nx_queries):
        row = r_nx[[i]]
        pers = dict(zip(row.indices.tolist(), row.data.tolist(), strict=True))
        t, x = timed(lambda pers=pers: nx.pagerank(gx, alpha=0.5, personalization=pers))
        nx_times.append(t)
        nx_est.append(np.fromiter((x[k] for k in range(nx_n)), np.float64, nx_n))
    t_nx = float(np.median(nx_times))
    t_ours, _ = timed(lambda: ppr_power(g_nx_csr, r_nx[[0]]), repeat=3)
    push_times = [
        timed(lambda i=i: ppr_push_batch(g_nx_csr, r_nx[[i]]))[0] for i in range(args.nx_queries)
    ]
    t_ours_push = float(np.median(push_times))
    out["networkx"] = {
        "graph": note,
        "nodes": nx_n,
        "edges": m,
        "graph_build_s": t_build,
        "single_median_s": t_nx,
        "accuracy": accuracy(np.vstack(nx_est), exact),
        "ours_power_single_s": t_ours,
        "ours_push_single_s": t_ours_push,
        "ratio_power_single": t_ours / t_nx,
        "ratio_push_single": t_ours_push / t_nx,
    }
    return out


def bench_leiden(g: CSRGraph, args: argparse.Namespace) -> dict[str, Any]:
    import graspologic_native as gn

    mcs = args.max_cluster_size

    def summary(df: Any) -> dict[str, Any]:
        final = df[df.is_final].groupby("community").size()
        level0 = df[df.level == 0].sort_values("node").community.to_numpy()
        return {
            "levels": int(df.level.max()) + 1,
            "rows": len(df),
            "final_communities": len(final),
            "max_final_size": int(final.max()),
            "level0_modularity": modularity(g, level0),
        }

    log(f"leiden: ours (max_cluster_size={mcs})")
    t_ours, df = timed(lambda: hierarchical_leiden(g, max_cluster_size=mcs, seed=42))
    ours = {"time_s": t_ours, "implementation": df.attrs["implementation"], **summary(df)}
    log("leiden: ours with resolution_boosts=0 (graspologic's stopping rule)")
    t_ours0, df0 = timed(
        lambda: hierarchical_leiden(g, max_cluster_size=mcs, seed=42, resolution_boosts=0)
    )
    ours0 = {"time_s": t_ours0, **summary(df0)}
    log("leiden: graspologic_native.hierarchical_leiden on a string edge list")
    rows = np.repeat(np.arange(g.n_nodes), g.degree())
    upper = rows < g.indices

    def edge_list() -> list[tuple[str, str, float]]:
        return list(
            zip(
                rows[upper].astype(str).tolist(),
                g.indices[upper].astype(str).tolist(),
                g.weights[upper].astype(np.float64).tolist(),
                strict=True,
            )
        )

    t_edges, edges = timed(edge_list)
    t_gn, clusters = timed(lambda: gn.hierarchical_leiden(edges, max_cluster_size=mcs, seed=42))
    final: dict[int, int] = {}
    level0 = np.arange(g.n_nodes) + 10**9  # nodes absent from the edge list stay alone
    levels = 0
    for c in clusters:
        levels = max(levels, c.level + 1)
        if c.is_final_cluster:
            final[c.cluster] = final.get(c.cluster, 0) + 1
        if c.level == 0:
            level0[int(c.node)] = c.cluster
    theirs = {
        "time_s": t_gn,
        "edge_list_s": t_edges,
        "levels": levels,
        "rows": len(clusters),
        "final_communities": len(final),
        "max_final_size": max(final.values()),
        "level0_modularity": modularity(g, level0),
    }
    return {
        "max_cluster_size": mcs,
        "ours": ours,
        "ours_no_boost": ours0,
        "graspologic_native": theirs,
        "ratio_time": t_ours / (t_gn + t_edges),
        "ratio_time_no_boost": t_ours0 / (t_gn + t_edges),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=64, help="batch size for batched PPR")
    p.add_argument("--seeds", type=int, default=5, help="seed nodes per query")
    p.add_argument("--many-seeds", type=int, default=1000, help="seeds per query, dense case")
    p.add_argument("--reference-queries", type=int, default=16, help="queries checked exactly")
    p.add_argument("--baseline-queries", type=int, default=4, help="queries timed on igraph")
    p.add_argument("--nx-queries", type=int, default=1, help="queries timed on networkx")
    p.add_argument("--mix", type=float, default=0.3, help="share of edges between topics")
    p.add_argument("--community-size", type=int, default=1000)
    p.add_argument("--max-cluster-size", type=int, default=10)
    p.add_argument("--nx-edges", type=int, default=1_000_000, help="edge cap for networkx")
    p.add_argument("--skip-networkx", action="store_true")
    p.add_argument("--skip-leiden", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    t_gen, edges = timed(
        lambda: synthetic_graph(
            args.nodes, args.edges, args.seed, mix=args.mix, community_size=args.community_size
        )
    )
    t_build, g = timed(lambda: build_csr(*edges, args.nodes))
    deg = g.degree()
    result: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpu": platform.processor()},
        "graph": {
            "nodes": g.n_nodes,
            "edges_in": args.edges,
            "undirected_edges": g.n_edges // 2,
            "max_degree": int(deg.max()),
            "isolated": int((deg == 0).sum()),
            "mix": args.mix,
            "generate_s": t_gen,
            "build_csr_s": t_build,
        },
    }
    rng = np.random.default_rng(args.seed + 1)
    result["ppr"] = bench_ppr(g, edges, args, rng)
    if not args.skip_leiden:
        result["leiden"] = bench_leiden(g, args)
    result["total_s"] = time.perf_counter() - t0
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
