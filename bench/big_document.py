"""Peak memory and checkpoints of the chunk stage on one huge single-line document; prints JSON.

A generated document of ``--mb`` megabytes (one line, random words) goes through the real
reader, part splitter, tokenizer, chunker and checkpoints (``run_chunk_embed``); the model call
itself is skipped (zeros), since what is measured is how memory grows with one document's size.
Each size runs in a fresh process; ``growth_mb`` is the peak RSS above the loaded embedder's,
``mb_per_doc_mb`` its ratio to the document size: it falls as documents grow when parts bound
the memory, and stays near 200 when a document is tokenized whole (4.5 GB for 20 MB before).

    python bench/big_document.py                 # 5 and 20 MB
    python bench/big_document.py --mb 2,8 --part-chars 250000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
import numpy as np
from gpurag.config import IndexConfig
from gpurag.backends.embed import load_embedder
from gpurag.pipeline.chunk_embed import run_chunk_embed
from gpurag.pipeline.workdir import WorkDir

class NoModel:
    def __init__(self, inner):
        self.inner, self.dim, self.name = inner, inner.dim, inner.name
    def token_offsets_batch(self, texts):
        return self.inner.token_offsets_batch(texts)
    def encode(self, texts, batch_size=64):
        return np.zeros((len(texts), self.dim), np.float32)

tmp, mb, part_chars = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
vocab = np.array(["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(3, 10)))
                  for _ in range(5000)])
text = " ".join(rng.choice(vocab, int(mb * 1e6 / 7)).tolist())
(tmp / "big.txt").write_text(text, encoding="utf-8")
emb = NoModel(load_embedder("minilm"))
emb.token_offsets_batch(["warm up"])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
work = WorkDir(tmp / "index", "bench")
t0 = time.perf_counter()
chunks, _, _ = run_chunk_embed(tmp / "big.txt", emb, IndexConfig(max_part_chars=part_chars),
                               work, False)
seconds = time.perf_counter() - t0
growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
doc_mb = len(text) / 1e6
print(json.dumps({"doc_mb": round(doc_mb, 2), "part_chars": part_chars,
                  "growth_mb": round(growth, 1), "mb_per_doc_mb": round(growth / doc_mb, 2),
                  "checkpoints": work.state["chunk_embed"]["parts"], "chunks": len(chunks),
                  "seconds": round(seconds, 1)}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", default="5,20", help="comma-separated document sizes in MB")
    parser.add_argument("--part-chars", type=int, default=500_000, help="max_part_chars")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPURAG_PROGRESS": "0"}
    rows = []
    for mb in (float(x) for x in args.mb.split(",") if x.strip()):
        with tempfile.TemporaryDirectory(prefix="gpurag-bigdoc-") as tmp:
            proc = subprocess.run([sys.executable, "-c", CHILD, tmp, str(mb),
                                   str(args.part_chars)], capture_output=True, text=True, env=env)
        if proc.returncode:
            print(proc.stderr, file=sys.stderr)
            return 1
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(json.dumps({"benchmark": "big_document", "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
