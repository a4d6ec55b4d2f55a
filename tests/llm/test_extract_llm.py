"""The LLM extractor: real server for the pipeline, a garbage double for malformed answers."""

import json
import logging

import httpx
import pandas as pd
import pytest

from gpurag.extract.base import MENTION_COLUMNS, RELATION_COLUMNS, Extraction, Extractor
from gpurag.extract.llm import (
    LLMExtractionError,
    LLMExtractor,
    find_span,
    parse_entities,
    parse_relations,
)
from gpurag.llm.client import LLMClient, LLMError
from gpurag.llm.config import LLMConfig

CHUNKS = pd.DataFrame({
    "chunk_id": ["c-curie", "c-paris"],
    "title": ["Marie Curie", "Paris"],
    "text": ["Marie Curie was born in Warsaw. She married Pierre Curie in Paris.",
             "Paris is the capital of France. The Eiffel Tower is in Paris."],
})
TYPES = {"person", "location", "other"}


def test_parse_entities_validates_items():
    content = json.dumps({"entities": [
        {"name": "  Marie   Curie ", "type": "Person", "description": "A  physicist."},
        {"name": "", "type": "person"}, {"type": "person"}, "junk", {"name": "!!!"},
        {"name": "Warsaw", "type": "city"}]})
    found, stats = parse_entities(content, TYPES)
    assert found == [{"name": "Marie Curie", "type": "person", "description": "A physicist."},
                     {"name": "Warsaw", "type": "other", "description": ""}]
    assert stats["malformed_items"] == 4 and stats["unknown_types"] == 1


def test_parse_relations_keeps_only_listed_entities():
    content = ('{"relations": [{"head": "marie curie", "relation": "Born In", "tail": "Warsaw", '
               '"strength": 9}, {"head": "Marie Curie", "relation": "x", "tail": "Mars"}, '
               '{"head": "Warsaw", "relation": "is", "tail": "Warsaw"}, '
               '{"head": "Marie Curie", "relation": "born in", "tail": "Warsaw", "strength": 3}]')
    found, stats = parse_relations(content, ["Marie Curie", "Warsaw"])
    assert found == [{"head": "Marie Curie", "relation": "born in", "tail": "Warsaw",
                      "weight": 0.9}]
    assert stats["relations_unknown_entity"] == 1 and stats["repaired_answers"] == 1


def test_too_many_malformed_answers_stop_extraction_saying_why():
    client = LLMClient(LLMConfig(url="http://double.test", model="m", cache_dir=None),
                       transport=httpx.MockTransport(garbage))
    with pytest.raises(LLMExtractionError) as info:
        LLMExtractor(client=client, progress=False).extract(CHUNKS)  # default: 5% may fail
    err = info.value
    assert (err.failed, err.calls) == (2, 3)
    assert err.reasons == {"malformed JSON": 1, "answer off schema": 1}
    assert "2 of 3" in str(err) and "c-curie:entities" in str(err) and "rerun" in str(err)


def test_find_span_tolerates_case_and_spacing():
    assert find_span("marie curie", "Dr. Marie  Curie won") == (4, 16)
    assert find_span("Mars", "no such planet") == (-1, -1)


def garbage(req: httpx.Request) -> httpx.Response:
    """Prose for the Curie chunk; a truncated entity list for every other request (so the
    Paris chunk's stage 2 gets an answer without a relation list)."""
    text = json.loads(req.content)["messages"][-1]["content"]
    content = "I cannot do that." if "Warsaw" in text else (
        '{"entities": [{"name": "Paris", "type": "location", "description": "City."}, '
        '{"name": "Eiffel Tower", "type": "other", "description": "Tower."}, {"name": "Fr')
    return httpx.Response(200, json={"choices": [{"message": {"content": content},
                                                  "finish_reason": "length"}]})


def test_malformed_answers_are_counted_and_logged_below_the_failure_threshold(caplog):
    client = LLMClient(LLMConfig(url="http://double.test", model="m", cache_dir=None),
                       transport=httpx.MockTransport(garbage))
    extractor = LLMExtractor(client=client, progress=False, max_failure_rate=1.0)
    with caplog.at_level(logging.WARNING, logger="gpurag.extract.llm"):
        result = extractor.extract(CHUNKS, offset=10)
    assert result.stats["malformed_answers"] == 2  # c-curie stage 1, c-paris stage 2
    assert result.stats["llm_failed_calls"] == 2 and result.stats["llm_calls"] == 3
    assert result.stats["llm_failed_malformed_json"] == 1  # prose
    assert result.stats["llm_failed_answer_off_schema"] == 1  # JSON, but no relation list
    assert "c-curie:entities" in caplog.text and "2 of 3 LLM extraction calls failed" in caplog.text
    # the entity cut off mid-name is dropped, the complete ones are kept
    found = result.mentions[result.mentions["label"] != "TITLE"]
    assert found["name"].tolist() == ["Paris", "Eiffel Tower"]
    assert found["chunk"].tolist() == [11, 11]


def test_every_titled_chunk_mentions_its_title_even_when_its_calls_failed():
    client = LLMClient(LLMConfig(url="http://double.test", model="m", cache_dir=None),
                       transport=httpx.MockTransport(garbage))
    chunks = pd.concat([CHUNKS, pd.DataFrame({"chunk_id": ["c-none"], "title": [None],
                                              "text": ["Untitled text about Paris."]})],
                       ignore_index=True)
    result = LLMExtractor(client=client, progress=False, max_failure_rate=1.0).extract(
        chunks, offset=10)
    titles = result.mentions[result.mentions["label"] == "TITLE"]
    # c-curie's entity call failed: its page still names Marie Curie (the untitled chunk
    # gets no title mention)
    assert list(zip(titles["chunk"], titles["name"], strict=True)) == [
        (10, "Marie Curie"), (11, "Paris")]
    assert titles[["start", "end"]].values.tolist() == [[0, 11], [0, 5]]
    assert result.stats["title_mentions"] == 2


@pytest.mark.llm
def test_two_stage_extraction_against_real_server_and_cached_rerun(llm_config):
    config = llm_config.replace(max_tokens=40)
    extractor = LLMExtractor(config, gleaning=True, progress=False)
    assert isinstance(extractor, Extractor) and extractor.name.startswith("llm-")
    result = extractor.extract(CHUNKS, offset=5)
    assert isinstance(result, Extraction)
    assert dict(result.mentions.dtypes.astype(str)) == MENTION_COLUMNS
    assert dict(result.relations.dtypes.astype(str)) == RELATION_COLUMNS
    stats = result.stats
    assert stats["chunks"] == 2 and stats["llm_requests"] >= 2 and stats["llm_errors"] == 0
    assert (result.mentions["label"] != "TITLE").any(), stats
    assert set(result.mentions["chunk"]) <= {5, 6}
    titles = result.mentions[result.mentions["label"] == "TITLE"]
    assert list(zip(titles["chunk"], titles["name"], strict=True)) == [
        (5, "Marie Curie"), (6, "Paris")]
    for row in result.mentions.itertuples():
        text = CHUNKS["text"].iloc[row.chunk - 5]
        assert text[row.start:row.end].lower() == row.name.lower()  # grounded spans
    found = result.mentions[result.mentions["label"] != "TITLE"]
    names = {(r.chunk, r.name) for r in found.itertuples()}
    for rel in result.relations.itertuples():  # relations only between validated entities
        assert (rel.chunk, rel.head) in names and (rel.chunk, rel.tail) in names
        assert 0 < rel.weight <= 1
    assert len(result.descriptions) == len(found)
    # stage 1 and gleaning for each chunk, stage 2 where two or more entities were validated
    expected_calls = 4 + sum(1 for c in (5, 6) if (found["chunk"] == c).sum() >= 2)
    assert stats["llm_requests"] == expected_calls

    rerun = LLMExtractor(config, gleaning=True, progress=False).extract(CHUNKS, offset=5)
    assert rerun.stats["llm_requests"] == 0
    assert rerun.stats["llm_cache_hits"] == stats["llm_requests"]
    pd.testing.assert_frame_equal(rerun.mentions, result.mentions)
    pd.testing.assert_frame_equal(rerun.relations, result.relations)


@pytest.mark.llm
def test_truncated_unstructured_answers_do_not_stop_the_run(llm_config):
    """Schema off and 10-token answers: every answer is cut off; with every failure allowed
    the run completes, and the only failures are unreadable answers (none is cached)."""
    config = llm_config.replace(max_tokens=10, structured="off")
    extractor = LLMExtractor(config, progress=False, max_failure_rate=1.0)
    result = extractor.extract(CHUNKS)
    stats = result.stats
    assert stats["chunks"] == 2 and stats["llm_failed_calls"] == stats["malformed_answers"]
    assert len(extractor.client.cache) == stats["llm_requests"] - stats["malformed_answers"]
    assert stats["llm_requests"] >= 2 and stats["truncated_answers"] >= 1
    parsed = stats["entities"] + stats["malformed_answers"] + stats["repaired_answers"]
    assert parsed > 0


def test_unreachable_server_stops_extraction_instead_of_saving_empty_chunks(dead_url):
    config = LLMConfig(url=dead_url, model="m", cache_dir=None, max_retries=1, backoff_s=0.01)
    many = pd.concat([CHUNKS] * 20, ignore_index=True)
    with pytest.raises(LLMError) as info:
        LLMExtractor(config, progress=False).extract(many)
    assert info.value.kind == "unavailable" and "rerun to resume" in str(info.value)


@pytest.mark.llm
def test_rerun_after_garbage_answers_asks_the_real_server_again(llm_config):
    """Issue 17 item 4: garbage answers are not cached, so a rerun on the same cache against
    a good server sends every request again and builds entities."""
    one = CHUNKS.iloc[:1]
    config = llm_config.replace(max_tokens=96)
    config = config.replace(model=LLMClient(config).list_models()[0])  # same cache keys

    def prose(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": "No JSON here."},
                                                      "finish_reason": "stop"}]})

    bad = LLMClient(config, transport=httpx.MockTransport(prose))
    with pytest.raises(LLMExtractionError):
        LLMExtractor(client=bad, progress=False).extract(one)
    assert len(bad.cache) == 0
    bad.close()
    result = LLMExtractor(config, progress=False, max_failure_rate=1.0).extract(one)
    assert result.stats["llm_requests"] >= 1 and result.stats["llm_cache_hits"] == 0
    assert len(result.mentions) >= 1, result.stats
