import pytest

from gpurag.llm.metrics import (
    answer_scores,
    exact_match,
    f1_score,
    gold_answers,
    normalize_answer,
)


def test_normalization_is_squad_style():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("An apple, a pear") == "apple pear"


def test_exact_match_uses_aliases():
    assert exact_match("the USA", ["United States", "USA"]) == 1.0
    assert exact_match("US", ["United States", "USA"]) == 0.0
    assert exact_match("Paris.", "paris") == 1.0


def test_f1_is_token_overlap_best_over_golds():
    assert f1_score("Marie Curie", "Marie Skłodowska Curie") == pytest.approx(0.8)
    assert f1_score("Warsaw", ["Kraków", "Warsaw, Poland"]) == pytest.approx(2 / 3)
    assert f1_score("", "") == 1.0
    assert f1_score("x", "") == 0.0


def test_gold_answers_and_batch_scores():
    q = {"answer": "1867", "answer_aliases": ["1867 AD", "1867"]}
    assert gold_answers(q) == ["1867", "1867 AD"]
    scores = answer_scores(["1867", "Paris"], [gold_answers(q), ["London"]])
    assert scores == {"em": 0.5, "f1": 0.5, "n": 2}
    assert answer_scores([], []) == {"em": 0.0, "f1": 0.0, "n": 0}
    with pytest.raises(ValueError):
        answer_scores(["a"], [])
