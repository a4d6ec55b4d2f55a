"""LLM extractor: two-stage entity and relation extraction through an OpenAI-compatible server.

Stage 1 asks for entities (name, type, short description) under a JSON Schema; an optional
gleaning turn asks for missed ones. Entities are validated (non-empty, grounded in the chunk
text) and stage 2 asks for relations whose heads and tails are restricted, by an enum in the
schema, to the validated names. Each chunk runs its stages as one coroutine, and all chunks
share the client's concurrency, so the server stays saturated across stages. Each titled chunk
also mentions its title (label ``TITLE``), as with the other extractors.

Failure policy: malformed answers are repaired when possible, otherwise they are failed calls,
like HTTP errors, timeouts or responses without choices; each is logged with its chunk id and
counted by reason (``llm_failed_calls``, ``llm_failed_<reason>``, out of ``llm_calls``). When
more than ``max_failure_rate`` of a batch's calls fail, ``extract`` raises
``LLMExtractionError`` (how many failed and why), so the batch is not recorded as extracted;
below it the failures are logged and counted in the stats (the manifest's counts). A server
that stays unreachable stops the run at once (``LLMError``). Only well-formed answers are
cached, so a rerun resumes where a run stopped and sends again only the calls that failed.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from gpurag.extract import assembly
from gpurag.extract.base import MENTION_COLUMNS, RELATION_COLUMNS, Extraction, empty_frame
from gpurag.extract.triples import title_mentions
from gpurag.llm import prompts
from gpurag.llm.client import ChatRequest, ChatResult, LLMClient, LLMError
from gpurag.llm.config import LLMConfig
from gpurag.llm.jsonrepair import JSONRepairError, parse_json

log = logging.getLogger("gpurag.extract.llm")

DESCRIPTION_COLUMNS = {"chunk": "int32", "name": "string", "label": "string",
                       "description": "string"}
MAX_NAME_CHARS = 120


@dataclass
class LLMExtraction(Extraction):
    """An ``Extraction`` plus the entity descriptions the LLM wrote, one row per mention."""

    descriptions: pd.DataFrame = field(default_factory=lambda: empty_frame(DESCRIPTION_COLUMNS))

    def __post_init__(self) -> None:
        super().__post_init__()
        self.descriptions = self.descriptions.astype(DESCRIPTION_COLUMNS)[
            list(DESCRIPTION_COLUMNS)]


class MalformedAnswerError(ValueError):
    """An answer that could not be read as the expected JSON shape."""


class LLMExtractionError(LLMError):
    """Too many extraction calls failed: ``failed`` of ``calls``, counted by ``reasons``."""

    def __init__(self, message: str, *, failed: int, calls: int, reasons: Counter) -> None:
        super().__init__(message, kind="too_many_failures", reason="too many failures")
        self.failed = failed
        self.calls = calls
        self.reasons = reasons


def parse_entities(content: str, types: set[str], keep_partial: bool = True,
                   ) -> tuple[list[dict[str, str]], Counter]:
    """Entities from a stage-1 answer: ``([{name, type, description}], stats)``.

    Raises ``MalformedAnswerError`` when the answer is not JSON holding an entity list.
    """
    stats: Counter = Counter()
    value = _load(content, keep_partial, stats)
    items = value.get("entities") if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise MalformedAnswerError("no 'entities' list")
    out: list[dict[str, str]] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            stats["malformed_items"] += 1
            continue
        name = " ".join(item["name"].split())
        if not name or len(name) > MAX_NAME_CHARS or not any(ch.isalnum() for ch in name):
            stats["malformed_items"] += 1
            continue
        label = str(item.get("type") or "").strip().lower()
        if label not in types:
            stats["unknown_types"] += 1
            label = "other" if "other" in types else label
        description = item.get("description")
        description = " ".join(description.split()) if isinstance(description, str) else ""
        out.append({"name": name, "type": label, "description": description})
    return out, stats


def parse_relations(content: str, names: list[str], keep_partial: bool = True,
                    ) -> tuple[list[dict[str, Any]], Counter]:
    """Relations from a stage-2 answer, kept only between ``names`` (matched case-insensitively
    and mapped back to the listed spelling)."""
    stats: Counter = Counter()
    value = _load(content, keep_partial, stats)
    items = value.get("relations") if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise MalformedAnswerError("no 'relations' list")
    canonical = {n.casefold(): n for n in names}
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for item in items:
        if not isinstance(item, dict):
            stats["malformed_items"] += 1
            continue
        head = canonical.get(" ".join(str(item.get("head") or "").split()).casefold())
        tail = canonical.get(" ".join(str(item.get("tail") or "").split()).casefold())
        relation = " ".join(str(item.get("relation") or "").split()).lower()
        if head is None or tail is None:
            stats["relations_unknown_entity"] += 1
            continue
        if head == tail or not relation:
            stats["malformed_items"] += 1
            continue
        key = (head, relation, tail)
        if key in seen:
            continue
        seen.add(key)
        try:
            strength = float(item.get("strength", 5))
        except (TypeError, ValueError):
            strength = 5.0
        out.append({"head": head, "relation": relation, "tail": tail,
                    "weight": min(max(strength, 1.0), 10.0) / 10.0})
    return out, stats


def _load(content: str, keep_partial: bool, stats: Counter) -> Any:
    try:
        value, repaired = parse_json(content, keep_partial=keep_partial)
    except JSONRepairError as exc:
        raise MalformedAnswerError(str(exc)) from exc
    if repaired:
        stats["repaired_answers"] += 1
    return value


def find_span(name: str, text: str) -> tuple[int, int]:
    """Character span of the first case-insensitive occurrence of ``name``, or (-1, -1)."""
    return assembly.find_span(text, name, loose_spaces=True)


@dataclass
class _ChunkOut:
    mentions: list[dict[str, Any]] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)
    descriptions: list[dict[str, Any]] = field(default_factory=list)
    stats: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)  # reason label -> count
    examples: dict[str, str] = field(default_factory=dict)  # reason label -> first error


class LLMExtractor:
    """Two-stage LLM extraction (entities, then relations among them), batched and cached.

    ``require_grounded`` drops entities whose name does not occur in the chunk text.
    ``entity_max_tokens``/``relation_max_tokens`` default to the config's ``max_tokens``.
    ``batch_size`` is a hint for callers: chunks per ``extract`` call large enough that the
    server does not drain at every batch boundary.
    ``max_failure_rate`` (default: the config's) is the share of one ``extract`` call's LLM
    calls that may fail before it raises ``LLMExtractionError``.
    """

    batch_size: int = 4096
    per_chunk = True  # a chunk's answers are its own, whatever the batch

    def __init__(self, config: LLMConfig | None = None, gleaning: bool = False, *,
                 client: LLMClient | None = None,
                 entity_types: tuple[str, ...] = prompts.DEFAULT_ENTITY_TYPES,
                 require_grounded: bool = True, entity_max_tokens: int | None = None,
                 relation_max_tokens: int | None = None, progress: bool = True,
                 max_failure_rate: float | None = None) -> None:
        self.client = client or LLMClient(config)
        self.config = self.client.config
        self.gleaning = gleaning
        self.entity_types = tuple(entity_types)
        self.require_grounded = require_grounded
        self.entity_max_tokens = entity_max_tokens
        self.relation_max_tokens = relation_max_tokens
        self.progress = progress
        self.max_failure_rate = (self.config.max_failure_rate if max_failure_rate is None
                                 else float(max_failure_rate))
        if not 0.0 <= self.max_failure_rate <= 1.0:
            raise ValueError(f"max_failure_rate must be within [0, 1], got {max_failure_rate!r}")
        self._entity_schema = prompts.entity_schema(self.entity_types)

    @property
    def name(self) -> str:
        """``llm-<model>-<hash of prompts and settings>`` (keys the pipeline's caches; stable:
        the model part is ``auto`` unless a model is configured)."""
        keyed = "|".join([
            prompts.PROMPT_VERSION, "titles", prompts.ENTITY_SYSTEM, prompts.RELATION_SYSTEM,
            ",".join(self.entity_types), str(self.gleaning), str(self.require_grounded),
            str(self.entity_max_tokens), str(self.relation_max_tokens), self.config.fingerprint(),
        ])
        digest = hashlib.sha256(keyed.encode()).hexdigest()[:10]
        model = (self.config.model or "auto").replace("/", "_")
        return f"llm-{model}-{digest}"

    def extract(self, chunks: pd.DataFrame, offset: int = 0) -> LLMExtraction:
        """Extract from every chunk; rows of ``chunks`` are positions ``offset + i``."""
        return self.client.run(lambda: self.aextract(chunks, offset))

    async def aextract(self, chunks: pd.DataFrame, offset: int = 0) -> LLMExtraction:
        """Async ``extract`` (inside a running loop that owns the client session)."""
        rows = list(zip(
            chunks["chunk_id"].astype(str).tolist(),
            chunks["title"].fillna("").astype(str).tolist() if "title" in chunks
            else [""] * len(chunks),
            chunks["text"].fillna("").astype(str).tolist(),
            strict=True,
        ))
        bar = _progress(len(rows), self.progress)
        before = self.client.usage.snapshot()
        started = time.monotonic()
        last_postfix = 0.0

        async def one(position: int) -> _ChunkOut:
            nonlocal last_postfix
            chunk_id, title, text = rows[position]
            out = await self._chunk(offset + position, chunk_id, title, text)
            if bar is not None:
                bar.update(1)
                now = time.monotonic()
                if now - last_postfix > 0.5 or bar.n == bar.total:
                    last_postfix = now
                    bar.set_postfix_str(self._postfix(before, started), refresh=False)
            return out

        try:
            outs = await self.client.amap(one, range(len(rows)), self.config.concurrency * 2)
        finally:
            if bar is not None:
                bar.close()
        down = self.client.unavailable
        if down is not None:  # not a partial failure: stop, so no batch is saved half-empty
            raise LLMError(f"LLM server unreachable ({down}); answers received so far are "
                           "cached, rerun to resume", kind="unavailable")
        stats: Counter = Counter()
        failures: Counter = Counter()
        examples: dict[str, str] = {}
        mentions: list[dict[str, Any]] = []
        relations: list[dict[str, Any]] = []
        descriptions: list[dict[str, Any]] = []
        for out in outs:
            stats.update(out.stats)
            failures.update(out.failures)
            for reason, example in out.examples.items():
                examples.setdefault(reason, example)
            mentions += out.mentions
            relations += out.relations
            descriptions += out.descriptions
        self._check_failures(stats["llm_calls"], failures, examples)
        after = self.client.usage.snapshot()
        for key in ("requests", "cache_hits", "deduplicated", "prompt_tokens",
                    "completion_tokens", "retries", "errors"):
            stats[f"llm_{key}"] += int(after[key] - before[key])
        stats["chunks"] += len(rows)
        # Each titled chunk mentions its title (label TITLE), as with the other extractors, so
        # the graph's title edges link an entity to the page about it.
        titles = title_mentions(chunks, offset)
        stats["title_mentions"] += len(titles)
        return LLMExtraction(
            mentions=pd.concat([_frame(mentions, MENTION_COLUMNS), titles], ignore_index=True),
            relations=_frame(relations, RELATION_COLUMNS),
            descriptions=_frame(descriptions, DESCRIPTION_COLUMNS),
            stats=stats,
        )

    # -- one chunk -------------------------------------------------------------------------
    async def _chunk(self, position: int, chunk_id: str, title: str, text: str) -> _ChunkOut:
        out = _ChunkOut()
        if not text.strip():
            return out
        messages = prompts.entity_messages(title, text, self.entity_types)
        first = await self._ask(self._entity_request(messages, f"{chunk_id}:entities"), out)
        if first is None:
            return out
        entities, parse_stats = first.parsed
        out.stats.update(parse_stats)
        if self.gleaning:
            more = await self._ask(self._entity_request(
                prompts.gleaning_messages(messages, first.content), f"{chunk_id}:gleaning"), out)
            if more is not None:
                known = {e["name"].casefold() for e in entities}
                gleaned, parse_stats = more.parsed
                out.stats.update(parse_stats)
                for entity in gleaned:
                    if entity["name"].casefold() not in known:
                        known.add(entity["name"].casefold())
                        entities.append(entity)
                        out.stats["gleaned_entities"] += 1
        validated: dict[str, dict[str, Any]] = {}
        for entity in entities:
            start, end = find_span(entity["name"], text)
            if start < 0 and self.require_grounded:
                out.stats["ungrounded_entities"] += 1
                continue
            key = entity["name"].casefold()
            if key in validated:
                continue
            validated[key] = {**entity, "start": start, "end": end}
        for entity in validated.values():
            out.mentions.append({"chunk": position, "name": entity["name"],
                                 "label": entity["type"], "start": entity["start"],
                                 "end": entity["end"]})
            out.descriptions.append({"chunk": position, "name": entity["name"],
                                     "label": entity["type"],
                                     "description": entity["description"]})
        out.stats["entities"] += len(validated)
        names = [e["name"] for e in validated.values()]
        if len(names) < 2:
            return out
        answer = await self._ask(ChatRequest(
            prompts.relation_messages(title, text, names), prompts.relation_schema(names),
            "relations", self.relation_max_tokens, tag=f"{chunk_id}:relations",
            validate=lambda answer: parse_relations(answer.content, names,
                                                    keep_partial=not answer.truncated)), out)
        if answer is None:
            return out
        found, parse_stats = answer.parsed
        out.stats.update(parse_stats)
        out.relations += [{"chunk": position, **r} for r in found]
        out.stats["relations"] += len(found)
        return out

    def _check_failures(self, calls: int, failures: Counter, examples: dict[str, str]) -> None:
        """Raise ``LLMExtractionError`` when more than ``max_failure_rate`` of ``calls`` failed;
        otherwise log the failures (they stay counted in the stats)."""
        failed = sum(failures.values())
        if not failed:
            return
        why = ", ".join(f"{reason}: {n}" for reason, n in failures.most_common())
        counts = f"{failed} of {calls} LLM extraction calls failed ({why})"
        if failed <= self.max_failure_rate * calls:
            log.warning("%s; within the %.3g%% allowed (max_failure_rate), the chunks they "
                        "belong to keep what the other calls found", counts,
                        100 * self.max_failure_rate)
            return
        first = "; ".join(examples[reason] for reason in failures)
        raise LLMExtractionError(
            f"{counts}: more than the {100 * self.max_failure_rate:.3g}% allowed "
            "(GPURAG_LLM_MAX_FAILURE_RATE or --llm-max-failure-rate). First of each kind: "
            f"{first}. Answers received are cached: rerun the same command to resume "
            "(only the failed calls are sent again).",
            failed=failed, calls=calls, reasons=failures)

    async def _ask(self, request: ChatRequest, out: _ChunkOut) -> ChatResult | None:
        """Send one request; a failed call is counted by reason and gives ``None``."""
        out.stats["llm_calls"] += 1
        try:
            result = await self.client.acomplete(request)
        except LLMError as exc:
            out.stats["llm_failed_calls"] += 1
            out.stats[f"llm_failed_{_slug(exc.reason)}"] += 1
            out.failures[exc.reason] += 1
            out.examples.setdefault(exc.reason, f"{request.tag}: {str(exc)[:200]}")
            if exc.kind == "malformed":
                out.stats["malformed_answers"] += 1
                log.warning("malformed answer to %s (%s): %.120r", request.tag, exc,
                            exc.content or "")
            else:
                log.debug("LLM call %s failed: %s", request.tag, exc)
            return None
        if result.truncated:
            out.stats["truncated_answers"] += 1
        return result

    def _entity_request(self, messages: list[dict[str, str]], tag: str) -> ChatRequest:
        types = set(self.entity_types)
        return ChatRequest(messages, self._entity_schema, "entities", self.entity_max_tokens,
                           tag=tag, validate=lambda answer: parse_entities(
                               answer.content, types, keep_partial=not answer.truncated))

    def _postfix(self, before: dict[str, float], started: float) -> str:
        now = self.client.usage.snapshot()
        elapsed = max(time.monotonic() - started, 1e-9)
        tin = (now["prompt_tokens"] - before["prompt_tokens"]) / elapsed
        tout = (now["completion_tokens"] - before["completion_tokens"]) / elapsed
        hits = int(now["cache_hits"] - before["cache_hits"])
        errors = int(now["errors"] - before["errors"])
        return f"in {tin:,.0f} tok/s, out {tout:,.0f} tok/s, cache hits {hits}, errors {errors}"


def _slug(reason: str) -> str:
    """``"HTTP 500"`` -> ``"http_500"`` (a stats key)."""
    return re.sub(r"[^a-z0-9]+", "_", reason.lower()).strip("_") or "other"


def _frame(rows: list[dict[str, Any]], columns: dict[str, str]) -> pd.DataFrame:
    if not rows:
        return empty_frame(columns)
    return pd.DataFrame(rows, columns=list(columns)).astype(columns)


def _progress(total: int, enabled: bool) -> Any:
    """A tqdm bar (chunks/s and ETA; tokens/s and cache hits as postfix); off when disabled
    or ``GPURAG_PROGRESS=0``."""
    from gpurag.settings import current

    if not enabled or current().progress is False:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # progress is optional
        return None
    return tqdm(total=total, unit="chunk", desc="extract (llm)", dynamic_ncols=True,
                file=sys.stderr, leave=False, smoothing=0.1)
