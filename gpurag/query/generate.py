"""LLM answers over retrieved evidence, and global (map-reduce) answers over community reports.

Both talk to any OpenAI-compatible server through :mod:`gpurag.llm`; every call is batched and
cached on disk.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpurag.errors import ConfigError
from gpurag.query.results import QueryResult


def answer_results(index: Any, results: list[QueryResult], client: Any,
                   token_budget: int = 3000) -> list[QueryResult]:
    """Fill ``result.answer`` (and ``citations``) from each result's passages, seeds and paths."""
    from gpurag.llm.answer import answer_questions, build_context

    count = index.embedder.count_tokens
    contexts = []
    for r in results:
        passages = [{"id": p.doc_id, "title": p.title, "text": p.text} for p in r.passages]
        entities = [{"name": s.name, "label": s.via} for s in r.seeds]
        paths = [[*p.entities] for p in r.paths]
        contexts.append(build_context(passages, entities=entities, paths=paths,
                                      token_budget=token_budget, count_tokens=count))
    answers = answer_questions(client, [r.question for r in results], contexts)
    for r, a in zip(results, answers, strict=False):
        r.answer = a.answer if not a.error else None
        r.citations = list(a.citations)
        r.error = a.error
    return results


def graph_tables(index: Any) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Communities, entities and relations keyed by canonical entity name (for reports)."""
    d = index.dir
    entities = d.table("tables/entities.parquet")
    names = entities["name"].astype(str).to_numpy(dtype=object)
    comm = d.table("tables/communities.parquet")
    comm = comm.assign(node=names[comm["node"].to_numpy()])
    rel = d.table("tables/relations.parquet", columns=["head_entity", "relation", "tail_entity",
                                                       "weight"])
    rel = (rel.groupby(["head_entity", "relation", "tail_entity"], sort=False)["weight"].sum()
           .reset_index())
    rel = pd.DataFrame({"head": names[rel["head_entity"].to_numpy()], "relation": rel["relation"],
                        "tail": names[rel["tail_entity"].to_numpy()], "weight": rel["weight"]})
    if d.has("tables/descriptions.parquet"):
        desc = d.table("tables/descriptions.parquet")
        first = desc.groupby("entity")["description"].first()
        entities = entities.assign(description=first.reindex(entities["entity_id"]).fillna("")
                                   .to_numpy())
    return comm, entities, rel


def global_answers(index: Any, questions: list[str], client: Any, level: int = 0,
                   report_max_tokens: int = 600, answer_max_tokens: int = 500,
                   communities: int | None = None, k: int = 5,
                   results: list[QueryResult] | None = None) -> list[QueryResult]:
    """Map-reduce over community reports of ``level`` (written lazily, then cached).

    ``communities`` ``None``: over every community of the level (eager: one report each).
    A number: lazy, as LazyGraphRAG does: the communities are ranked for each question without
    an LLM (:func:`global_results`) and reports are written and mapped only for its top
    ``communities``; the results keep that ranking (communities, passages).
    ``results``: that ranking already made (``Index.query_batch(mode="global")``), filled in.

    ``error`` is set on each result whose answer rests on failed LLM calls (reports that could
    not be written, failed map or reduce calls)."""
    from gpurag.llm.global_search import global_search
    from gpurag.llm.reports import LazyReports

    if results is not None:
        out, communities = results, max((len(r.communities) for r in results), default=0)
    elif communities is not None:
        out = global_results(index, questions, k=k, level=level, top=communities)
    else:
        out = [QueryResult(question=q, mode="global", passages=[]) for q in questions]
    comm, entities, rel = graph_tables(index)
    stored = (index.dir.table("tables/reports.parquet")
              if index.dir.has("tables/reports.parquet") else None)
    lazy = None if stored is not None else LazyReports(
        client, comm, entities, rel, entity_key="name",
        count_tokens=index.embedder.count_tokens, max_tokens=report_max_tokens)

    def reports_of(ids: list[int] | None) -> pd.DataFrame:
        if stored is not None:
            frame = stored if ids is None else stored[stored["community"].isin(ids)]
            return frame[frame["level"] == level]
        return lazy.get(ids, level)

    if communities is None:
        groups = [(list(range(len(questions))), reports_of(None))]
    else:  # written once for the union of the questions' top communities, then per question
        wanted = list(dict.fromkeys(h.community for r in out for h in r.communities))
        every = reports_of(wanted)
        groups = [([qi], every[every["community"].isin([h.community for h in r.communities])])
                  for qi, r in enumerate(out)]
    for members, reports in groups:
        answers = global_search(client, [questions[qi] for qi in members], reports, level=level,
                                count_tokens=index.embedder.count_tokens,
                                map_max_tokens=answer_max_tokens,
                                reduce_max_tokens=answer_max_tokens)
        for qi, a in zip(members, answers, strict=True):
            r = out[qi]
            r.answer = a.answer or None  # an LLM failure is an error, never an empty answer
            r.error = a.error
            if communities is not None:
                text = dict(zip(reports["community"].tolist(), reports["text"].tolist(),
                                strict=True))
                for h in r.communities:
                    h.report = text.get(h.community) or None
    return out


def global_results(index: Any, questions: list[str], k: int = 5, level: int = 0,
                   top: int | None = None) -> list[QueryResult]:
    """Global questions without an LLM: per question its ``top`` (``None``: all) communities of
    ``level``
    ranked by relevance (:mod:`gpurag.query.communities`), each with key entities, central
    passages and an extractive summary; ``passages``: those central passages, at most ``k``."""
    import time

    from gpurag.query.communities import community_view, passage_rows

    if top is not None and top < 1:
        raise ConfigError(f"communities must be at least 1, not {top}")
    view = community_view(index, level)
    top = len(view.community_ids) if top is None else top
    t0 = time.perf_counter()
    qvecs = index.embedder.encode(list(questions), batch_size=64)
    embed_ms = (time.perf_counter() - t0) * 1000 / max(len(questions), 1)
    t0 = time.perf_counter()
    hits, mass = view.hits(qvecs, top)
    out = []
    for qi, q in enumerate(questions):
        rows, weights = passage_rows(view, hits[qi], mass[qi], k)
        scale = float(weights.max()) if len(weights) else 1.0
        shown = np.maximum.accumulate((weights / max(scale, 1e-30))[::-1])[::-1]
        passages = index._passages(rows, shown)  # in community order, never rising
        out.append(QueryResult(question=q, mode="global", passages=passages,
                               communities=hits[qi]))
    search_ms = (time.perf_counter() - t0) * 1000 / max(len(questions), 1)
    for r in out:
        r.timings_ms = {"embed": embed_ms, "retrieve": search_ms}
    return out
