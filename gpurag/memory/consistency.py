"""Consistency filter: top traces asserting different values for one key keep one value.

A key is a (subject, attribute) pair read off a trace by surface patterns, no model:
"<X>'s <attr> is <value>", "my <attr> is <value>" (subject = the speaker, the ``Name:`` prefix
of a chat line or the trace's session), "<X> moved to <value>" / "I live in <value>"
(attribute ``residence``). When the top traces disagree on a key, the most recent assertion
wins (``policy="recent"``) or the best-scored one (``policy="score"``); the others are dropped
with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = r"[A-Z][\w'’.-]*(?:\s+[A-Z][\w'’.-]*)*"
_ATTR = r"(?:new\s+|current\s+|home\s+|phone\s+|email\s+)?[a-z]+(?:\s+(?:number|address|name))?"
_VALUE = r"(?P<value>[^.!?;,\n]+?)"
_END = r"(?=\s*(?:now\b|anymore\b)?\s*(?:[.!?;,\n]|$))"
_IS = r"\s+(?:is|was|has\s+changed\s+to|changed\s+to|is\s+now)\s+(?:now\s+)?"
_PATTERNS = [
    re.compile(rf"\b(?P<subj>{_NAME})['’]s\s+(?P<attr>{_ATTR}){_IS}{_VALUE}{_END}"),
    re.compile(rf"\b(?P<subj>[Mm]y)\s+(?P<attr>{_ATTR}){_IS}{_VALUE}{_END}"),
    re.compile(rf"\b(?P<subj>{_NAME}|I|[Ww]e)\s+(?:have\s+|has\s+|just\s+)?(?:moved|relocated)"
               rf"\s+(?:to|into)\s+{_VALUE}{_END}"),
    re.compile(rf"\b(?P<subj>{_NAME}|I|[Ww]e)\s+(?:now\s+)?(?:live|lives)\s+(?:in|at|on)\s+"
               rf"{_VALUE}{_END}"),
]
# what every pattern above needs in the text ("'s "/"my "/"moved"/"relocated"/"live"): a text
# without any of these asserts nothing, found by one scan instead of four patterns' scans
_ANY = re.compile(r"['’]s\s|[Mm]y\s|moved|relocated|live")
_SPEAKER = re.compile(r"^\s*([A-Z][\w'’.-]*(?:\s+[A-Z][\w'’.-]*)*)\s*:")
_FIRST_PERSON = {"my", "i", "we"}
_ATTR_ALIASES = {"address": "residence", "home address": "residence", "home": "residence",
                 "new address": "residence", "current address": "residence",
                 "phone": "phone number", "new phone number": "phone number"}


@dataclass(frozen=True)
class Assertion:
    """One (subject, attribute) = value claim of a trace."""

    subject: str
    attribute: str
    value: str


def assertions(text: str, session: str = "") -> list[Assertion]:
    """The key/value claims a trace makes (surface patterns only)."""
    if _ANY.search(text) is None:
        return []
    speaker_m = _SPEAKER.match(text)
    speaker = speaker_m.group(1) if speaker_m else session
    body = text[speaker_m.end():] if speaker_m else text
    out = []
    for i, pat in enumerate(_PATTERNS):
        for m in pat.finditer(body):
            subj = m.group("subj")
            subj = speaker if subj.lower() in _FIRST_PERSON else subj
            attr = "residence" if i >= 2 else " ".join(m.group("attr").lower().split())
            attr = _ATTR_ALIASES.get(attr, attr)
            value = " ".join(m.group("value").split()).rstrip()
            if subj and value:
                out.append(Assertion(" ".join(subj.lower().split()).replace(" ", ""), attr,
                                     value.lower()))
    return out


@dataclass(frozen=True)
class Dropped:
    """A trace removed by the consistency filter, and why."""

    trace: int
    reason: str


def consistency_filter(ids: list[int], texts: list[str], sessions: list[str],
                       times: list[float], scores: list[float],
                       policy: str = "recent") -> tuple[list[int], list[Dropped]]:
    """Keep, per disagreeing key, the assertion of the most recent (or best-scored) trace."""
    if policy not in ("recent", "score"):
        raise ValueError(f"unknown consistency policy {policy!r}: use 'recent' or 'score'")
    claims: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for pos, (text, session) in enumerate(zip(texts, sessions, strict=True)):
        for a in assertions(text, session):
            claims.setdefault((a.subject, a.attribute), []).append((pos, a.value))
    drop: dict[int, str] = {}
    for (subj, attr), found in claims.items():
        if len({v for _, v in found}) < 2:
            continue

        def rank(item: tuple[int, str]) -> tuple[float, float]:
            p = item[0]
            t = times[p] if times[p] == times[p] else float("-inf")
            return (t, scores[p]) if policy == "recent" else (scores[p], t)

        win_pos, win_val = max(found, key=rank)
        for p, v in found:
            if v != win_val and p not in drop:
                why = "newer" if policy == "recent" else "better-scored"
                drop[p] = (f"{subj} {attr}: {v!r} contradicts the {why} {win_val!r} "
                           f"of trace {ids[win_pos]}")
    kept = [i for p, i in enumerate(ids) if p not in drop]
    return kept, [Dropped(ids[p], r) for p, r in sorted(drop.items())]
