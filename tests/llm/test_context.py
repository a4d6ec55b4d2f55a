"""Context assembly, answer parsing and the map-reduce bookkeeping (no server needed)."""

import pandas as pd

from gpurag.llm.answer import approx_tokens, build_context, parse_answer
from gpurag.llm.client import ChatResult, LLMError
from gpurag.llm.global_search import GlobalAnswer, collect_points, pack_reports, reduce_requests

PASSAGES = pd.DataFrame({
    "chunk_id": ["p1", "p2", "p3"],
    "title": ["Marie Curie", "Warsaw", "Paris"],
    "text": ["Marie Curie was born in Warsaw. " * 3, "Warsaw is the capital of Poland. " * 60,
             "Paris is in France."],
})
ENTITIES = [{"name": "Marie Curie", "label": "person", "description": "Physicist."},
            {"name": "Warsaw", "type": "location", "description": "Capital of Poland."}]
RELATIONS = pd.DataFrame({"head": ["Marie Curie"], "relation": ["born in"], "tail": ["Warsaw"]})


def test_context_has_sections_marks_and_stays_in_budget():
    text, cited = build_context(PASSAGES, ENTITIES, RELATIONS,
                                paths=[["Marie Curie", "born in", "Warsaw"]], token_budget=400)
    assert approx_tokens([text])[0] <= 400 + 10
    assert text.index("Entities:") < text.index("Relations:") < text.index("Passages:")
    assert "- Marie Curie (person): Physicist." in text
    assert "- Marie Curie --born in--> Warsaw" in text
    assert "- Marie Curie -> born in -> Warsaw" in text
    assert "[P:p1] Marie Curie" in text
    assert cited[0] == "p1" and "p3" not in cited  # p2 cut to fit, nothing after it
    assert text.rstrip().endswith("...")


def test_context_with_a_real_token_counter_and_tiny_budget():
    calls = []

    def count(texts):
        calls.append(len(texts))
        return [len(t.split()) for t in texts]

    text, cited = build_context(PASSAGES.iloc[[2]], token_budget=20, count_tokens=count)
    assert cited == ["p3"] and "[P:p3] Paris" in text
    assert len(calls) == 1  # one batched call
    assert build_context([], token_budget=100) == ("", [])


def test_parse_answer_keeps_only_known_citations():
    assert parse_answer('{"answer": "Warsaw", "citations": ["p1", "P:p9", "[p2]"]}',
                        ["p1", "p2"]) == ("Warsaw", ["p1", "p2"], None)
    text, cites, error = parse_answer("Warsaw, see [P:p1]\nmore", ["p1"])
    assert (text, cites) == ("Warsaw, see [P:p1]", ["p1"]) and error
    assert parse_answer("", [])[2] == "empty answer"


def test_map_points_zero_scores_dropped_and_reduce_within_budget():
    answers = [GlobalAnswer("q0", ""), GlobalAnswer("q1", "")]
    results = [
        ChatResult('{"points": [{"description": "useful", "score": 80}, '
                   '{"description": "useless", "score": 0}]}'),
        ChatResult('{"points": [{"description": "better", "score": 95}]}'),
        ChatResult("not json at all"),
        LLMError("boom", kind="http", status=500),
    ]
    collect_points(answers, [(0, 0), (0, 1), (1, 0), (1, 1)], results)
    assert [p["description"] for p in answers[0].points] == ["better", "useful"]
    assert answers[0].dropped_points == 1
    assert (answers[1].map_calls, answers[1].map_errors, answers[1].points) == (2, 2, [])
    ids, requests = reduce_requests(answers, reduce_budget=6, count=approx_tokens, max_tokens=50)
    assert ids == [0] and answers[1].error == "every map call failed"
    assert answers[0].used_points == 1  # only the best point fits 6 tokens
    assert "better" in requests[0].messages[-1]["content"]
    assert "useful" not in requests[0].messages[-1]["content"]


def test_pack_reports_orders_by_rating_and_respects_budget():
    reports = pd.DataFrame({"community": [1, 2, 3], "rating": [2.0, 9.0, 5.0],
                            "summary": ["a", "b", "c"],
                            "text": ["low " * 10, "high " * 10, "mid " * 200]})
    groups = pack_reports(reports, token_budget=60)
    assert groups[0].startswith("[R:2]")
    assert all(approx_tokens([g])[0] <= 70 for g in groups)
    assert sum(g.count("[R:") for g in groups) == 3
