"""Benchmark chunking + embedding throughput on prefixes of the enwiki passages; prints JSON.

For each size N the first N passages are read (``gpurag.ingest.iter_documents``, the real
reader), cut into token windows (``chunk_documents``, the pipeline's chunker) and embedded
(the default embedder, exactly as the build embeds: ``title\\ntext``). Reading, chunking and
embedding are timed separately; rates are passages/s, chunks/s and tokens/s (chunk tokens).

    python bench/ingest.py                       # sizes 1000,5000
    python bench/ingest.py --sizes 500 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from itertools import islice
from pathlib import Path

DEFAULT_DATA = Path("/work/shared/data/enwiki_passages/passages.jsonl.gz")


def _parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--sizes wants comma-separated integers, not {text!r}") from None
    if not sizes or any(s <= 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"--sizes wants positive integers, not {text!r}")
    return sizes


def _rates(n_docs: int, n_chunks: int, n_tokens: int, seconds: float,
           cpu_seconds: float) -> dict[str, float]:
    """Wall-clock rates, plus the process CPU time (robust to a busy shared machine)."""
    s = max(seconds, 1e-9)
    return {"seconds": round(seconds, 4), "cpu_seconds": round(cpu_seconds, 4),
            "passages_per_s": round(n_docs / s, 1),
            "chunks_per_s": round(n_chunks / s, 1), "tokens_per_s": round(n_tokens / s, 1)}


def bench_size(data: Path, n: int, embedder, cfg, batch_size: int) -> dict:
    from gpurag.ingest import IngestReport, iter_documents
    from gpurag.pipeline.chunk_embed import chunk_documents, embed_text

    report = IngestReport()
    t0, c0 = time.perf_counter(), time.process_time()
    docs = list(islice(iter_documents(data, report), n))
    read_s, read_cpu = time.perf_counter() - t0, time.process_time() - c0
    if len(docs) < n:
        print(f"bench/ingest.py: only {len(docs)} passages in {data}, asked for {n}",
              file=sys.stderr)

    t0, c0 = time.perf_counter(), time.process_time()
    chunks, duplicates = chunk_documents(docs, embedder, cfg, set())
    chunk_s, chunk_cpu = time.perf_counter() - t0, time.process_time() - c0

    texts = [embed_text(t, x) for t, x in zip(chunks["title"], chunks["text"], strict=True)]
    t0, c0 = time.perf_counter(), time.process_time()
    vectors = embedder.encode(texts, batch_size=batch_size)
    embed_s, embed_cpu = time.perf_counter() - t0, time.process_time() - c0
    assert vectors.shape == (len(chunks), embedder.dim)

    n_docs, n_chunks = len(docs), len(chunks)
    n_tokens = int(chunks["n_tokens"].sum()) if n_chunks else 0
    return {
        "passages": n_docs,
        "chunks": n_chunks,
        "duplicate_chunks": duplicates,
        "chunk_tokens": n_tokens,
        "mean_tokens_per_chunk": round(n_tokens / max(n_chunks, 1), 1),
        "skipped_records": dict(report.skipped),
        "read": _rates(n_docs, n_chunks, n_tokens, read_s, read_cpu),
        "chunk": _rates(n_docs, n_chunks, n_tokens, chunk_s, chunk_cpu),
        "embed": _rates(n_docs, n_chunks, n_tokens, embed_s, embed_cpu),
        "chunk_plus_embed": _rates(n_docs, n_chunks, n_tokens, chunk_s + embed_s,
                                   chunk_cpu + embed_cpu),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_parse_sizes, default=_parse_sizes("1000,5000"),
                        help="comma-separated passage counts (prefixes of the data)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="gzipped JSONL of {id, title, text} passages")
    parser.add_argument("--embedder", default="minilm", help="embedder spec (default minilm)")
    parser.add_argument("--chunk-tokens", type=int, default=None, help="tokens per window")
    parser.add_argument("--chunk-overlap", type=int, default=None, help="window overlap")
    parser.add_argument("--batch-size", type=int, default=None, help="embedding batch size")
    parser.add_argument("--threads", type=int, default=None,
                        help="onnxruntime threads (sets GPURAG_THREADS; default: all cores)")
    args = parser.parse_args(argv)

    if not args.data.is_file():
        print(f"bench/ingest.py: data not found: {args.data} (a gzipped JSONL of "
              '{"id", "title", "text"} passages; pass --data PATH)', file=sys.stderr)
        return 2
    if args.threads is not None:
        os.environ["GPURAG_THREADS"] = str(args.threads)

    from gpurag import __version__
    from gpurag.backends.embed import load_embedder
    from gpurag.config import IndexConfig, apply_overrides
    from gpurag.device import package_version, resolve_device

    overrides = {k: v for k, v in {"embedder": args.embedder, "chunk_tokens": args.chunk_tokens,
                                   "chunk_overlap": args.chunk_overlap,
                                   "embed_batch_size": args.batch_size}.items() if v is not None}
    cfg = apply_overrides(IndexConfig(), overrides, "bench/ingest.py")
    device = resolve_device()

    t0 = time.perf_counter()
    embedder = load_embedder(cfg.embedder, device=device)
    embedder.encode(["warm-up sentence for the embedder"])  # session init off the clock
    load_s = time.perf_counter() - t0

    results = []
    for n in args.sizes:
        print(f"bench/ingest.py: {n} passages ...", file=sys.stderr)
        results.append(bench_size(args.data, n, embedder, cfg, cfg.embed_batch_size))

    out = {
        "benchmark": "ingest",
        "data": str(args.data),
        "gpurag": __version__,
        "python": platform.python_version(),
        "onnxruntime": package_version("onnxruntime"),
        "device": device,
        "cpu_count": os.cpu_count(),
        "threads": os.environ.get("GPURAG_THREADS", "0"),
        "embedder": embedder.name,
        "config": {"chunk_tokens": cfg.chunk_tokens, "chunk_overlap": cfg.chunk_overlap,
                   "embed_batch_size": cfg.embed_batch_size},
        "embedder_load_s": round(load_s, 3),
        "results": results,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
