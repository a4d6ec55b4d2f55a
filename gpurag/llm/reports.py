"""Community reports (bottom-up over Leiden levels, eager or lazy) and description merging.

``communities`` is a DataFrame ``(node, level, community, parent)``: one row per node and
level; ``node`` matches ``entities[entity_key]``; level 0 is the coarsest; ``parent`` is the
community at ``level - 1`` that contains it (-1 or NaN at level 0). Reports are written finest
level first, so a community too large for the token budget is described through its
sub-communities' reports, as GraphRAG does. Every level is one batch of LLM calls.

Lazy mode writes reports only for the communities asked for (plus the sub-communities a large
one needs). Reports are cached twice: in memory by ``LazyReports`` and, across runs, by the
LLM response cache, whose key holds the community's content, so an unchanged community is
never paid for twice.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from gpurag.llm import prompts
from gpurag.llm.answer import CountTokens, approx_tokens
from gpurag.llm.client import ChatRequest, LLMClient, LLMError
from gpurag.llm.jsonrepair import JSONRepairError, parse_json

log = logging.getLogger("gpurag.llm.reports")

REPORT_COLUMNS = {
    "level": "int32", "community": "int64", "parent": "int64", "title": "string",
    "summary": "string", "rating": "float32", "findings": "string", "text": "string",
    "n_nodes": "int32", "error": "string",
}

Key = tuple[int, int]


class CommunityReporter:
    """Builds report prompts from graph tables and writes reports for chosen communities."""

    def __init__(self, client: LLMClient, communities: pd.DataFrame, entities: pd.DataFrame,
                 relations: pd.DataFrame, *, entity_key: str = "name", token_budget: int = 3000,
                 max_tokens: int = 600, count_tokens: CountTokens | None = None) -> None:
        self.client = client
        self.token_budget = token_budget
        self.max_tokens = max_tokens
        self.count = count_tokens or approx_tokens
        self.stats: Counter = Counter()
        comm = communities.copy()
        comm["parent"] = pd.to_numeric(comm["parent"], errors="coerce").fillna(-1).astype("int64")
        self.members: dict[Key, list[Any]] = defaultdict(list)
        self.parent: dict[Key, int] = {}
        self.children: dict[Key, list[Key]] = defaultdict(list)
        for node, level, community, parent in comm[["node", "level", "community", "parent"]]\
                .itertuples(index=False):
            key = (int(level), int(community))
            self.members[key].append(node)
            self.parent[key] = int(parent)
        for (level, community), parent in self.parent.items():
            if level > 0 and parent >= 0:
                self.children[(level - 1, parent)].append((level, community))
        ent = entities.set_index(entity_key, drop=False)
        ent = ent[~ent.index.duplicated()]
        self.entity_label = _column(ent, ("label", "type"))
        self.entity_desc = _column(ent, ("description",))
        rel = relations
        self.relations = list(zip(rel["head"], rel["relation"], rel["tail"],
                                  rel["weight"] if "weight" in rel else [1.0] * len(rel),
                                  strict=True))
        degree: Counter = Counter()
        for head, _, tail, _ in self.relations:
            degree[head] += 1
            degree[tail] += 1
        self.degree = degree
        self.by_node: dict[Any, list[int]] = defaultdict(list)
        for i, (head, _, tail, _) in enumerate(self.relations):
            self.by_node[head].append(i)
            self.by_node[tail].append(i)
        self.reports: dict[Key, dict[str, Any]] = {}

    # -- prompt data --------------------------------------------------------------------------
    def _raw_lines(self, key: Key) -> tuple[list[str], list[str]]:
        nodes = sorted(self.members[key], key=lambda n: -self.degree.get(n, 0))
        node_set = set(nodes)
        ent_lines = []
        for node in nodes:
            label = self.entity_label.get(node, "")
            desc = self.entity_desc.get(node, "")
            ent_lines.append(f"{node} | {label} | {desc}".rstrip(" |"))
        rel_ids = sorted({i for n in nodes for i in self.by_node.get(n, [])
                          if self.relations[i][0] in node_set and self.relations[i][2] in node_set},
                         key=lambda i: -(self.degree.get(self.relations[i][0], 0)
                                         + self.degree.get(self.relations[i][2], 0)))
        rel_lines = [f"{h} -> {r} -> {t}" for h, r, t, _ in (self.relations[i] for i in rel_ids)]
        return ent_lines, rel_lines

    def raw_tokens(self, key: Key) -> int:
        """Tokens of a community's full entity and relation tables."""
        ent, rel = self._raw_lines(key)
        return sum(self.count(ent + rel)) if ent or rel else 0

    def context(self, key: Key) -> str:
        """The data part of a community's report prompt, within the token budget."""
        ent, rel = self._raw_lines(key)
        sizes = self.count(ent + rel) if ent or rel else []
        budget = self.token_budget
        parts: list[str] = []
        if sum(sizes) > budget:
            subs = [self.reports[c] for c in self.children.get(key, []) if c in self.reports]
            subs.sort(key=lambda r: (-r["n_nodes"], -r["rating"]))
            lines = [f"- {r['title']}: {r['summary']}" for r in subs]
            taken, spent = _fill(lines, self.count(lines) if lines else [], budget // 2)
            if taken:
                parts.append("Sub-community reports:\n" + "\n".join(taken))
                budget -= spent
        ent_taken, spent = _fill(ent, sizes[:len(ent)], budget // 2 if rel else budget)
        rel_taken, _ = _fill(rel, sizes[len(ent):], budget - spent)
        data = ["Entities (name | type | description):\n" + "\n".join(ent_taken)]
        if rel_taken:
            data.append("Relations:\n" + "\n".join(rel_taken))
        return "\n\n".join(data + parts)

    # -- writing ------------------------------------------------------------------------------
    def needed(self, targets: Iterable[Key]) -> set[Key]:
        """The targets plus the sub-communities (recursively) of those too large for the budget."""
        need: set[Key] = set()
        stack = [t for t in targets if t in self.members]
        while stack:
            key = stack.pop()
            if key in need:
                continue
            need.add(key)
            if key not in self.reports and self.raw_tokens(key) > self.token_budget:
                stack.extend(self.children.get(key, []))
        return need

    async def awrite(self, targets: Iterable[Key]) -> pd.DataFrame:
        """Write the missing reports among ``targets`` (and what they need), finest level
        first; return the reports of ``targets``."""
        targets = list(targets)
        todo = sorted(k for k in self.needed(targets) if k not in self.reports)
        for level in sorted({k[0] for k in todo}, reverse=True):
            keys = [k for k in todo if k[0] == level]
            requests = [ChatRequest(prompts.report_messages(self.context(k)),
                                    prompts.REPORT_SCHEMA, "report", self.max_tokens,
                                    tag=f"report:{k[0]}:{k[1]}", validate=_object) for k in keys]
            results = await self.client.acomplete_batch(requests)
            for key, result in zip(keys, results, strict=True):
                self.reports[key] = self._report(key, result)
        return self.frame([k for k in targets if k in self.reports])

    def write(self, targets: Iterable[Key]) -> pd.DataFrame:
        """Sync ``awrite``."""
        targets = list(targets)
        return self.client.run(lambda: self.awrite(targets))

    def _report(self, key: Key, result: Any) -> dict[str, Any]:
        level, community = key
        base = {"level": level, "community": community, "parent": self.parent.get(key, -1),
                "n_nodes": len(self.members[key]), "title": f"Community {community}",
                "summary": "", "rating": 0.0, "findings": "[]", "text": "", "error": ""}
        if isinstance(result, LLMError) and result.kind == "malformed":  # not cached
            self.stats["malformed_reports"] += 1
            log.warning("malformed report for community %s/%s: %s", level, community, result)
            text = (result.content or "").strip()
            return {**base, "summary": text[:1000], "text": text, "error": "malformed report"}
        if isinstance(result, LLMError):
            self.stats["report_errors"] += 1
            return {**base, "error": str(result)}
        value, repaired = result.parsed
        self.stats["repaired_reports"] += int(repaired)
        findings = [f for f in value.get("findings") or [] if isinstance(f, dict)]
        findings = [{"summary": str(f.get("summary", "")),
                     "explanation": str(f.get("explanation", ""))} for f in findings]
        try:
            rating = float(value.get("rating", 0))
        except (TypeError, ValueError):
            rating = 0.0
        title = str(value.get("title") or base["title"]).strip()
        summary = str(value.get("summary") or "").strip()
        text = "\n\n".join([f"# {title}", summary] +
                           [f"## {f['summary']}\n{f['explanation']}" for f in findings])
        return {**base, "title": title, "summary": summary, "rating": min(max(rating, 0), 10),
                "findings": json.dumps(findings, ensure_ascii=False), "text": text}

    def frame(self, keys: Sequence[Key] | None = None) -> pd.DataFrame:
        """Reports written so far (or those of ``keys``) as a table."""
        keys = sorted(self.reports) if keys is None else list(keys)
        rows = [self.reports[k] for k in keys]
        if not rows:
            return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in REPORT_COLUMNS.items()})
        return pd.DataFrame(rows, columns=list(REPORT_COLUMNS)).astype(REPORT_COLUMNS)

    def community_keys(self, level: int | None = None) -> list[Key]:
        """All community keys, or those of one level."""
        return sorted(k for k in self.members if level is None or k[0] == level)


def _object(result: Any) -> tuple[dict[str, Any], bool]:
    """A ``ChatRequest.validate`` for reports: ``(object, repaired)``; raises unless the
    answer holds a JSON object."""
    value, repaired = parse_json(result.content, keep_partial=not result.truncated)
    if not isinstance(value, dict):
        raise JSONRepairError("not a JSON object")
    return value, repaired


def generate_reports(client: LLMClient, communities: pd.DataFrame, entities: pd.DataFrame,
                     relations: pd.DataFrame, *, levels: Sequence[int] | None = None,
                     **options: Any) -> pd.DataFrame:
    """Reports for every community (of ``levels``, default all), bottom-up, batched per level.

    ``options`` go to ``CommunityReporter`` (``entity_key``, ``token_budget``, ``max_tokens``,
    ``count_tokens``). Failed or unreadable reports keep a row with ``error`` set.
    """
    reporter = CommunityReporter(client, communities, entities, relations, **options)
    keys = [k for k in reporter.community_keys() if levels is None or k[0] in set(levels)]
    return reporter.write(keys)


class LazyReports:
    """Reports written on demand, for the communities a query touches, and kept.

    ``get(communities, level)`` returns the reports of those communities, writing only the
    missing ones (one batch per level); the LLM cache makes them free across processes too.
    """

    def __init__(self, client: LLMClient, communities: pd.DataFrame, entities: pd.DataFrame,
                 relations: pd.DataFrame, **options: Any) -> None:
        self.reporter = CommunityReporter(client, communities, entities, relations, **options)

    def get(self, community_ids: Iterable[int] | None = None, level: int = 0) -> pd.DataFrame:
        """Reports of ``community_ids`` at ``level`` (all of that level when ``None``)."""
        if community_ids is None:
            keys = self.reporter.community_keys(level)
        else:
            keys = [(int(level), int(c)) for c in dict.fromkeys(community_ids)]
        return self.reporter.write(keys)

    def for_nodes(self, nodes: Iterable[Any], level: int = 0) -> pd.DataFrame:
        """Reports of the communities at ``level`` that contain any of ``nodes``."""
        wanted = set(nodes)
        ids = [c for (lv, c), members in self.reporter.members.items()
               if lv == level and wanted.intersection(members)]
        return self.get(ids, level)

    @property
    def written(self) -> pd.DataFrame:
        """Every report written so far."""
        return self.reporter.frame()


# -- description merging ----------------------------------------------------------------------

def merge_descriptions(client: LLMClient, descriptions: pd.DataFrame, *, threshold: int = 3,
                       max_tokens: int = 200, max_words: int = 80,
                       key: str = "name") -> pd.DataFrame:
    """One description per entity.

    ``descriptions``: rows ``(name, label, description)``, several per entity (one per chunk).
    Entities with at most ``threshold`` distinct descriptions get them joined; those with more
    get one LLM call each (all in one batch). Returns ``(name, label, description,
    n_descriptions, merged)``; a failed call falls back to the joined text.
    """
    groups: dict[Any, dict[str, Any]] = {}
    for row in descriptions.itertuples(index=False):
        name = getattr(row, key)
        desc = getattr(row, "description", "") or ""
        label = getattr(row, "label", "") or ""
        g = groups.setdefault(name, {"labels": Counter(), "descs": {}})
        if label:
            g["labels"][label] += 1
        text = " ".join(str(desc).split())
        if text:
            g["descs"].setdefault(text.casefold(), text)
    names = list(groups)
    labels = [g["labels"].most_common(1)[0][0] if g["labels"] else "" for g in groups.values()]
    texts = [list(g["descs"].values()) for g in groups.values()]
    big = [i for i, t in enumerate(texts) if len(t) > threshold]
    requests = [ChatRequest(prompts.merge_messages(str(names[i]), labels[i], texts[i], max_words),
                            prompts.MERGE_SCHEMA, "description", max_tokens,
                            tag=f"merge:{names[i]}") for i in big]
    results = client.complete_batch(requests) if requests else []
    merged = [" ".join(t) for t in texts]
    by_llm = [False] * len(names)
    failed: list[str] = []  # why each failed merge kept the joined text
    for i, result in zip(big, results, strict=True):
        if isinstance(result, LLMError):
            failed.append(f"{names[i]!r}: {result}")
            continue
        try:
            value, _ = parse_json(result.content, keep_partial=not result.truncated)
        except JSONRepairError:
            failed.append(f"{names[i]!r}: malformed JSON")
            continue
        if isinstance(value, dict) and isinstance(value.get("description"), str) \
                and value["description"].strip():
            merged[i] = " ".join(value["description"].split())
            by_llm[i] = True
        else:
            failed.append(f"{names[i]!r}: no description in the answer")
    if failed:
        log.warning("%d of %d description merges failed, their descriptions stay the joined "
                    "text (first: %s)", len(failed), len(big), "; ".join(failed[:3]))
    return pd.DataFrame({key: names, "label": labels, "description": merged,
                         "n_descriptions": [len(t) for t in texts], "merged": by_llm})


def _column(frame: pd.DataFrame, names: Sequence[str]) -> dict[Any, str]:
    for name in names:
        if name in frame:
            return {k: ("" if v is None or (isinstance(v, float) and v != v) else str(v))
                    for k, v in frame[name].items()}
    return {}


def _fill(lines: list[str], sizes: Sequence[int], budget: int) -> tuple[list[str], int]:
    taken, spent = [], 0
    for line, size in zip(lines, sizes, strict=True):
        if spent + size > budget:
            break
        taken.append(line)
        spent += size
    return taken, spent
