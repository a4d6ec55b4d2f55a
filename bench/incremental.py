"""Incremental indexing (issue 13): insert 1% and 10% of a corpus vs a full rebuild; prints JSON.

On a shared set (default: HotpotQA train, 100 questions, 994 passages) split A / B (B: the last
1% or 10% of the passages):

* ``rebuild_cold_s``: ``build(A ∪ B)`` from scratch with no embedding cache -- the baseline, what
  a user without incremental indexing pays for each batch of new documents;
* ``rebuild_warm_s``: the same build with an embedding cache already holding every chunk, name
  and fact vector of the union (reported for honesty: the best a rebuild can do);
* ``insert_s``: ``insert(B)`` into ``index(A)`` with no embedding cache (the stored passage,
  surface-name and fact vectors of A are reused from the index itself);
* equivalence: the inserted index against ``build(A ∪ B)``: identical files, share of
  questions with the same top-5 (graph mode), Recall@5 of both.

``index(A)`` for 1% is built from scratch; for 10% it is ``build(A ∪ B)`` minus B by
``delete`` (timed too, and equal to a build of A by tests/pipeline/test_incremental.py).

    python bench/incremental.py --out bench/results/incremental_<date>_cpu.json

With ``--passages`` (issue 34: cost against corpus size) it instead takes the first ``--prefix``
passages of a large corpus (default the shared enwiki one) as the base index, then inserts the
next ``--new`` passages into copies of it, once by the exact path (``insert --exact``: the
graph stage over the whole corpus) and once by the local path (the default), each a separate
``gpurag insert`` process (wall, peak RSS, cost by stage from the manifest), deletes those
documents again from two copies of the exact insert's version (``delete --exact`` and the
local delete, then ``compact`` of the local one: both must give the base's files back), and
times ``--repeat`` local inserts of one document each in a row (does the cost grow?; with
``--repeat-s`` as many as fit in that many seconds). The local insert's ``resolve_s`` includes
``resolve_embed_s`` (the new names embedded). Each update also reports the files it wrote
(``written``: files of the new version that are new inodes, their count and bytes; files a
local insert keeps are hard links to the stored ones). ``--host-only``: the base is built and
every update runs with the stand-in embedder (``bench/standin.py``, the host stages only), so
a 50k base builds in minutes on a small CPU; the numbers then exclude the real model's time:

    python bench/incremental.py --passages /work/shared/data/enwiki_passages/passages.jsonl.gz \
        --prefix 5000 --new 20 --work /tmp/incr --out bench/results/incremental_local_<date>.json
    python bench/incremental.py --passages ... --prefix 50000 --host-only --repeat-s 600 ...
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _retrieval(index, questions: list[dict]) -> tuple[list[list[str]], float]:
    from gpurag.metrics import gold_ranks, recall_at

    results = index.query_batch([q["question"] for q in questions], k=5)
    top = [[p.doc_id for p in r.passages] for r in results]
    ranks = [gold_ranks(t, q["gold_ids"]) for t, q in zip(top, questions, strict=True)]
    return top, recall_at(ranks, 5)


def equivalence(got, want, questions: list[dict]) -> dict:
    a = {k: v["sha256"] for k, v in got.manifest.files.items()}
    b = {k: v["sha256"] for k, v in want.manifest.files.items()}
    (ta, ra), (tb, rb) = _retrieval(got, questions), _retrieval(want, questions)
    return {"files_identical": a == b,
            "files_differing": sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)),
            "counts_equal": got.manifest.counts == want.manifest.counts,
            "top5_same_share": float(np.mean([x == y for x, y in zip(ta, tb, strict=True)])),
            "recall5_incremental": round(ra, 4), "recall5_rebuild": round(rb, 4)}


def warm_cache(index, directory: Path) -> int:
    """An embedding cache holding every vector of ``index`` (chunks, surface names, facts),
    written straight from the index's arrays (the vectors a build would compute)."""
    from gpurag.embed.cache import CachedEmbedder
    from gpurag.pipeline.chunk_embed import embed_text
    from gpurag.store import layout
    from gpurag.vectors.codec import decode_all

    inner = index.runtime.embedder_for(index.config.embedder, cache=False)
    cache = CachedEmbedder(inner, directory)
    texts = [embed_text(t, x) for t, x in zip(index.chunks["title"], index.chunks["text"],
                                              strict=True)]
    vecs = [index.passage_vectors()]  # as stored: a rebuild's round trip leaves them as they are
    texts += index.dir.table(layout.NAMES)["name"].tolist()
    vecs.append(decode_all(index.dir.faiss(layout.NAMES_FAISS)))  # the base and its parts
    texts += index.dir.table(layout.FACTS)["text"].tolist()
    vecs.append(decode_all(index.dir.faiss(layout.FACTS_FAISS)))
    allv = np.concatenate(vecs).astype(np.float32)
    db = sqlite3.connect(directory / "embeddings.sqlite")
    with db:
        db.executemany("INSERT OR REPLACE INTO emb VALUES (?, ?)",
                       [(k, allv[i].tobytes()) for i, k in enumerate(cache._keys(texts))])
    db.close()
    return len(texts)


def _prefix(path: Path, n: int) -> list[dict]:
    import gzip
    import itertools

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in itertools.islice(fh, n) if line.strip()]


HOST_ONLY = False  # --host-only: children run the update with the stand-in embedder


def _inodes(index_path: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(index_path).as_posix(): (p.stat().st_ino, p.stat().st_size)
            for p in index_path.rglob("*") if p.is_file()}


def _written(before: dict, after: dict) -> dict:
    """The files of the new version that are not the stored ones (new inodes)."""
    new = {rel: size for rel, (ino, size) in after.items() if before.get(rel, (None,))[0] != ino}
    top = sorted(new.items(), key=lambda kv: -kv[1])[:8]
    return {"files": len(new), "of_files": len(after), "mb": round(sum(new.values()) / 2**20, 2),
            "index_mb": round(sum(size for _, size in after.values()) / 2**20, 2),
            "largest_mb": {rel: round(size / 2**20, 2) for rel, size in top}}


def _child_main(op: str, argv: list[str]) -> int:
    """One update in this process with the stand-in embedder (``--host-only`` children)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from scale import host_only_runtime

    from gpurag.pipeline import updates
    from gpurag.pipeline.build import build
    from gpurag.pipeline.incremental_local import compact_index

    runtime = host_only_runtime("cpu")
    exact = "--exact" in argv
    argv = [a for a in argv if a != "--exact"]
    if op == "index":
        build(Path(argv[0]), Path(argv[2]), show_progress=False, runtime=runtime)
        print("built")
        return 0
    if op == "insert":
        r = updates.insert_documents(argv[0], [argv[1]], runtime=runtime, show_progress=False,
                                     exact=exact)
    elif op == "delete":
        r = updates.delete_documents(argv[0], argv[2:], runtime=runtime, show_progress=False,
                                     exact=exact)
    else:
        r = compact_index(argv[0], runtime=runtime, show_progress=False)
    print(f"{op}: version {r.version}")
    return 0


def _run_rss(cmd: list[str]) -> dict:
    """Run a ``gpurag`` command in a child process (``--host-only``: the same update through
    the API with the stand-in embedder): its wall time, peak RSS, last line and, for an update
    of an index, the files it wrote."""
    import subprocess

    env = {**os.environ, "GPURAG_PROGRESS": "0"}
    argv = ([sys.executable, str(Path(__file__).resolve()), "--child", *cmd] if HOST_ONLY
            else [sys.executable, "-m", "gpurag", "-q", *cmd])
    target = Path(cmd[1]) if cmd[0] != "index" else None
    before = _inodes(target) if target is not None else None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(), err.read().decode()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {errors[-2000:]}")
    row = {"wall_s": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
           "message": text.strip().splitlines()[-1:]}
    if target is not None:
        row["written"] = _written(before, _inodes(target))
    return row


def _stages(index_path: Path) -> dict:
    from gpurag.store import open_index_dir

    d = open_index_dir(index_path)
    try:
        extra = d.manifest.extra
        return {"stages_s": {k: round(v, 3) for k, v in extra.get("timings_s", {}).items()},
                "change": {k: v for k, v in (extra.get("change") or {}).items()
                           if k in ("op", "chunks", "reextracted_chunks")},
                "incremental": extra.get("incremental"), "counts": d.manifest.counts}
    finally:
        d.close()


def _digests(index_path: Path) -> dict:
    manifest = json.loads((index_path / "manifest.json").read_text(encoding="utf-8"))
    return {rel: meta["sha256"] for rel, meta in manifest["files"].items()}


def repeated_inserts(target: Path, records: list[dict], work: Path, args) -> dict:
    """Local inserts of one document each into ``target`` in a row, in this process (the
    update alone: ``insert_documents``, not the reopen the API adds), up to ``args.repeat``
    of them or ``args.repeat_s`` seconds: the wall, stages and files written of each."""
    from gpurag.pipeline.updates import insert_documents
    from gpurag.runtime import Runtime

    if HOST_ONLY:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from scale import host_only_runtime

        runtime = host_only_runtime("cpu")
    else:
        runtime = Runtime.create(device="cpu", progress=False)
    rows = []
    t_start = time.perf_counter()
    for i, rec in enumerate(records[: args.repeat]):
        if args.repeat_s and time.perf_counter() - t_start > args.repeat_s:
            break
        src = _write(work / "one" / f"{i}.jsonl", [rec])
        before = _inodes(target)
        t0 = time.perf_counter()
        insert_documents(target, [src], runtime=runtime, show_progress=False)
        wall = time.perf_counter() - t0
        stages = json.loads((target / "manifest.json").read_text())["extra"]["timings_s"]
        w = _written(before, _inodes(target))
        rows.append({"wall_s": round(wall, 3), "written_mb": w["mb"], "files": w["files"],
                     "of_files": w["of_files"],
                     "stages_s": {k: round(v, 3) for k, v in stages.items()}})
    walls = np.array([r["wall_s"] for r in rows])
    tenth = max(1, len(rows) // 10)
    return {"inserts": len(rows), "seconds": round(time.perf_counter() - t_start, 1),
            "first_tenth_median_s": float(np.median(walls[:tenth])) if len(rows) else None,
            "last_tenth_median_s": float(np.median(walls[-tenth:])) if len(rows) else None,
            "rows": rows}


def enwiki_main(args) -> int:
    """Exact against local insert into a prefix of a large corpus (issue 34)."""
    work = Path(args.work or tempfile.mkdtemp(prefix="gpurag-incr-"))
    work.mkdir(parents=True, exist_ok=True)
    records = _prefix(args.passages, args.prefix + args.new + args.repeat)
    base_src = work / f"base{args.prefix}.jsonl"
    if not base_src.exists():
        _write(base_src, records[: args.prefix])
    new = records[args.prefix : args.prefix + args.new]
    new_src = _write(work / "new" / "new.jsonl", new)
    base = work / f"base{args.prefix}.index"
    report: dict = {"bench": "incremental-local", "passages": str(args.passages),
                    "prefix": args.prefix, "new": args.new, "host_only": args.host_only,
                    "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "load_avg_at_start": list(os.getloadavg()),
                                "note": args.note}}
    if not (base / "manifest.json").exists():
        report["base_build"] = _run_rss(["index", str(base_src), "-o", str(base)])
    elif args.base_build:  # the base's own build, measured when it was made
        report["base_build"] = json.loads(args.base_build.read_text(encoding="utf-8"))
    report["base"] = _stages(base)
    rows = {}
    for mode in ("exact", "local"):
        target = work / f"{mode}.index"
        shutil.rmtree(target, ignore_errors=True)
        # a cold insert: no embedding cache left beside the copy by an earlier run
        shutil.rmtree(work / f".{mode}.index.embcache", ignore_errors=True)
        shutil.copytree(base, target)
        row = _run_rss(["insert", str(target), str(new_src), *(["--exact"] if mode == "exact"
                                                             else [])])
        row.update(_stages(target))
        row["counts"] = {k: row["counts"].get(k) for k in ("chunks", "entities", "facts",
                                                            "graph_edges")}
        rows[mode] = row
        print(json.dumps({mode: row}), file=sys.stderr)
    report["insert"] = rows
    ids = [r["id"] for r in new]
    deletes = {}
    for mode in ("exact", "local"):  # both from copies of the exact insert's version
        target = work / f"delete-{mode}.index"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(work / "exact.index", target)
        row = _run_rss(["delete", str(target), "--doc-ids", *ids,
                        *(["--exact"] if mode == "exact" else [])])
        row.update(_stages(target))
        row["files_equal_base"] = _digests(target) == _digests(base)
        if mode == "local":
            row["compact"] = _run_rss(["compact", str(target)])
            row["compact"]["files_equal_base"] = _digests(target) == _digests(base)
            row["compact"]["files_equal_exact_delete"] = _digests(target) == _digests(
                work / "delete-exact.index")
        deletes[mode] = row
        print(json.dumps({f"delete_{mode}": row}), file=sys.stderr)
    report["delete"] = deletes
    if args.repeat:
        report["repeated"] = repeated_inserts(work / "local.index",
                                              records[args.prefix + args.new:], work, args)
    ex, lo = rows["exact"], rows["local"]
    de, dl = deletes["exact"], deletes["local"]
    report["local_over_exact"] = {"insert_wall": round(lo["wall_s"] / ex["wall_s"], 3),
                                  "insert_peak_rss": round(lo["peak_rss_mb"] / ex["peak_rss_mb"],
                                                           3),
                                  "delete_wall": round(dl["wall_s"] / de["wall_s"], 3),
                                  "delete_peak_rss": round(dl["peak_rss_mb"] / de["peak_rss_mb"],
                                                           3)}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from shared_data import SHARED_DATA  # bench/ (the running script's folder) is on sys.path

    ap.add_argument("--data", type=Path, default=SHARED_DATA / "hotpotqa_train100")
    ap.add_argument("--pcts", default="1,10", help="inserted shares of the corpus, in percent")
    ap.add_argument("--out", type=Path, help="write the JSON here too")
    ap.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    ap.add_argument("--passages", type=Path, help="large corpus (jsonl or jsonl.gz): the "
                                                   "exact-against-local mode")
    ap.add_argument("--prefix", type=int, default=5000, help="passages of the base index")
    ap.add_argument("--new", type=int, default=20, help="passages inserted")
    ap.add_argument("--repeat", type=int, default=5, help="single-document local inserts")
    ap.add_argument("--repeat-s", type=float, default=0.0,
                    help="stop the single-document inserts after this many seconds")
    ap.add_argument("--host-only", action="store_true",
                    help="base build and updates with the stand-in embedder (bench/standin.py)")
    ap.add_argument("--base-build", type=Path,
                    help="JSON of the existing base's own build (wall, peak RSS), reported")
    ap.add_argument("--note", default="shared 2-core machine, other jobs running")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child_main(argv[1], argv[2:])
    args = ap.parse_args(argv)
    global HOST_ONLY
    HOST_ONLY = args.host_only
    os.environ["GPURAG_PROGRESS"] = "0"
    if args.passages:
        return enwiki_main(args)
    os.environ.pop("GPURAG_EMBED_CACHE", None)

    from gpurag import Index
    from gpurag.runtime import Runtime, Settings

    records = _records(args.data / "corpus.jsonl")
    questions = _records(args.data / "questions.jsonl")
    work = Path(args.work or tempfile.mkdtemp(prefix="gpurag-incr-"))
    cold = Runtime.create(Settings(), device="cpu", progress=False)
    cold.embedder(None).encode(["warm-up: load the model before timing"])
    t_start = time.perf_counter()
    union = _write(work / "union" / "corpus.jsonl", records)

    t0 = time.perf_counter()
    full = Index.build(union, work / "full.index", runtime=cold, show_progress=False)
    rebuild_cold = time.perf_counter() - t0

    cache_dir = work / "cache"
    cached = warm_cache(full, cache_dir)
    warm = Runtime.create(Settings(embed_cache=str(cache_dir)), device="cpu", progress=False)
    t0 = time.perf_counter()
    Index.build(union, work / "warm.index", runtime=warm, show_progress=False).close()
    rebuild_warm = time.perf_counter() - t0

    rows = []
    for i, pct in enumerate(int(p) for p in args.pcts.split(",")):
        n_new = max(1, round(len(records) * pct / 100))
        a, b = records[:-n_new], records[-n_new:]
        b_src = _write(work / f"b{pct}" / "new.jsonl", b)
        row: dict = {"pct": pct, "documents_inserted": n_new, "documents_before": len(a)}
        target = work / f"inc{pct}.index"
        if i == 0:
            t0 = time.perf_counter()
            base = Index.build(_write(work / f"a{pct}" / "old.jsonl", a), target, runtime=cold,
                               show_progress=False)
            row["base_built_from_scratch_s"] = round(time.perf_counter() - t0, 2)
        else:
            shutil.copytree(full.path, target)
            t0 = time.perf_counter()
            base = Index.open(target, runtime=cold).delete([r["id"] for r in b],
                                                          show_progress=False)
            row["base_by_delete_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        grown = base.insert(b_src, show_progress=False)
        insert_s = time.perf_counter() - t0
        r = grown.last_update
        row.update({
            "insert_s": round(insert_s, 2), "rebuild_cold_s": round(rebuild_cold, 2),
            "insert_over_rebuild_cold": round(insert_s / rebuild_cold, 4),
            "insert_over_rebuild_warm": round(insert_s / rebuild_warm, 4),
            "chunks_added": r.chunks, "chunks_reextracted": r.reextracted_chunks,
            "names_facts_embedded": r.embedded_texts, "names_facts_reused": r.reused_vectors,
            "insert_stages_s": {k: round(v, 3) for k, v in r.timings_s.items()},
            "equivalence": equivalence(grown, full, questions),
        })
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    report = {
        "bench": "incremental", "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "data": str(args.data), "passages": len(records), "questions": len(questions),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "note": "shared 2-core machine, other jobs running: compare ratios"},
        "rebuild_cold_s": round(rebuild_cold, 2), "rebuild_warm_s": round(rebuild_warm, 2),
        "warm_cache_vectors": cached,
        "rebuild_stages_cold_s": {k: round(v, 3) for k, v in
                                  full.manifest.extra["timings_s"].items()},
        "communities": "full re-cluster",
        "inserts": rows, "wall_s": round(time.perf_counter() - t_start, 1),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
