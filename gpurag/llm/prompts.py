"""Every prompt and output schema gpurag sends to an LLM, kept apart from the code.

Written for a compact (~7B) instruct model: short numbered rules, one worked example, JSON
only. The instructions and the example sit in the system message, identical for every call of
a kind, and the variable part comes last, so the server's prefix cache shares the KV cache of
the common prefix across all calls. Any change here changes the cache keys (the messages are
part of them), so old cached answers are not reused for new prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PROMPT_VERSION = "1"

DEFAULT_ENTITY_TYPES: tuple[str, ...] = (
    "person", "organization", "location", "event", "work", "date", "concept", "other",
)

# -- extraction, stage 1: entities ------------------------------------------------------------

ENTITY_SYSTEM = """\
You extract entities from a text to build a knowledge graph.
Rules:
1. List each specific person, organization, location, event, work (book, film, song, \
product), date and notable concept named in the text, once.
2. "name": the entity as written in the text, in its fullest form ("Marie Curie", not "she" \
or "Curie").
3. "type": one of {types}.
4. "description": one short sentence saying who or what the entity is, using only the text.
5. No pronouns, no generic words, nothing that is not in the text.
Answer with JSON only, in this form:
{{"entities": [{{"name": "...", "type": "...", "description": "..."}}]}}

Example
Text:
Title: Lise Meitner
Lise Meitner was an Austrian physicist. In 1938 she worked with Otto Hahn at the Kaiser \
Wilhelm Institute in Berlin.
Answer:
{{"entities": [\
{{"name": "Lise Meitner", "type": "person", "description": "Austrian physicist."}}, \
{{"name": "Otto Hahn", "type": "person", "description": "Worked with Lise Meitner in 1938."}}, \
{{"name": "Kaiser Wilhelm Institute", "type": "organization", "description": "Institute in \
Berlin where Meitner and Hahn worked."}}, \
{{"name": "Berlin", "type": "location", "description": "City of the Kaiser Wilhelm \
Institute."}}, \
{{"name": "1938", "type": "date", "description": "Year Meitner worked with Hahn."}}]}}"""

CHUNK_USER = """\
Text:
Title: {title}
{text}
Answer:"""

GLEANING_USER = """\
Some entities of the text may be missing from your answer. List only the entities you \
missed, in the same JSON form. If none are missing, answer {"entities": []}."""

# -- extraction, stage 2: relations between validated entities ---------------------------------

RELATION_SYSTEM = """\
You extract relations between the listed entities of a text to build a knowledge graph.
Rules:
1. "head" and "tail" must be copied exactly from the entity list.
2. "relation": a short verb phrase in lower case ("born in", "member of", "directed").
3. "strength": 1 to 10, how clearly the text states the relation.
4. Only relations the text states. No relation of an entity with itself.
Answer with JSON only, in this form:
{"relations": [{"head": "...", "relation": "...", "tail": "...", "strength": 5}]}

Example
Text:
Title: Lise Meitner
Lise Meitner was an Austrian physicist. In 1938 she worked with Otto Hahn at the Kaiser \
Wilhelm Institute in Berlin.
Entities: Lise Meitner | Otto Hahn | Kaiser Wilhelm Institute | Berlin | 1938
Answer:
{"relations": [\
{"head": "Lise Meitner", "relation": "worked with", "tail": "Otto Hahn", "strength": 9}, \
{"head": "Lise Meitner", "relation": "worked at", "tail": "Kaiser Wilhelm Institute", \
"strength": 9}, \
{"head": "Kaiser Wilhelm Institute", "relation": "located in", "tail": "Berlin", \
"strength": 8}, \
{"head": "Lise Meitner", "relation": "worked with Hahn in", "tail": "1938", "strength": 7}]}"""

RELATION_USER = """\
Text:
Title: {title}
{text}
Entities: {entities}
Answer:"""

# -- descriptions -----------------------------------------------------------------------------

MERGE_SYSTEM = """\
You merge several descriptions of one entity into one description.
Rules:
1. At most {max_words} words, third person, plain sentences.
2. Keep every distinct fact; drop repetitions; where descriptions disagree, say so briefly.
3. Use only the descriptions given.
Answer with JSON only: {{"description": "..."}}"""

MERGE_USER = """\
Entity: {name} ({label})
Descriptions:
{descriptions}
Answer:"""

# -- community reports ------------------------------------------------------------------------

REPORT_SYSTEM = """\
You write a report about one community of a knowledge graph: a group of closely related \
entities, their relations and, for large communities, reports on their sub-communities.
Rules:
1. "title": a short specific name for the community (its key entities).
2. "summary": 2 to 4 sentences on what the community is about and how its entities relate.
3. "rating": 0 to 10, how important the community is for understanding the collection.
4. "findings": up to 5 key facts, each with a one-line "summary" and a 1 to 3 sentence \
"explanation" grounded in the data.
5. Use only the data given.
Answer with JSON only:
{"title": "...", "summary": "...", "rating": 5, \
"findings": [{"summary": "...", "explanation": "..."}]}"""

REPORT_USER = """\
{data}
Answer:"""

# -- global search (map-reduce over reports) --------------------------------------------------

MAP_SYSTEM = """\
You help answer a question using only the community reports given.
Rules:
1. List the key points from the reports that help answer the question, each in 1 or 2 \
sentences.
2. "score": 0 to 100, how much the point helps answer the question (0: not at all).
3. If the reports do not help, answer {"points": []}.
Answer with JSON only: {"points": [{"description": "...", "score": 50}]}"""

MAP_USER = """\
Reports:
{reports}

Question: {question}
Answer:"""

REDUCE_SYSTEM = """\
You answer a question from key points that analysts found in a document collection, most \
helpful first.
Rules:
1. Use only the points; combine them into one clear answer.
2. If the points do not answer the question, say that you do not know.
Answer with JSON only: {"answer": "..."}"""

REDUCE_USER = """\
Points:
{points}

Question: {question}
Answer:"""

# -- answers from retrieved context -----------------------------------------------------------

ANSWER_SYSTEM = """\
You answer questions from the context given. Passages in the context start with their id, \
like [P:12].
Rules:
1. Answer with a short phrase (a name, a date, a number or a few words), not a sentence.
2. "citations": the ids of the passages you used, like "12".
3. If the context does not contain the answer, answer "unknown" with no citations.
Answer with JSON only: {"answer": "...", "citations": ["..."]}"""

ANSWER_USER = """\
Context:
{context}

Question: {question}
Answer:"""


# -- output schemas ---------------------------------------------------------------------------

def _string() -> dict[str, Any]:
    return {"type": "string"}


def entity_schema(types: Sequence[str] = DEFAULT_ENTITY_TYPES) -> dict[str, Any]:
    """Stage 1: ``{"entities": [{"name", "type" (enum), "description"}]}``."""
    item = {
        "type": "object",
        "properties": {
            "name": _string(),
            "type": {"type": "string", "enum": list(types)},
            "description": _string(),
        },
        "required": ["name", "type", "description"],
    }
    return {
        "type": "object",
        "properties": {"entities": {"type": "array", "items": item}},
        "required": ["entities"],
    }


def relation_schema(names: Sequence[str]) -> dict[str, Any]:
    """Stage 2: heads and tails restricted to ``names`` (the validated entities) by enum."""
    names = list(dict.fromkeys(names))
    endpoint = {"type": "string", "enum": names}
    item = {
        "type": "object",
        "properties": {
            "head": endpoint,
            "relation": _string(),
            "tail": endpoint,
            "strength": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["head", "relation", "tail", "strength"],
    }
    return {
        "type": "object",
        "properties": {"relations": {"type": "array", "items": item}},
        "required": ["relations"],
    }


MERGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"description": _string()},
    "required": ["description"],
}

REPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": _string(),
        "summary": _string(),
        "rating": {"type": "number", "minimum": 0, "maximum": 10},
        "findings": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"summary": _string(), "explanation": _string()},
                "required": ["summary", "explanation"],
            },
        },
    },
    "required": ["title", "summary", "rating", "findings"],
}

MAP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "points": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "description": _string(),
                    "score": {"type": "integer", "minimum": 0, "maximum": 100},
                },
                "required": ["description", "score"],
            },
        }
    },
    "required": ["points"],
}

REDUCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": _string()},
    "required": ["answer"],
}


def answer_schema(passage_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """``{"answer", "citations"}``; citations restricted to ``passage_ids`` when given."""
    cite: dict[str, Any] = {"type": "string"}
    if passage_ids:
        cite = {"type": "string", "enum": [str(p) for p in dict.fromkeys(passage_ids)]}
    return {
        "type": "object",
        "properties": {"answer": _string(), "citations": {"type": "array", "items": cite}},
        "required": ["answer", "citations"],
    }


# -- message builders -------------------------------------------------------------------------

def entity_messages(title: str, text: str,
                    types: Sequence[str] = DEFAULT_ENTITY_TYPES) -> list[dict[str, str]]:
    """Stage-1 messages for one chunk."""
    return [
        {"role": "system", "content": ENTITY_SYSTEM.format(types=", ".join(types))},
        {"role": "user", "content": CHUNK_USER.format(title=title, text=text)},
    ]


def gleaning_messages(first: list[dict[str, str]], answer: str) -> list[dict[str, str]]:
    """The stage-1 conversation continued with a request for missed entities."""
    return [*first, {"role": "assistant", "content": answer},
            {"role": "user", "content": GLEANING_USER}]


def relation_messages(title: str, text: str, names: Sequence[str]) -> list[dict[str, str]]:
    """Stage-2 messages for one chunk and its validated entity names."""
    return [
        {"role": "system", "content": RELATION_SYSTEM},
        {"role": "user", "content": RELATION_USER.format(title=title, text=text,
                                                         entities=" | ".join(names))},
    ]


def merge_messages(name: str, label: str, descriptions: Sequence[str],
                   max_words: int = 80) -> list[dict[str, str]]:
    """Messages that merge several descriptions of one entity."""
    return [
        {"role": "system", "content": MERGE_SYSTEM.format(max_words=max_words)},
        {"role": "user", "content": MERGE_USER.format(
            name=name, label=label or "entity",
            descriptions="\n".join(f"- {d}" for d in descriptions))},
    ]


def report_messages(data: str) -> list[dict[str, str]]:
    """Messages that write one community report from its data tables."""
    return [{"role": "system", "content": REPORT_SYSTEM},
            {"role": "user", "content": REPORT_USER.format(data=data)}]


def map_messages(reports: str, question: str) -> list[dict[str, str]]:
    """Global search map step: key points with 0-100 scores from a batch of reports."""
    return [{"role": "system", "content": MAP_SYSTEM},
            {"role": "user", "content": MAP_USER.format(reports=reports, question=question)}]


def reduce_messages(points: str, question: str) -> list[dict[str, str]]:
    """Global search reduce step: one answer from the ranked points."""
    return [{"role": "system", "content": REDUCE_SYSTEM},
            {"role": "user", "content": REDUCE_USER.format(points=points, question=question)}]


def answer_messages(context: str, question: str) -> list[dict[str, str]]:
    """Messages that answer one question from an assembled context."""
    return [{"role": "system", "content": ANSWER_SYSTEM},
            {"role": "user", "content": ANSWER_USER.format(context=context, question=question)}]
