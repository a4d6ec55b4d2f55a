"""LLM answers over retrieved evidence, and global (map-reduce) answers over community reports.

Both talk to any OpenAI-compatible server through :mod:`gpurag.llm`; every call is batched and
cached on disk.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

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
                   report_max_tokens: int = 600, answer_max_tokens: int = 500
                   ) -> list[QueryResult]:
    """Map-reduce over the community reports of ``level`` (written lazily, then cached).

    ``error`` is set on each result whose answer rests on failed LLM calls (reports that could
    not be written, failed map or reduce calls)."""
    from gpurag.llm.global_search import global_search
    from gpurag.llm.reports import LazyReports

    comm, entities, rel = graph_tables(index)
    if index.dir.has("tables/reports.parquet"):
        reports = index.dir.table("tables/reports.parquet")
    else:
        lazy = LazyReports(client, comm, entities, rel, entity_key="name",
                           count_tokens=index.embedder.count_tokens,
                           max_tokens=report_max_tokens)
        reports = lazy.get(None, level)
    answers = global_search(client, questions, reports, level=level,
                            count_tokens=index.embedder.count_tokens,
                            map_max_tokens=answer_max_tokens, reduce_max_tokens=answer_max_tokens)
    out = []
    for q, a in zip(questions, answers, strict=False):
        r = QueryResult(question=q, mode="global", passages=[])
        r.answer = a.answer or None  # an LLM failure is an error, never an empty answer
        r.error = a.error
        out.append(r)
    return out
