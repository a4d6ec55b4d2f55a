"""One huge single-line document: cut into bounded parts as it streams, so memory and
checkpoints stay bounded, a killed build resumes inside the document, and every chunk's char
span still points into the original text."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gpurag import Index, IndexConfig
from gpurag.ingest.parts import cut_points, split_document
from gpurag.ingest.readers import Document
from gpurag.pipeline.chunk_embed import chunk_documents
from tests.pipeline.test_build import BoomError, _build_embedder, _count_encodes

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample" / "corpus.jsonl"
# Small windows and parts keep the embedding cheap while giving many parts.
SMALL = dict(graph=False, show_progress=False, chunk_tokens=64, chunk_overlap=8,
             max_part_chars=1_000, ingest_batch_chunks=4096)


def one_line_text(n_chars: int, seed: int = 0) -> str:
    """Random prose-like text without a single newline: words drawn from the sample corpus."""
    words = sorted({w for line in SAMPLE.read_text(encoding="utf-8").splitlines()
                    for w in json.loads(line)["text"].split()})
    rng = np.random.default_rng(seed)
    picked = rng.choice(np.array(words), n_chars // 6 + 10)
    return " ".join(picked.tolist())[:n_chars]


def assert_spans_exact(chunks, text: str) -> None:
    """Every chunk is the slice of the original text its span names, and together the chunks
    cover every non-space character (nothing is lost at a part boundary)."""
    starts, ends = chunks["char_start"].to_numpy(), chunks["char_end"].to_numpy()
    for s, e, chunk in zip(starts.tolist(), ends.tolist(), chunks["text"], strict=True):
        assert text[s:e] == chunk
    cover = np.zeros(len(text) + 1, dtype=np.int64)
    np.add.at(cover, starts, 1)
    np.add.at(cover, ends, -1)
    covered = np.cumsum(cover)[:-1] > 0
    spaces = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32) == ord(" ")
    assert not np.any(~covered & ~spaces), "characters outside every chunk"


# -- parts ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "x" * 10_500,                                   # no break at all: hard cuts
    ("word " * 2500),                               # spaces only
    ("A sentence ends here. " * 600),               # sentences
    ("para one line\n" * 300 + "\n\n") * 3,          # lines and paragraphs
    "ünï cödé ✓ " * 1200,                            # non-ASCII
    "short",
])
def test_parts_are_bounded_exact_slices(text):
    doc = Document("d", "T", text, "src")
    parts = list(split_document(doc, 1_000))
    assert "".join(p.text for p in parts) == text
    assert all(len(p.text) <= 1_000 for p in parts)
    assert all(text[p.offset:p.offset + len(p.text)] == p.text for p in parts)
    assert [p.last for p in parts] == [False] * (len(parts) - 1) + [True]
    assert {(p.doc_id, p.title, p.source) for p in parts} == {("d", "T", "src")}


def test_cuts_prefer_paragraph_then_line_then_word_breaks():
    text = "a" * 800 + "\n\n" + "b" * 100 + "\n" + "c" * 50 + " " + "d" * 500
    assert cut_points(text, 1_000) == [802]
    text = "a" * 900 + "\n" + "c" * 50 + " " + "d" * 500
    assert cut_points(text, 1_000) == [901]
    text = "a" * 960 + " " + "d" * 500
    assert cut_points(text, 1_000) == [961]


def test_chunks_of_parts_point_into_the_original_document():
    emb = _build_embedder()
    text = one_line_text(60_000)
    cfg = IndexConfig(chunk_tokens=64, chunk_overlap=8, max_part_chars=5_000)
    parts = list(split_document(Document("big", "Big", text, "m"), cfg.max_part_chars))
    assert len(parts) >= 12
    chunks, _ = chunk_documents(parts, emb, cfg, set())
    assert set(chunks["doc_id"]) == {"big"}
    assert chunks["char_start"].is_monotonic_increasing
    assert_spans_exact(chunks, text)
    # No chunk straddles a part boundary.
    bounds = np.array([p.offset for p in parts[1:]])
    starts, ends = chunks["char_start"].to_numpy(), chunks["char_end"].to_numpy()
    assert not np.any((starts[:, None] < bounds[None, :]) & (ends[:, None] > bounds[None, :]))


# -- the build -----------------------------------------------------------------------------

MEMORY_SCRIPT = r"""
import json, resource, sys
from pathlib import Path
import numpy as np
from gpurag.config import IndexConfig
from gpurag.backends.embed import load_embedder
from gpurag.pipeline.chunk_embed import run_chunk_embed
from gpurag.pipeline.workdir import WorkDir

class NoModel:
    # The real tokenizer and chunking; the model call (not what is measured here) skipped.
    def __init__(self, inner):
        self.inner, self.dim, self.name = inner, inner.dim, inner.name
    def token_offsets_batch(self, texts):
        return self.inner.token_offsets_batch(texts)
    def encode(self, texts, batch_size=64):
        return np.zeros((len(texts), self.dim), np.float32)

src, work_dir = Path(sys.argv[1]), Path(sys.argv[2])
emb = NoModel(load_embedder("minilm"))
emb.token_offsets_batch(["warm up"])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
work = WorkDir(work_dir, "key")
cfg = IndexConfig(chunk_tokens=480, chunk_overlap=0)
chunks, vectors, report = run_chunk_embed(src, emb, cfg, work, False)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
chunks[["char_start", "char_end", "text"]].to_parquet(work_dir.parent / "chunks.parquet")
print(json.dumps({"growth_mb": (peak - base) / 1024, "documents": report.documents,
                  "checkpoints": work.state["chunk_embed"]["parts"]}))
"""


def test_multi_megabyte_single_line_document_stays_bounded(tmp_path):
    """A 4 MB one-line document: memory grows by far less than tokenizing it whole would take
    (about 0.8 GB), it is checkpointed in many parts, and every span maps back exactly."""
    text = one_line_text(4_000_000)
    src = tmp_path / "big.txt"
    src.write_text(text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPURAG_PROGRESS": "0"}
    proc = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(src), str(tmp_path / "idx")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    assert stats["documents"] == 1
    assert stats["checkpoints"] >= len(text) // IndexConfig().max_part_chars
    assert stats["growth_mb"] < 300, stats  # loose: tokenizing 4 MB at once takes ~800 MB
    import pandas as pd

    assert_spans_exact(pd.read_parquet(tmp_path / "chunks.parquet"), text)


def test_kill_inside_a_document_resumes_there(tmp_path, monkeypatch):
    text = one_line_text(15_000, seed=1)
    src = tmp_path / "src" / "big.txt"
    src.parent.mkdir()
    src.write_text(text, encoding="utf-8")

    with monkeypatch.context() as m:
        full_calls = _count_encodes(m)
        ref = Index.build(src, tmp_path / "ref" / "index", **SMALL)
    assert len(full_calls) >= 10, "one checkpoint per part of the document"
    assert_spans_exact(ref.chunks, text)

    out = tmp_path / "out" / "index"
    done = 4
    with monkeypatch.context() as m:
        _count_encodes(m, fail_after=done)
        with pytest.raises(BoomError):
            Index.build(src, out, **SMALL)
    state = json.loads((out.parent / ".index.work" / "state.json").read_text())["chunk_embed"]
    assert (state["parts"], state["units"], state["docs"]) == (done, done, 0)

    with monkeypatch.context() as m:
        resumed_calls = _count_encodes(m)
        index = Index.build(src, out, **SMALL)
    assert resumed_calls == full_calls[done:], "only the parts after the kill are embedded"
    assert index.chunks["chunk_id"].tolist() == ref.chunks["chunk_id"].tolist()
    assert index.chunks[["char_start", "char_end"]].equals(ref.chunks[["char_start", "char_end"]])
    np.testing.assert_allclose(index.passage_vectors(),
                               ref.passage_vectors(), atol=1e-6)
    assert index.manifest.counts["documents"] == 1
    assert_spans_exact(index.chunks, text)


def test_sigkill_inside_a_document_then_rerun(tmp_path):
    """The real thing: ``gpurag index`` killed with SIGKILL part way through one document; the
    same command then finishes with the chunks of an uninterrupted build."""
    text = one_line_text(20_000, seed=2)
    src = tmp_path / "src" / "big.txt"
    src.parent.mkdir()
    src.write_text(text, encoding="utf-8")
    ref = Index.build(src, tmp_path / "ref" / "index", **SMALL)

    out = tmp_path / "out" / "index"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPURAG_")}
    env.update(GPURAG_PROGRESS="0", PYTHONPATH=str(REPO), GPURAG_INDEX_CHUNK_TOKENS="64",
               GPURAG_INDEX_CHUNK_OVERLAP="8", GPURAG_INDEX_MAX_PART_CHARS="1000",
               GPURAG_INDEX_INGEST_BATCH_CHUNKS="4096")
    cmd = [sys.executable, "-m", "gpurag", "index", str(src), "-o", str(out), "--no-graph"]
    state_path = out.parent / ".index.work" / "state.json"
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    units = 0
    deadline = time.monotonic() + 300
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                units = json.loads(state_path.read_text())["chunk_embed"]["units"]
            except (OSError, ValueError, KeyError):
                units = 0
            if units >= 3:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.005)
    finally:
        if proc.poll() is None and units < 3:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the build finished before it could be killed"
    assert not out.exists()
    killed_at = json.loads(state_path.read_text())["chunk_embed"]
    assert 3 <= killed_at["units"] < len(ref.chunks) and not killed_at["done"]

    rerun = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    index = Index.open(out)
    assert index.chunks["chunk_id"].tolist() == ref.chunks["chunk_id"].tolist()
    assert_spans_exact(index.chunks, text)
    assert not state_path.parent.exists()
