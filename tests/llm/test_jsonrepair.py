import json

import pytest

from gpurag.llm.jsonrepair import JSONRepairError, drop_open_string, parse_json, repair_json


def test_valid_json_is_not_marked_repaired():
    assert parse_json(' {"a": [1, 2.5, "x"], "b": null} ') == ({"a": [1, 2.5, "x"], "b": None},
                                                               False)


@pytest.mark.parametrize(("text", "expected"), [
    ('```json\n{"a": 1}\n```', {"a": 1}),
    ("Here you go:\n```\n[1, 2]\n```\nDone.", [1, 2]),
    ('{"a": [1, 2,], "b": 3,}', {"a": [1, 2], "b": 3}),
    ("{'name': 'Ada', 'ok': True, 'x': None}", {"name": "Ada", "ok": True, "x": None}),
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
    # the cut-off member is dropped (json-repair drops the emptied object too; ours kept {})
    assert value == {"entities": [{"name": "Marie Curie", "type": "person"}]}


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


def test_apostrophe_inside_single_quoted_string_is_kept():
    # json-repair keeps the closing quote too ("O'Brien'"); ours gave "O'Brien". Either way the
    # name survives, which is what the extractor needs.
    value, repaired = parse_json("{'name': 'O'Brien'}")
    assert repaired and value["name"].startswith("O'Brien")


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a": 1, "b": "cut', '{"a": 1'),
    ('[{"a": "x"}, {"b": "cu', '[{"a": "x"}, {'),
    ('{"a": "it\\"s', '{'),
    ('{"a": "done"}', '{"a": "done"}'),
])
def test_drop_open_string_cuts_before_the_open_member(text, expected):
    assert drop_open_string(text) == expected


def test_scalars_and_empty_repairs_are_errors_but_valid_scalars_pass():
    assert parse_json("42") == (42, False)
    for text in ["<html><body>502 Bad Gateway</body></html>", "I cannot do that."]:
        with pytest.raises(JSONRepairError):
            parse_json(text)
