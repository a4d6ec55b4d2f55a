"""Where multi-hop chains break, and cross-validated sweeps of the chain rounds (issue 33).

``misses``: for each question of a set whose gold passages are not all in the top 8 of graph
mode, each missing gold passage is put in one class (``miss_class``):

- ``first hop``: its title is named in the question (the walk starts there) and still missed;
- ``bridged, outranked``: another gold passage in the top ``second_hop_from`` ranks bridges
  to it (it mentions the entity the missing page's title names), so the second hop had it as
  a candidate and ranked it below 8;
- ``bridged, source low``: another gold passage bridges to it, but that source is below the
  second hop's sources or missing itself (the chain broke one hop earlier);
- ``backlink, outranked`` / ``backlink, source low``: it mentions the title entity of another
  gold passage (the reverse of a bridge: "Hannah Gross" names her father Paul Gross), that
  source in the top ``second_hop_from`` ranks or not;
- ``named, not linked``: its title's key appears in another gold passage's text, but no
  mention edge of that passage leads to it (the bridge entity was not extracted or linked);
- ``content page``: no other gold passage names it (a page about a relation, not an entity:
  reachable by words only).

``sweep``: ranks every question of each set once per variant (a dict of ranking-profile
values, plus ``chain`` for :class:`gpurag.query.chain_rounds.ChainProfile` fields), with the
questions embedded once; ``crossval`` then picks, per fold, the variant with the best
R@2 + R@5 + all-gold@8 summed over the sets' training folds and scores it on the held-out
fold (5 folds x 5 seeds, pooled per seed, then averaged).

Usage: python bench/chain_misses.py misses --set musique_train100 --index runs/musique_train100
       python bench/chain_misses.py sweep --grid shared --work runs --out runs/shared.pkl
       python bench/chain_misses.py cv --inputs runs/shared.pkl runs/shared_lihua.pkl
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import pickle
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

SETS = ("musique_train100", "hotpotqa_train100", "lihua_world")
CLASSES = ("first hop", "bridged, outranked", "bridged, source low", "backlink, outranked",
           "backlink, source low", "named, not linked", "content page")


@dataclasses.dataclass
class Setup:
    name: str
    ds: object
    index: object
    qvecs: np.ndarray

    @property
    def questions(self) -> list[str]:
        return [q.question for q in self.ds.questions]


def qvec_cache(work: Path, name: str, embedder: str, texts: list[str]) -> Path:
    """Where the set's question vectors are kept: keyed by the set, the embedder's name and
    the question texts (another embedder or another question list gets its own file)."""
    key = hashlib.sha256("\0".join([embedder, *texts]).encode("utf-8")).hexdigest()[:16]
    safe = re.sub(r"[^\w.-]+", "_", embedder)[:60]
    return work / f"{name}.{safe}.{key}.qvecs.npy"


def open_set(name: str, work: Path) -> Setup:
    from shared_data import SHARED_DATA  # bench/ (this script's folder) is on sys.path

    from gpurag.eval.datasets import load_dataset
    from gpurag.eval.runner import open_or_build_index

    ds = load_dataset(str(SHARED_DATA / name))
    index, _tmp, _ = open_or_build_index(ds, str(work / name), None, False)
    texts = [q.question for q in ds.questions]
    cache = qvec_cache(work, name, index.embedder.name, texts)
    if cache.is_file():
        qvecs = np.load(cache)
    else:
        qvecs = index.embedder.encode(texts, batch_size=64)
        np.save(cache, qvecs)
    return Setup(name, ds, index, qvecs)


def rank_rows(s: Setup, values: dict, k: int = 20) -> np.ndarray:
    """Graph-mode rows ``(q, k)`` with the ranking-profile ``values`` (``chain``: a dict of
    :class:`ChainProfile` fields for the rounds)."""
    from gpurag.config import query_plan
    from gpurag.query import chain_rounds as cr
    from gpurag.query.timing import Stages

    values = dict(values)
    chain = values.pop("chain", None)
    _cfg, plan = query_plan(s.index.query_config, {"k": k, **values}, "query")
    saved = cr.PROFILE
    if chain:
        cr.PROFILE = dataclasses.replace(cr.ChainProfile(), **chain)
    try:
        _scores, rows, _ = s.index.retriever.retrieve(s.questions, s.qvecs, plan,
                                                      s.index.passage_search, Stages())
    finally:
        cr.PROFILE = saved
    return np.asarray(rows)


def gold_ranks(s: Setup, rows: np.ndarray) -> list[list[int | None]]:
    from gpurag.metrics import gold_ranks as ranks_of

    doc = s.index.chunks["doc_id"].to_numpy()
    return [ranks_of(list(doc[r[r >= 0]]), q.gold_ids) for r, q in zip(rows, s.ds.questions,
                                                                        strict=True)]


def per_question(ranks: list[list[int | None]]) -> np.ndarray:
    """``(q, 3)``: R@2, R@5, all-gold@8 per question."""
    from gpurag.metrics import all_gold_per_question, recall_per_question

    return np.stack([recall_per_question(ranks, 2), recall_per_question(ranks, 5),
                     all_gold_per_question(ranks, 8)], axis=1)


def long_chain(s: Setup) -> np.ndarray:
    return np.array([(q.hops or 0) >= 3 for q in s.ds.questions])


def crossval(table: dict[str, dict[str, np.ndarray]], folds: int = 5, seeds: int = 5
             ) -> dict:
    """``table[set][variant]``: ``(q, 3)`` per-question metrics. Per seed and fold, the variant
    with the highest sum of the sets' training-fold means is scored on the held-out fold;
    returns per set the pooled held-out means (averaged over seeds) and the picks."""
    sets = list(table)
    variants = list(table[sets[0]])
    held = {name: np.zeros((seeds, *table[name][variants[0]].shape)) for name in sets}
    picks: Counter = Counter()
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        fold_of = {name: rng.permutation(len(table[name][variants[0]])) % folds
                   for name in sets}
        for f in range(folds):
            score = [sum(table[n][v][fold_of[n] != f].mean(axis=0).sum() for n in sets)
                     for v in variants]
            best = variants[int(np.argmax(score))]  # ties: the first (the baseline) wins
            picks[best] += 1
            for n in sets:
                held[n][seed][fold_of[n] == f] = table[n][best][fold_of[n] == f]
    return {"picks": dict(picks),
            "held_out": {n: held[n].mean(axis=0) for n in sets}}


def miss_class(gold_row: int, other_rows: list[int], top: np.ndarray, hop_from: int,
               bridge, backlinks: list[int], first_hop: bool, named_elsewhere: bool) -> str:
    """The class of one missing gold passage (see the module docstring); ``backlinks``: the
    other gold rows whose title entity it mentions."""
    if first_hop:
        return "first hop"
    for kind, sources in (("bridged", [h for h in other_rows if bridge[h, gold_row] > 0]),
                          ("backlink", backlinks)):
        if sources:
            high = any(h in top[:hop_from] for h in sources)
            return f"{kind}, {'outranked' if high else 'source low'}"
    return "named, not linked" if named_elsewhere else "content page"


def misses(s: Setup, depth: int = 100, only_long: bool = False) -> list[dict]:
    """Per missing gold passage of each question without all gold in the top 8: its class,
    rank (within ``depth``, else None), title and the question."""
    from gpurag.query.second_hop import title_keys

    r = s.index.retriever
    rows = rank_rows(s, {}, k=depth)
    ranks = gold_ranks(s, rows)
    chunks = s.index.chunks
    doc = chunks["doc_id"].to_numpy()
    row_of = {d: i for i, d in reversed(list(enumerate(doc)))}
    titles = chunks["title"].fillna("").astype(str).to_numpy()
    texts = chunks["text"].fillna("").astype(str).str.lower().to_numpy()
    keys = title_keys(chunks["title"])
    from gpurag.config import query_plan

    _cfg, plan = query_plan(s.index.query_config, {}, "query")
    hop_from = plan.second_hop_from
    bridge = r.bridge_pages.matrix(plan.second_hop_max_pages).tocsr()
    by_entity = r.mentions.tocsc()
    emb = np.asarray(r.bridge_pages.passage_emb[np.arange(r.n_psg)], np.float64)
    out = []
    for qi, q in enumerate(s.ds.questions):
        rk = ranks[qi]
        if all(x is not None and x <= 8 for x in rk) or (only_long and (q.hops or 0) < 3):
            continue
        gold_rows = [row_of[g] for g in q.gold_ids if g in row_of]
        qtext = q.question.lower()
        for g, x in zip(q.gold_ids, rk, strict=True):
            if x is not None and x <= 8:
                continue
            gr = row_of[g]
            others = [h for h in gold_rows if h != gr]
            key = keys[gr]
            first = bool(titles[gr]) and titles[gr].lower() in qtext
            named = len(key) >= 3 and any(re.search(rf"\b{re.escape(key)}\b", texts[h])
                                          for h in others)
            ment = r.mentions
            mentioned = set(ment.indices[ment.indptr[gr]:ment.indptr[gr + 1]].tolist())
            back = [h for h in others if r.title_entity[h] in mentioned]
            shared = []
            for h in others:
                theirs = set(ment.indices[ment.indptr[h]:ment.indptr[h + 1]].tolist())
                for e in sorted((mentioned & theirs) - {r.title_entity[h]}):
                    holders = np.flatnonzero(by_entity[:, [e]].toarray().ravel())
                    sim = emb[holders] @ s.qvecs[qi]
                    place = int((sim > sim[holders == gr][0]).sum()) + 1
                    shared.append(f"{r.entity_names[e]} (from {titles[h]!r}; "
                                  f"{place} of {len(holders)} by cosine)")
            out.append({"question": q.id, "shared": shared, "type": q.type,
                        "text": q.question, "gold": g,
                        "title": titles[gr], "rank": x,
                        "class": miss_class(gr, others, rows[qi], hop_from, bridge, back,
                                            first, named),
                        "found": [f"{titles[row_of[d]]}@{y}" for d, y in
                                  zip(q.gold_ids, rk, strict=True) if d != g]})
    return out


def shared_grid() -> dict[str, dict]:
    """Shared-entity pages off, or weight x sources x max_df x temperature."""
    out: dict[str, dict] = {"off": {}}
    for w, src, df, t in itertools.product((0.1, 0.15, 0.25, 0.35), (3, 5), (20, 30, 50, 1000),
                                           (0.05, 0.1)):
        out[f"shared w{w} from{src} df{df} t{t}"] = {
            "shared_entity_weight": w, "shared_entity_from": src, "shared_entity_max_df": df,
            "shared_entity_temperature": t}
    return out


def rounds_grid(base: dict | None = None) -> dict[str, dict]:
    """Chain rounds off, 1 or 2 per question (from its relation phrases), or the same number
    for every question (``uniform``), on top of ``base``."""
    base = base or {}
    out = {"off": dict(base)}
    for n in (1, 2):
        out[f"rounds {n}"] = {**base, "chain_rounds": n}
        out[f"rounds {n} uniform"] = {**base, "chain_rounds": n, "uniform": True}
    return out


def sweep(sets: list[str], work: Path, grid: dict[str, dict]) -> dict:
    """Per set and variant, ``(q, 3)`` per-question metrics, plus the 3/4-hop mask."""
    from gpurag.query import chain_rounds as cr

    out = {}
    for name in sets:
        s = open_set(name, work)
        table = {}
        for label, values in grid.items():
            values = dict(values)
            saved = cr.rounds_for
            if values.pop("uniform", False):
                cr.rounds_for = lambda qs, budget: np.full(len(qs), max(budget, 0), np.int64)
            try:
                table[label] = per_question(gold_ranks(s, rank_rows(s, values)))
            finally:
                cr.rounds_for = saved
        out[name] = {"table": table, "long": long_chain(s)}
    return out


def cv_report(swept: dict, seeds: int = 5) -> dict:
    """Cross-validated metrics (``crossval``) next to the baseline ``off``, per set; the
    3/4-hop share where the set has such questions."""
    common = [v for v in next(iter(swept.values()))["table"]
              if all(v in d["table"] for d in swept.values())]  # the variants every set has
    res = crossval({n: {v: d["table"][v] for v in common} for n, d in swept.items()},
                   seeds=seeds)
    rep = {"picks": dict(sorted(res["picks"].items(), key=lambda x: -x[1]))}
    for n, d in swept.items():
        off, held, lc = d["table"]["off"], res["held_out"][n], d["long"]
        row = {"off": off.mean(axis=0).round(3).tolist(),
               "cv": held.mean(axis=0).round(3).tolist()}
        if lc.any():
            row["off_long"] = round(float(off[lc, 2].mean()), 3)
            row["cv_long"] = round(float(held[lc, 2].mean()), 3)
        rep[n] = row
    return rep


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # gpurag without an install
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["misses", "sweep", "cv"])
    ap.add_argument("--inputs", nargs="*", default=[], help="cv: pickles written by sweep")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--grid", default="shared", choices=["shared", "rounds", "rounds+shared"])
    ap.add_argument("--set", default="musique_train100")
    ap.add_argument("--work", default="runs", type=Path)
    ap.add_argument("--long", action="store_true", help="3- and 4-hop questions only")
    ap.add_argument("--out")
    ap.add_argument("--base", default="{}", help="rounds+shared: the shared-entity values (JSON)")
    args = ap.parse_args()
    if args.what == "cv":
        swept = {}
        for path in args.inputs:
            with open(path, "rb") as f:
                swept.update(pickle.load(f))
        print(json.dumps(cv_report(swept), indent=1))
        return
    if args.what == "sweep":
        grid = (shared_grid() if args.grid == "shared" else rounds_grid(
            json.loads(args.base) if args.grid == "rounds+shared" else None))
        swept = sweep(args.sets.split(","), args.work, grid)
        if args.out:
            with open(args.out, "wb") as f:
                pickle.dump(swept, f)
        rep = cv_report(swept)
        for n, d in swept.items():  # in-sample, every variant
            for label, m in d["table"].items():
                extra = f" {m[d['long'], 2].mean():.3f}" if d["long"].any() else ""
                print(f"{n} {label}: {np.round(m.mean(axis=0), 3).tolist()}{extra}")
        print(json.dumps(rep, indent=1))
        return
    s = open_set(args.set, args.work)
    found = misses(s, only_long=args.long)
    print(json.dumps(dict(Counter(m["class"] for m in found)), indent=1))
    for m in found:
        print(f"{m['type']:6s} {m['class']:20s} rank {m['rank']!s:5s} {m['title']!r}  <- "
              f"{m['found']}  | {m['text']}")
        for line in m["shared"]:
            print(f"        shares {line}")
    if args.out:
        Path(args.out).write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
