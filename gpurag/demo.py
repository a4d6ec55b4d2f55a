"""``gpurag demo``: index the bundled sample corpus and answer its multi-hop questions."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from gpurag.errors import ConfigError
from gpurag.query.evidence import format_chains


def sample_dir() -> Path:
    """The bundled sample corpus (inside the installed package, or beside it in a checkout)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "examples" / "sample", here.parent / "examples" / "sample"):
        if (candidate / "corpus.jsonl").is_file():
            return candidate
    raise ConfigError("the bundled sample corpus is missing from this installation")


def load_questions(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def run_demo(out: str | None = None, k: int = 5, rebuild: bool = False) -> int:
    """Build (or reuse) the sample index, answer every sample question, print the evidence."""
    from gpurag import Index

    data = sample_dir()
    questions = load_questions(data / "questions.jsonl")
    tmp = None
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="gpurag-demo-")
        out = str(Path(tmp.name) / "index")
    try:
        if not rebuild and (Path(out) / "manifest.json").is_file():
            index = Index.open(out)
        else:
            print(f"indexing the sample corpus {data / 'corpus.jsonl'} ...")
            index = Index.build(data / "corpus.jsonl", out)
        counts = index.manifest.counts
        shown = ("documents", "chunks", "entities", "merged_names", "facts", "graph_nodes",
                 "graph_edges", "community_levels")
        print("index: " + ", ".join(f"{k}={counts[k]}" for k in shown if k in counts) + "\n")
        modes = ["dense", "graph"] if index.retriever is not None else ["dense"]
        results = {m: index.query_batch([q["question"] for q in questions], k=k, mode=m)
                   for m in modes}
        main = modes[-1]
        found = {m: 0 for m in modes}
        gold_hits = {m: 0 for m in modes}
        n_gold = sum(len(set(q.get("gold_ids", []))) for q in questions)
        for i, q in enumerate(questions):
            gold = set(q.get("gold_ids", []))
            print(f"Q{i + 1} ({q.get('hops', '?')}-hop {q.get('type', '')}): {q['question']}")
            print(f"   expected answer: {q.get('answer')}   gold passages: {sorted(gold)}")
            for m in modes:
                got = set(results[m][i].doc_ids)
                found[m] += gold <= got
                gold_hits[m] += len(gold & got)
            res = results[main][i]
            if res.seeds:
                print("   seed entities: " + ", ".join(s.name for s in res.seeds[:6]))
            for p in res.passages:
                mark = "*" if p.doc_id in gold else " "
                text = " ".join(p.text.split())
                print(f"   {mark}{p.rank}. [{p.doc_id}] {p.title}: {text[:110]}"
                      f"{'…' if len(text) > 110 else ''}")
            for line in format_chains(res, per_passage=1)[:3]:  # as `gpurag query` prints them
                print("  " + line)
            status = {m: ("all gold found" if gold <= set(results[m][i].doc_ids) else
                          f"{len(gold & set(results[m][i].doc_ids))}/{len(gold)} gold")
                      for m in modes}
            print("   " + "   ".join(f"{m}: {s}" for m, s in status.items()) + "\n")
        print(f"gold passages in the top {k}: "
              + ", ".join(f"{m} {gold_hits[m]}/{n_gold}" for m in modes))
        print(f"questions with every gold passage in the top {k}: "
              + ", ".join(f"{m} {found[m]}/{len(questions)}" for m in modes))
        print("(* marks a gold passage)")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0
