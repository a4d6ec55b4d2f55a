"""Whether two versions of the memory's write path give identical results (issue 31).

``dump`` builds memories with the code on ``PYTHONPATH`` and writes everything they hold and
answer after each stage: add (``add_many`` in batches, single ``add`` calls with searches
between them), ``compact``, a reopen from the snapshot, appends after it, and a replay (an
open with the snapshot removed, every trace through the rules again). Per stage: the log's
and the vectors' bytes, the vectors held, each trace's tags, raw tag counts, expansion,
claims, dates, referents and names digest, the claim index, the rules' per-session state, the
vocabulary (keys, surfaces, counts, canonical map), the snapshot's files, and every search's
top-10 ids, scores, view scores, anchors, relational weight, confidence and dropped hits.
Data: the bench's template traces (bench/memory.py, its vectors), the synthetic dialogues
(gpurag.memory.synthetic; also through the indexed path, ``scale_from`` small), the shared
``lihua_world`` corpus and edge cases. Vectors other than the bench's come from a seeded
hash of the text (no model). ``compare`` reports every difference between two dumps.

Usage: PYTHONPATH=OLD python bench/memory_identical.py dump old.pkl [--bench 10000]
       PYTHONPATH=NEW python bench/memory_identical.py dump new.pkl
       python bench/memory_identical.py compare old.pkl new.pkl
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import shutil
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from shared_data import SHARED_DATA  # bench/ (this script's folder) is on sys.path

DIM = 64
LIHUA = SHARED_DATA / "lihua_world"


class HashEmbedder:
    """A seeded random unit vector per text (identical across versions; no model)."""

    name = "hash"
    dim = DIM
    max_tokens = 256

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        out = np.stack([np.random.default_rng(zlib.crc32(t.encode("utf-8"))).standard_normal(DIM)
                        for t in texts]).astype(np.float32) if texts else np.zeros((0, DIM))
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def state(mem) -> dict[str, Any]:
    """Everything a memory holds (hashes of the files)."""
    root = mem.path
    v = mem.vocab
    snap = root / "compact"
    files = ({str(p.relative_to(snap)): _sha(p.read_bytes()) for p in sorted(snap.rglob("*"))
              if p.is_file()} if snap.exists() else {})
    return {
        "n": len(mem), "log": _sha((root / "log.jsonl").read_bytes()),
        "vectors_file": _sha((root / "vectors.f32").read_bytes()),
        "vectors": _sha(np.ascontiguousarray(mem._vec[: len(mem)]).tobytes()),
        "texts": list(mem.texts), "sessions": list(mem.sessions), "turns": list(mem.turns),
        "times": [repr(t) for t in mem.times], "keys": list(mem._stored_keys),
        "docs": list(mem._docs), "session_of": list(mem._session_of),
        "tags": [list(t) for t in mem._tags], "raw_n": list(mem._raw_n),
        "expansion": list(mem._expansion), "claims": dict(mem._claims),
        "claim_index": {k: list(x) for k, x in mem._claim_index.items()},
        "dates": dict(mem._dates), "refs": dict(mem._refs), "read": list(mem._read),
        "discourse": mem._discourse.state(),
        "vocab": {"keys": list(v.keys), "surfaces": list(v.surfaces),
                  "n_tokens": list(v.n_tokens), "first_last": list(v.first_last),
                  "cap_count": dict(v.cap_count), "lower_words": dict(v.lower_words),
                  "canonical": v.canonical().tolist() if len(v) else []},
        "snapshot": files,
    }


def answers(mem, questions: list[str], vectors: np.ndarray | None) -> list[dict[str, Any]]:
    """Every search's top 10 (in batches, as the evaluation asks)."""
    out = []
    for lo in range(0, len(questions), 64):
        vec = None if vectors is None else vectors[lo:lo + 64]
        for r in mem.search_batch(questions[lo:lo + 64], k=10, vectors=vec):
            out.append({"q": r.question, "anchors": list(r.anchors),
                        "w_rel": repr(r.relational_weight), "conf": repr(r.confidence),
                        "dropped": [repr(d) for d in r.dropped],
                        "hits": [(h.id, repr(h.score), sorted((k, repr(x)) for k, x in
                                                              h.views.items()),
                                  h.doc, list(h.dates)) for h in r.hits]})
    return out


def run(name: str, work: Path, first: list[dict], later: list[dict], questions: list[str],
        first_vec=None, later_vec=None, qvec=None, batch: int = 1000, singles: int = 20,
        **settings) -> dict[str, Any]:
    """The stages of one data set (see the module docstring)."""
    from gpurag.memory import Memory

    path = work / name
    shutil.rmtree(path, ignore_errors=True)
    emb = HashEmbedder()
    out: dict[str, Any] = {}
    mem = Memory.create(path, embedder=emb, **settings)
    body, tail = first[: len(first) - singles], first[len(first) - singles:]
    for lo in range(0, len(body), batch):
        mem.add_many(body[lo:lo + batch],
                     vectors=None if first_vec is None
                     else first_vec[lo:min(lo + batch, len(body))])
    out["add_single"] = []
    for j, t in enumerate(tail):  # single appends, each searched after (the refresh path)
        at = len(body) + j
        vec = None if first_vec is None else first_vec[at]
        tid = mem.add(t["text"], session=t.get("session"), turn=t.get("turn"),
                      time=t.get("time"), meta=t.get("meta"), vector=vec)
        q = questions[j % len(questions)]
        out["add_single"].append((tid, answers(mem, [q], None if qvec is None
                                                 else qvec[j % len(questions)][None])))
    again = mem.add_many(first[:5], vectors=None if first_vec is None else first_vec[:5])
    out["idempotent_ids"] = again
    out["after_add"] = state(mem), answers(mem, questions, qvec)
    out["compact_stats"] = mem.compact()
    out["after_compact"] = state(mem), answers(mem, questions, qvec)
    mem.close()
    mem = Memory.open(path, embedder=emb)
    out["after_reopen"] = state(mem), answers(mem, questions, qvec)
    for lo in range(0, len(later), batch):
        mem.add_many(later[lo:lo + batch],
                     vectors=None if later_vec is None else later_vec[lo:lo + batch])
    out["after_append"] = state(mem), answers(mem, questions, qvec)
    mem.close()
    shutil.rmtree(path / "compact")
    mem = Memory.open(path, embedder=emb)
    out["after_replay"] = state(mem), answers(mem, questions, qvec)
    mem.compact()
    out["after_replay_compact"] = state(mem), answers(mem, questions, qvec)
    mem.close()
    shutil.rmtree(path, ignore_errors=True)
    return out


def edge_traces() -> list[dict]:
    """Texts the write path treats specially."""
    texts = [
        "?", "A", "I", "Mr", "Hey Li Hua, thanks for the invite!",
        "Thanks Wolfgang, see you at the Café Müller.",
        "Wolfgang Schulz moved to Berlin last week.", "My daughter Maya plays the violin.",
        "Her teacher is Mr. Okafor.", "He teaches at Westfield School.",
        "We moved house! The new address is 5 Elm Road, Springfield.",
        "my home address is 12 Oak Street, Springfield", "Where did I live before?",
        "LiHua met li hua and LIHUA at the O'Brien-Smith gallery.",
        "Ça va? Élodie Dupont est à Zürich depuis 2019.", "Ｆｕｌｌ ｗｉｄｔｈ Ｔｏｋｙｏ text",
        "She said “The Great Gatsby” was \"Brilliant Work\" in May 2020.",
        "Dr. J. R. R. Tolkien wrote in the U.S. Army on January 5, 2001.",
        "Apollo 11 and Formula 1 in the 2018 Winter Olympics; 3 days ago it rained.",
        "AnnaBerg and McDonald's; iPhone by Apple Inc. yesterday",
        "Speaker One: they went there the day before yesterday with their dog Biscuit.",
        "Rosa: I work as a nurse at St. Mary's Hospital now.",
        "Rosa: I got a new job as a chef at Copper Pot Bistro.",
        "tab\tseparated\tNames Here\tand Ann Lee", "line one\nLine Two Name\nthird",
        "null\x00byte Inside Name", "   spaced   Out   Names  ",
        "Ann" * 40 + " Berg", " ".join(f"Name{i}" for i in range(30)),
        "emoji 😀 Zoë Ångström met Σωκράτης and 李华 at Москва.",
        "last Friday last month last year two weeks ago an hour ago this morning tonight",
        "His sister Lena, called Lena Park, lives in Osaka with their cat Mochi.",
        "Our son Leo loves chess. His coach Kofi Mensah is strict.",
        "Kofi: Leo practises every Thursday at the club.",
    ]
    out = []
    for i, t in enumerate(texts):
        rec: dict[str, Any] = {"text": t, "session": f"e{i // 6}", "time": 1.7e9 + 86400 * i}
        if i % 5 == 0:
            rec["turn"] = i
        if i % 7 == 0:
            rec["meta"] = {"doc": f"d{i}"}
        if i % 9 == 0:
            rec["key"] = f"key{i}"
        out.append(rec)
    out.append({"text": "no session given", "key": "nt", "time": 5.0})
    out.append({"text": "time as ISO", "session": "iso", "time": "2023-05-07T10:00:00"})
    out.append({"text": "time as stamp", "session": "iso", "time": "20230508_14:00"})
    return out


def dump(out_path: str, bench_n: int, sets: list[str]) -> None:
    import gpurag.memory  # first: the code under test is the one on PYTHONPATH

    print(f"code under test: {Path(gpurag.memory.__file__).parent}", file=sys.stderr)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpurag-memory-identical-") as tmp:
        work = Path(tmp)
        if "bench" in sets:
            import memory as bench  # bench/memory.py

            traces = bench.texts(bench_n + 2000)
            vec = bench.vectors(0, bench_n + 2000)
            questions, qvec, _ = bench._questions([t["text"] for t in traces[:bench_n]], 70)
            qv = np.zeros((len(questions), DIM), np.float32)
            qv[:] = qvec[:, :DIM] / np.linalg.norm(qvec[:, :DIM], axis=1, keepdims=True)
            result["bench"] = run("bench", work, traces[:bench_n], traces[bench_n:],
                                  questions, _cut(vec[:bench_n]), _cut(vec[bench_n:]), qv)
        if "synthetic" in sets or "synthetic_indexed" in sets:
            from gpurag.memory.corpus import group_turns
            from gpurag.memory.synthetic import generate

            corpus, qs = generate(10, seed=0)
            traces = list(group_turns((r["id"], r["text"], i) for i, r in enumerate(corpus)))
            questions = [q["question"] for q in qs]
            cut = len(traces) * 4 // 5
            if "synthetic" in sets:
                result["synthetic"] = run("synthetic", work, traces[:cut], traces[cut:],
                                          questions, batch=256)
            if "synthetic_indexed" in sets:
                result["synthetic_indexed"] = run("synthetic_indexed", work, traces[:cut],
                                                  traces[cut:], questions, batch=256,
                                                  scale_from=500)
        if "lihua" in sets and (LIHUA / "corpus.jsonl").exists():
            import json

            from gpurag.memory.corpus import corpus_traces

            traces = list(corpus_traces(LIHUA / "corpus.jsonl"))
            questions = [json.loads(x)["question"] for x in
                         (LIHUA / "questions.jsonl").read_text(encoding="utf-8").splitlines()
                         if x.strip()]
            cut = len(traces) * 9 // 10
            result["lihua"] = run("lihua", work, traces[:cut], traces[cut:], questions,
                                  batch=512)
        if "edge" in sets:
            traces = edge_traces()
            questions = ["Where does Maya's violin teacher teach?", "Where did I live before?",
                         "What is Rosa's job?", "When did Wolfgang move?", "Who is Li Hua?",
                         "What does Leo do on Thursday?", "Élodie Zürich", "李华"]
            result["edge"] = run("edge", work, traces[:-8], traces[-8:], questions, batch=7,
                                 singles=5)
            result["edge_nodiscourse"] = run("edge_nd", work, traces[:-8], traces[-8:],
                                             questions, batch=7, singles=5, discourse=False)
    with open(out_path, "wb") as fh:
        pickle.dump(result, fh)
    print(f"wrote {out_path}: {', '.join(result)}")


def _cut(v: np.ndarray) -> np.ndarray:
    """The bench's 384-d vectors cut to ``DIM`` and renormalized."""
    v = np.ascontiguousarray(v[:, :DIM])
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def _diff(a: Any, b: Any, where: str, out: list[str], limit: int = 40) -> None:
    if len(out) >= limit:
        return
    if type(a) is not type(b):
        out.append(f"{where}: type {type(a).__name__} != {type(b).__name__}")
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=repr):
            if k not in a or k not in b:
                out.append(f"{where}[{k!r}]: only in {'new' if k not in a else 'old'}")
            else:
                _diff(a[k], b[k], f"{where}[{k!r}]", out, limit)
    elif isinstance(a, list | tuple):
        if len(a) != len(b):
            out.append(f"{where}: length {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            _diff(x, y, f"{where}[{i}]", out, limit)
    elif a != b:
        out.append(f"{where}: {str(a)[:120]!r} != {str(b)[:120]!r}")


def compare(old: str, new: str) -> int:
    with open(old, "rb") as fa, open(new, "rb") as fb:
        a, b = pickle.load(fa), pickle.load(fb)
    diffs: list[str] = []
    _diff(a, b, "", diffs)
    for name in a:
        stages = [k for k in a[name] if k.startswith("after")]
        n_q = len(a[name]["after_add"][1])
        print(f"{name}: {a[name]['after_add'][0]['n']} traces, {n_q} questions, stages "
              f"{', '.join(stages)}")
    if diffs:
        print("DIFFERENT:")
        print("\n".join(diffs))
        return 1
    print("IDENTICAL")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    d.add_argument("--bench", type=int, default=10_000, help="bench traces before the appends")
    d.add_argument("--sets", default="bench,synthetic,synthetic_indexed,lihua,edge")
    c = sub.add_parser("compare")
    c.add_argument("old")
    c.add_argument("new")
    args = ap.parse_args()
    if args.cmd == "dump":
        dump(args.out, args.bench, args.sets.split(","))
        return 0
    return compare(args.old, args.new)


if __name__ == "__main__":
    raise SystemExit(main())
