"""Masked flat search A/B: FAISS's selector vs a plain k + |D| search with the deleted rows
dropped (bench/results/masked_flat.md). Usage: python bench/masked_flat.py"""

from __future__ import annotations

import os
import time

import numpy as np

from gpurag.arrays import isin_sorted
from gpurag.vectors import build_index
from gpurag.vectors.codec import codec_for
from gpurag.vectors.faiss_index import search
from gpurag.vectors.faiss_setup import SINGLE_THREAD_WORK, on_one_thread
from gpurag.vectors.masked import _padded, _params


def selector(index, q, k, gone):
    params = _params(index, gone)
    if len(q) * index.ntotal < SINGLE_THREAD_WORK:
        return on_one_thread(lambda a, b: index.search(a, b, params=params), q, k)
    return index.search(q, k, params=params)


def wider(index, q, k, gone):
    s, i = search(index, q, k + len(gone))
    bad = isin_sorted(i, gone)
    order = np.argsort(bad, 1, kind="stable")
    return _padded(np.take_along_axis(s, order, 1),
                   np.take_along_axis(np.where(bad, -1, i), order, 1), k)


def main() -> None:
    rng = np.random.default_rng(0)
    n, d = 30_000, 384
    x = rng.normal(size=(n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for prec in ("fp32", "int8"):
        index = build_index(x, 10**9, 42, None, codec=codec_for(prec, d))
        for nd in (1, 16, 128, 1024, 4096):
            gone = np.sort(rng.choice(n, nd, replace=False)).astype(np.int64)
            for nq in (1, 4, 64, 512):
                q = x[:nq] + 0.01
                reps = 30 if nq < 16 else 3
                res: dict[str, list[float]] = {"selector": [], "wider": []}
                for f in (selector, wider) * 3:
                    f(index, q, 10, gone)
                    t = time.perf_counter()
                    for _ in range(reps):
                        f(index, q, 10, gone)
                    res[f.__name__].append((time.perf_counter() - t) / reps * 1000)
                print(f"{prec} |D|={nd:5d} q={nq:4d} selector {np.median(res['selector']):8.1f}"
                      f" ms  wider {np.median(res['wider']):8.1f} ms  "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
