import json

import pytest

from gpurag.llm.jsonrepair import JSONRepairError, parse_json, repair_json, strip_fences


def test_valid_json_is_not_marked_repaired():
    assert parse_json(' {"a": [1, 2.5, "x"], "b": null} ') == ({"a": [1, 2.5, "x"], "b": None},
                                                               False)


@pytest.mark.parametrize(("text", "expected"), [
    ('```json\n{"a": 1}\n```', {"a": 1}),
    ("Here you go:\n```\n[1, 2]\n```\nDone.", [1, 2]),
    ('{"a": [1, 2,], "b": 3,}', {"a": [1, 2], "b": 3}),
    ("{'name': 'Ada', 'ok': True, 'x': None}", {"name": "Ada", "ok": True, "x": None}),
    ("{'name': 'O'Brien'}", {"name": "O'Brien"}),
    ('{name: "x", score: 12}', {"name": "x", "score": 12}),
    ('{"a": 1 "b": 2}', {"a": 1, "b": 2}),
    ('[{"a": 1}{"b": 2}]', [{"a": 1}, {"b": 2}]),
    ('Sure! {"k": "v"} and then {"other": 1}', {"k": "v"}),
    ('{"a": "tab\\t and \\u00e9"', {"a": "tab\t and é"}),
])
def test_repairs_common_model_mistakes(text, expected):
    value, repaired = parse_json(text)
    assert value == expected
    assert repaired


def test_truncated_output_keeps_complete_members_and_closes_containers():
    text = '{"entities": [{"name": "Marie Curie", "type": "person"}, {"name": "Pierre Cu'
    value, _ = parse_json(text)
    assert value["entities"][0] == {"name": "Marie Curie", "type": "person"}
    assert value["entities"][1] == {"name": "Pierre Cu"}
    value, _ = parse_json(text, keep_partial=False)
    assert value == {"entities": [{"name": "Marie Curie", "type": "person"}, {}]}


@pytest.mark.parametrize("text", [
    '{"a": {"b": {"c": [1, 2',
    '{"a": 1, "b":',
    '{"a": 1, "b',
    '{"a": 1, "b": tr',
    '[1, 2, 3',
    '{"a": }',
    '{"a": -',
])
def test_truncations_always_give_valid_json(text):
    json.loads(repair_json(text))


def test_unrecoverable_text_raises():
    for text in ["no json at all", "", "}}}"]:
        with pytest.raises(JSONRepairError):
            parse_json(text)


def test_strip_fences_without_fence_returns_text():
    assert strip_fences('{"a": 1}') == '{"a": 1}'
