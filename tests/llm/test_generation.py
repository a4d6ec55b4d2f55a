"""Answers, community reports (eager and lazy), global search and description merging against
the real server: batching, caching and table shapes, not answer quality."""

import pandas as pd
import pytest

from gpurag.llm.answer import answer_questions, build_context
from gpurag.llm.client import LLMClient
from gpurag.llm.global_search import global_search
from gpurag.llm.reports import (
    REPORT_COLUMNS,
    CommunityReporter,
    LazyReports,
    generate_reports,
    merge_descriptions,
)

pytestmark = pytest.mark.llm

ENTITIES = pd.DataFrame({
    "name": ["Marie Curie", "Pierre Curie", "Warsaw", "Paris", "Sorbonne"],
    "label": ["person", "person", "location", "location", "organization"],
    "description": ["Physicist and chemist.", "Physicist, husband of Marie Curie.",
                    "City where Marie Curie was born.", "Capital of France.",
                    "University in Paris."],
})
RELATIONS = pd.DataFrame({
    "head": ["Marie Curie", "Marie Curie", "Pierre Curie", "Sorbonne"],
    "relation": ["born in", "married", "worked at", "located in"],
    "tail": ["Warsaw", "Pierre Curie", "Sorbonne", "Paris"],
    "weight": [1.0, 1.0, 0.8, 0.9],
})
# level 0: one community of everything; level 1: the Curies + Warsaw, and Paris + Sorbonne
COMMUNITIES = pd.DataFrame({
    "node": list(ENTITIES["name"]) * 2,
    "level": [0] * 5 + [1] * 5,
    "community": [0] * 5 + [1, 1, 1, 2, 2],
    "parent": [-1] * 5 + [0] * 5,
})


def test_answers_are_batched_and_cite_only_context_passages(llm_config):
    passages = [{"id": "p1", "title": "Marie Curie", "text": "Marie Curie was born in Warsaw."},
                {"id": "p2", "title": "Paris", "text": "Paris is the capital of France."}]
    contexts = [build_context(passages[:1], token_budget=200),
                build_context(passages[1:], token_budget=200)]
    with LLMClient(llm_config) as client:
        answers = answer_questions(client, ["Where was Marie Curie born?",
                                            "What is the capital of France?"], contexts,
                                   max_tokens=24)
        assert client.usage.requests == 2
    assert [a.context_ids for a in answers] == [["p1"], ["p2"]]
    for answer, allowed in zip(answers, (["p1"], ["p2"]), strict=True):
        assert isinstance(answer.answer, str)
        assert set(answer.citations) <= set(allowed)


def test_reports_lazy_then_eager_never_pay_twice(llm_config):
    config = llm_config.replace(max_tokens=40)
    options = dict(token_budget=30, max_tokens=40)  # the level-0 community is over budget
    with LLMClient(config) as client:
        reporter = CommunityReporter(client, COMMUNITIES, ENTITIES, RELATIONS, **options)
        assert reporter.needed([(0, 0)]) == {(0, 0), (1, 1), (1, 2)}
        lazy = LazyReports(client, COMMUNITIES, ENTITIES, RELATIONS, **options)
        first = lazy.for_nodes(["Warsaw"], level=1)
        assert first["community"].tolist() == [1] and client.usage.requests == 1
        again = lazy.get([1], level=1)
        assert client.usage.requests == 1  # kept in memory
        pd.testing.assert_frame_equal(first, again)
    with LLMClient(config) as client:
        reports = generate_reports(client, COMMUNITIES, ENTITIES, RELATIONS, **options)
        assert client.usage.requests == 2 and client.usage.cache_hits == 1
    assert dict(reports.dtypes.astype(str)) == REPORT_COLUMNS
    keys = sorted(zip(reports["level"], reports["community"], strict=True))
    assert keys == [(0, 0), (1, 1), (1, 2)]
    assert reports.set_index("community").loc[1, "parent"] == 0
    assert (reports["error"].isin(["", "malformed report"])).all()
    # the over-budget parent was described through its sub-communities' reports
    reporter = CommunityReporter(LLMClient(config), COMMUNITIES, ENTITIES, RELATIONS, **options)
    reporter.reports = {(int(r.level), int(r.community)): r._asdict()
                        for r in reports.itertuples(index=False)}
    assert "Sub-community reports:" in reporter.context((0, 0))
    assert "Sub-community reports:" not in reporter.context((1, 2))


def test_global_search_map_reduce(llm_config):
    reports = pd.DataFrame({
        "level": [1, 1], "community": [1, 2], "rating": [8.0, 5.0], "n_nodes": [3, 2],
        "title": ["The Curies", "Paris"], "error": ["", ""],
        "summary": ["Marie and Pierre Curie, physicists.", "Paris and the Sorbonne."],
        "text": ["# The Curies\n\nMarie Curie, born in Warsaw, married Pierre Curie.",
                 "# Paris\n\nThe Sorbonne is a university in Paris."],
    })
    with LLMClient(llm_config) as client:
        answers = global_search(client, ["Who are the main people?", "Which cities appear?"],
                                reports, level=1, token_budget=20, map_max_tokens=24,
                                reduce_max_tokens=16)
        reduces = sum(1 for a in answers if a.points)
        assert client.usage.requests == 4 + reduces  # 2 questions x 2 report groups, reduces
    for answer in answers:
        assert answer.map_calls == 2
        assert all(0 < p["score"] <= 100 for p in answer.points)
        assert isinstance(answer.answer, str) and answer.answer


def test_merge_descriptions_calls_the_llm_only_above_threshold(llm_config):
    descriptions = pd.DataFrame({
        "name": ["Marie Curie"] * 4 + ["Warsaw"] * 2,
        "label": ["person"] * 4 + ["location"] * 2,
        "description": ["A physicist.", "A chemist.", "Born in Warsaw.", "Won a Nobel Prize.",
                        "Capital of Poland.", "capital of  poland."],
    })
    with LLMClient(llm_config.replace(max_tokens=40)) as client:
        merged = merge_descriptions(client, descriptions, threshold=3)
        assert client.usage.requests == 1
    merged = merged.set_index("name")
    assert merged.loc["Warsaw", "description"] == "Capital of Poland."
    assert merged.loc["Warsaw", "n_descriptions"] == 1 and not merged.loc["Warsaw", "merged"]
    assert merged.loc["Marie Curie", "n_descriptions"] == 4
    assert merged.loc["Marie Curie", "description"]
