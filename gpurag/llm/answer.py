"""Answers from retrieved context: context assembly within a token budget, batched answering."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from gpurag.llm import prompts
from gpurag.llm.client import ChatRequest, LLMClient, LLMError
from gpurag.llm.jsonrepair import JSONRepairError, parse_json

log = logging.getLogger("gpurag.llm.answer")

CountTokens = Callable[[list[str]], list[int]]

#: Largest share of the budget each graph section may take; passages get the rest.
DEFAULT_SHARES = {"entities": 0.15, "relations": 0.15, "paths": 0.10}
MIN_PARTIAL_TOKENS = 48


def approx_tokens(texts: list[str]) -> list[int]:
    """Rough token counts (about 4 characters a token) when no tokenizer is at hand."""
    return [len(t) // 4 + 1 for t in texts]


def records(rows: Any) -> list[dict[str, Any]]:
    """Rows as dicts, from a DataFrame, a list of dicts or a list of objects with attributes."""
    if rows is None:
        return []
    if isinstance(rows, pd.DataFrame):
        return rows.to_dict("records")
    out = []
    for row in rows:
        if isinstance(row, dict):
            out.append(row)
        elif dataclasses.is_dataclass(row) and not isinstance(row, type):
            out.append(dataclasses.asdict(row))
        elif hasattr(row, "__dict__"):
            out.append(dict(vars(row)))
        elif hasattr(row, "_asdict"):
            out.append(row._asdict())
        else:
            out.append({"text": str(row)})
    return out


def _first(row: dict[str, Any], *keys: str, default: Any = "") -> Any:
    for key in keys:
        value = row.get(key)
        if value is not None and not (isinstance(value, float) and value != value):
            return value
    return default


def build_context(passages: Any, entities: Any = None, relations: Any = None,
                  paths: Iterable[Any] | None = None, token_budget: int = 3000,
                  count_tokens: CountTokens | None = None,
                  shares: dict[str, float] | None = None) -> tuple[str, list[str]]:
    """Assemble the context for one question; return ``(context_text, cited_passage_ids)``.

    Inputs are ranked best first. ``passages``: rows with ``id`` (or ``chunk_id``/``passage_id``),
    ``title``, ``text``; ``entities``: ``name``, ``label`` (or ``type``), ``description``;
    ``relations``: ``head``, ``relation``, ``tail``; ``paths``: strings or sequences of names
    and relations. Entities, relations and paths each take at most their share of
    ``token_budget`` (``DEFAULT_SHARES``); passages fill the rest, the last one cut to fit.
    Passages are marked ``[P:id]`` so answers can cite them. ``count_tokens`` counts a batch of
    texts (``Embedder.count_tokens`` fits); the default is ``approx_tokens``.
    """
    count = count_tokens or approx_tokens
    caps = {**DEFAULT_SHARES, **(shares or {})}
    ent_lines = []
    for row in records(entities):
        name = _first(row, "name", "entity")
        if not name:
            continue
        label = _first(row, "label", "type")
        desc = _first(row, "description")
        ent_lines.append(f"- {name}" + (f" ({label})" if label else "") +
                         (f": {desc}" if desc else ""))
    rel_lines = []
    for row in records(relations):
        head, rel, tail = (_first(row, "head"), _first(row, "relation"), _first(row, "tail"))
        if head and tail:
            rel_lines.append(f"- {head} --{rel or 'related to'}--> {tail}")
    path_lines = []
    for path in paths or []:
        text = path if isinstance(path, str) else " -> ".join(str(p) for p in path)
        if text:
            path_lines.append(f"- {text}")
    psg: list[tuple[str, str]] = []
    for row in records(passages):
        pid = str(_first(row, "id", "chunk_id", "passage_id", "doc_id"))
        title = _first(row, "title")
        text = " ".join(str(_first(row, "text")).split())
        psg.append((pid, f"[P:{pid}] {title}\n{text}" if title else f"[P:{pid}] {text}"))

    headers = ["Entities:", "Relations:", "Paths:", "Passages:"]
    all_lines = ent_lines + rel_lines + path_lines + [block for _, block in psg] + headers
    sizes = count(all_lines)
    it = iter(sizes)
    ent_sizes = [next(it) for _ in ent_lines]
    rel_sizes = [next(it) for _ in rel_lines]
    path_sizes = [next(it) for _ in path_lines]
    psg_sizes = [next(it) for _ in psg]
    head_sizes = dict(zip(headers, [next(it) for _ in headers], strict=True))

    sections: list[str] = []
    used = 0
    for header, lines, line_sizes, share in (
        ("Entities:", ent_lines, ent_sizes, caps["entities"]),
        ("Relations:", rel_lines, rel_sizes, caps["relations"]),
        ("Paths:", path_lines, path_sizes, caps["paths"]),
    ):
        cap = int(token_budget * share)
        taken: list[str] = []
        spent = head_sizes[header]
        for line, size in zip(lines, line_sizes, strict=True):
            if spent + size > cap:
                break
            taken.append(line)
            spent += size
        if taken:
            sections.append("\n".join([header, *taken]))
            used += spent
    left = token_budget - used - head_sizes["Passages:"]
    cited: list[str] = []
    blocks: list[str] = []
    for (pid, block), size in zip(psg, psg_sizes, strict=True):
        if size <= left:
            blocks.append(block)
            cited.append(pid)
            left -= size
            continue
        if left >= MIN_PARTIAL_TOKENS:
            keep = max(1, int(len(block) * left / max(size, 1) * 0.95))
            blocks.append(block[:keep].rstrip() + " ...")
            cited.append(pid)
        break
    if blocks:
        sections.append("Passages:\n" + "\n\n".join(blocks))
    return "\n\n".join(sections), cited


@dataclass
class Answer:
    """One generated answer. ``citations`` are passage ids the model cited (among those in
    its context); ``error`` is set when the call failed or the answer was unreadable."""

    question: str
    answer: str
    citations: list[str] = field(default_factory=list)
    context_ids: list[str] = field(default_factory=list)
    error: str | None = None
    cached: bool = False


_CITE = re.compile(r"\[P:([^\]]+)\]")


def answer_requests(questions: Sequence[str], contexts: Sequence[str | tuple[str, list[str]]],
                    max_tokens: int = 96) -> list[ChatRequest]:
    """The batch of answer requests (one per question)."""
    if len(questions) != len(contexts):
        raise ValueError("questions and contexts differ in length")
    out = []
    for i, (question, ctx) in enumerate(zip(questions, contexts, strict=True)):
        text, ids = (ctx, _CITE.findall(ctx)) if isinstance(ctx, str) else ctx
        out.append(ChatRequest(prompts.answer_messages(text, question),
                               prompts.answer_schema(ids or None), "answer", max_tokens,
                               tag=f"answer:{i}", validate=_answer_check(list(ids))))
    return out


def _answer_check(allowed: list[str]) -> Callable[[Any], tuple[str, list[str]]]:
    """A ``ChatRequest.validate``: ``(answer, citations)``, or ``ValueError`` when the answer is
    not the expected JSON (so it is not cached)."""

    def check(result: Any) -> tuple[str, list[str]]:
        text, cites, error = parse_answer(result.content, allowed)
        if error:
            raise ValueError(error)
        return text, cites

    return check


def parse_answer(content: str, allowed: Sequence[str]) -> tuple[str, list[str], str | None]:
    """``(answer, citations, error)`` from an answer's text; tolerant of broken JSON."""
    try:
        value, _ = parse_json(content)
    except JSONRepairError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("answer"), (str, int, float)):
        raw_cites = value.get("citations") or []
        cites = [str(c).removeprefix("P:").strip("[] ") for c in raw_cites
                 if isinstance(c, (str, int))] if isinstance(raw_cites, list) else []
        allowed_set = set(allowed)
        cites = [c for c in dict.fromkeys(cites) if not allowed_set or c in allowed_set]
        return str(value["answer"]).strip(), cites, None
    text = content.strip()
    if not text:
        return "", [], "empty answer"
    return text.splitlines()[0][:300], _CITE.findall(text), "malformed answer (kept as text)"


async def aanswer_questions(client: LLMClient, questions: Sequence[str],
                            contexts: Sequence[str | tuple[str, list[str]]],
                            max_tokens: int = 96) -> list[Answer]:
    """Async ``answer_questions``."""
    requests = answer_requests(questions, contexts, max_tokens)
    results = await client.acomplete_batch(requests)
    answers = []
    for question, ctx, result in zip(questions, contexts, results, strict=True):
        ids = _CITE.findall(ctx) if isinstance(ctx, str) else list(ctx[1])
        if isinstance(result, LLMError) and result.kind == "malformed":
            text, cites, error = parse_answer(result.content or "", ids)
            log.warning("answer to %r: %s", question[:60], error)
            answers.append(Answer(question, text, cites, ids, error=error))
            continue
        if isinstance(result, LLMError):
            answers.append(Answer(question, "", [], ids, error=str(result)))
            continue
        text, cites = result.parsed
        answers.append(Answer(question, text, cites, ids, cached=result.cached))
    return answers


def answer_questions(client: LLMClient, questions: Sequence[str],
                     contexts: Sequence[str | tuple[str, list[str]]],
                     max_tokens: int = 96) -> list[Answer]:
    """Answer every question from its context in one batch.

    ``contexts[i]`` is ``build_context``'s ``(text, cited_ids)`` or a plain string (ids are
    then read from its ``[P:id]`` marks). A failed call gives an ``Answer`` with ``error`` set.
    """
    return client.run(lambda: aanswer_questions(client, questions, contexts, max_tokens))
