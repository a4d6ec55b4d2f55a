"""Global search: map-reduce over community reports (GraphRAG's answer to corpus-wide questions).

Map: the reports of one level, best rated first, are packed into groups that fit the token
budget; every (question, group) pair is one call in a single batch, answering key points with a
0-100 helpfulness score. Points scored 0 are dropped. Reduce: per question, the points, best
first, fill the reduce budget and one call (again batched over questions) writes the answer.

LLM failures are never hidden behind "I do not know": when community reports could not be
written, map calls failed or the reduce call failed, the answer's ``error`` says so (the answer
is then empty, or built from what did succeed).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from gpurag.llm import prompts
from gpurag.llm.answer import CountTokens, approx_tokens
from gpurag.llm.client import ChatRequest, ChatResult, LLMClient, LLMError
from gpurag.llm.jsonrepair import JSONRepairError, parse_json

log = logging.getLogger("gpurag.llm.global_search")

NO_ANSWER = "I do not know: no community report holds anything relevant to the question."


@dataclass
class GlobalAnswer:
    """The reduced answer and the scored points it was built from."""

    question: str
    answer: str
    points: list[dict[str, Any]] = field(default_factory=list)
    map_calls: int = 0
    map_errors: int = 0
    dropped_points: int = 0
    used_points: int = 0
    error: str | None = None
    map_failures: dict[str, str] = field(default_factory=dict)  # reason -> first error


def pack_reports(reports: pd.DataFrame, token_budget: int,
                 count_tokens: CountTokens | None = None) -> list[str]:
    """Report texts (``[R:community]`` marked), best rated first, packed into groups that fit
    ``token_budget`` (a report larger than the budget gets a group of its own, cut)."""
    count = count_tokens or approx_tokens
    frame = reports.sort_values(["rating", "n_nodes"] if "n_nodes" in reports else ["rating"],
                                ascending=False, kind="stable")
    texts = [f"[R:{c}] {t if isinstance(t, str) and t else s}" for c, t, s in
             zip(frame["community"], frame["text"], frame["summary"], strict=True)]
    sizes = count(texts) if texts else []
    groups: list[str] = []
    current: list[str] = []
    spent = 0
    for text, size in zip(texts, sizes, strict=True):
        if size > token_budget:
            text = text[: max(1, int(len(text) * token_budget / size * 0.95))]
            size = token_budget
        if current and spent + size > token_budget:
            groups.append("\n\n".join(current))
            current, spent = [], 0
        current.append(text)
        spent += size
    if current:
        groups.append("\n\n".join(current))
    return groups


def _points(content: str, truncated: bool) -> list[dict[str, Any]]:
    value, _ = parse_json(content, keep_partial=not truncated)
    items = value.get("points") if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise JSONRepairError("no 'points' list")
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("description"), str):
            continue
        try:
            score = int(float(item.get("score", 0)))
        except (TypeError, ValueError):
            score = 0
        text = " ".join(item["description"].split())
        if text:
            out.append({"description": text, "score": min(max(score, 0), 100)})
    return out


def collect_points(answers: list[GlobalAnswer], pairs: Sequence[tuple[int, int]],
                   results: Sequence[ChatResult | LLMError]) -> None:
    """Add the map answers' points to ``answers`` (``pairs[i]`` = (question, group) of
    ``results[i]``), dropping points scored 0; best first."""
    for (qi, gi), result in zip(pairs, results, strict=True):
        answers[qi].map_calls += 1
        if isinstance(result, LLMError):
            answers[qi].map_errors += 1
            answers[qi].map_failures.setdefault(result.reason, str(result))
            continue
        try:
            found = (result.parsed if result.parsed is not None
                     else _points(result.content, result.truncated))
        except JSONRepairError as exc:
            answers[qi].map_errors += 1
            answers[qi].map_failures.setdefault("malformed JSON", str(exc))
            log.warning("malformed map answer (question %d, group %d): %s", qi, gi, exc)
            continue
        dropped = sum(1 for p in found if p["score"] <= 0)
        answers[qi].dropped_points += dropped
        answers[qi].points += [{**p, "group": gi} for p in found if p["score"] > 0]
    for ans in answers:
        ans.points.sort(key=lambda p: -p["score"])


def reduce_requests(answers: list[GlobalAnswer], reduce_budget: int, count: CountTokens,
                    max_tokens: int) -> tuple[list[int], list[ChatRequest]]:
    """One reduce request per question that has points (best points within the budget)."""
    reduce_ids: list[int] = []
    reduces: list[ChatRequest] = []
    for qi, ans in enumerate(answers):
        if not ans.points:
            if ans.map_calls and ans.map_errors == ans.map_calls:
                ans.error = "every map call failed"
            continue
        lines = [f"- ({p['score']}) {p['description']}" for p in ans.points]
        taken, spent = [], 0
        for line, size in zip(lines, count(lines), strict=True):
            if spent + size > reduce_budget:
                break
            taken.append(line)
            spent += size
        ans.used_points = len(taken)
        reduce_ids.append(qi)
        reduces.append(ChatRequest(prompts.reduce_messages("\n".join(taken), ans.question),
                                   prompts.REDUCE_SCHEMA, "answer", max_tokens,
                                   tag=f"reduce:{qi}", validate=_reduce_answer))
    return reduce_ids, reduces


async def aglobal_search(client: LLMClient, questions: Sequence[str], reports: pd.DataFrame,
                         level: int | None = 0, *, token_budget: int = 4000,
                         reduce_budget: int = 4000, count_tokens: CountTokens | None = None,
                         map_max_tokens: int = 500, reduce_max_tokens: int = 500,
                         ) -> list[GlobalAnswer]:
    """Async ``global_search``."""
    count = count_tokens or approx_tokens
    chosen = reports if level is None else reports[reports["level"] == level]
    report_problem = None
    if "error" in chosen:
        errors = chosen["error"].fillna("").astype(str)
        failed = errors[errors != ""]
        if len(failed):
            report_problem = (f"{len(failed)} of {len(chosen)} community reports could not be "
                              f"written (first: {failed.iloc[0][:300]})")
            log.warning("global search: %s", report_problem)
        chosen = chosen[(errors == "").to_numpy()]
    groups = pack_reports(chosen, token_budget, count)
    answers = [GlobalAnswer(q, NO_ANSWER) for q in questions]
    pairs = [(qi, gi) for qi in range(len(questions)) for gi in range(len(groups))]
    maps = [ChatRequest(prompts.map_messages(groups[gi], questions[qi]), prompts.MAP_SCHEMA,
                        "points", map_max_tokens, tag=f"map:{qi}:{gi}",
                        validate=lambda r: _points(r.content, r.truncated)) for qi, gi in pairs]
    results = await client.acomplete_batch(maps) if maps else []
    collect_points(answers, pairs, results)
    reduce_ids, reduces = reduce_requests(answers, reduce_budget, count, reduce_max_tokens)
    results = await client.acomplete_batch(reduces) if reduces else []
    for qi, result in zip(reduce_ids, results, strict=True):
        if isinstance(result, LLMError) and result.kind == "malformed":  # not cached
            answers[qi].error = "malformed reduce answer (kept as text)"
            answers[qi].answer = (result.content or "").strip()
        elif isinstance(result, LLMError):
            answers[qi].error = f"reduce call failed: {result}"
            answers[qi].answer = ""
        else:
            answers[qi].answer = result.parsed.strip()
    for ans in answers:
        _note_failures(ans, report_problem)
    return answers


def _reduce_answer(result: ChatResult) -> str:
    """A ``ChatRequest.validate`` for reduce calls: the ``answer`` string."""
    value, _ = parse_json(result.content)
    text = value.get("answer") if isinstance(value, dict) else None
    if not isinstance(text, str):
        raise JSONRepairError("no 'answer' string")
    return text


def _note_failures(ans: GlobalAnswer, report_problem: str | None) -> None:
    """Put every failure behind an answer in its ``error``; a "no report holds anything
    relevant" answer is not kept when failures may have hidden the relevant part."""
    problems = [report_problem] if report_problem else []
    if ans.map_errors:
        why = "; ".join(f"{reason}: {first[:200]}" for reason, first in ans.map_failures.items())
        problems.append(f"{ans.map_errors} of {ans.map_calls} map calls failed ({why})")
    if ans.error and ans.error != "every map call failed":
        problems.append(ans.error)
    if not problems:
        return
    ans.error = "; ".join(problems)
    if ans.answer == NO_ANSWER:
        ans.answer = ""


def global_search(client: LLMClient, questions: Sequence[str], reports: pd.DataFrame,
                  level: int | None = 0, **options: Any) -> list[GlobalAnswer]:
    """Answer corpus-wide questions from the community reports of ``level`` (all levels when
    ``None``). ``reports`` is the table of ``reports.generate_reports`` or ``LazyReports``.
    Options: ``token_budget`` (per map call), ``reduce_budget``, ``count_tokens``,
    ``map_max_tokens``, ``reduce_max_tokens``.
    """
    return client.run(lambda: aglobal_search(client, questions, reports, level, **options))
