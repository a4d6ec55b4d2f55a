"""Tolerant JSON parsing for model output, on top of the ``json-repair`` package.

``json_repair`` fixes what compact models and truncated generations produce (code fences and
chatter, single quotes, Python literals, bare keys, missing or trailing commas, output cut off
mid-value). This wrapper adds what gpurag's callers rely on: valid JSON is parsed as is and
reported as not repaired; the first JSON value in the text wins over prose or a second value
after it; text holding no object or array is an error (the library would return ``""``); and
``keep_partial=False`` drops a string cut off by the end of a truncated answer instead of
keeping its prefix (a name cut to "Pierre Cu" is worse than no name).

It replaced a hand-written repairer: on 24 real answers of the test server (SmolLM2-135M,
entity prompt, schema off, cut at 24 or 64 tokens, 19 of them invalid JSON) both read 24 entity
lists holding the same 30 names.
"""

from __future__ import annotations

import json
from typing import Any

import json_repair

_OPENERS = "{["


class JSONRepairError(ValueError):
    """The text holds nothing that can be read as JSON."""


def parse_json(text: str, keep_partial: bool = True) -> tuple[Any, bool]:
    """Parse model output as JSON; return ``(value, repaired)``.

    ``repaired`` is False when the text (after stripping whitespace) was valid JSON as is.
    ``keep_partial``: keep a string value cut off by the end of the text (else drop its member).
    Raises ``JSONRepairError`` when no JSON object or array can be recovered.
    """
    if text is None:
        raise JSONRepairError("no text")
    stripped = text.strip()
    try:
        return json.loads(stripped), False
    except ValueError:
        pass
    starts = [i for i in (stripped.find(c) for c in _OPENERS) if i >= 0]
    if not starts:
        raise JSONRepairError(f"no object or array in {text[:80]!r}")
    body = stripped[min(starts):]
    try:  # a complete value followed by prose, a closing fence or another value
        value, _ = json.JSONDecoder().raw_decode(body)
        return value, True
    except ValueError:
        pass
    if not keep_partial:
        body = drop_open_string(body)
    value = json_repair.loads(body, skip_json_loads=True)
    if isinstance(value, list) and body.startswith("{"):
        # the library lists every value it found; the text's first value is an object
        value = next((v for v in value if isinstance(v, dict)), None)
    if not isinstance(value, dict | list):
        raise JSONRepairError(f"could not repair JSON; text starts {text[:80]!r}")
    return value, True


def repair_json(text: str, keep_partial: bool = True) -> str:
    """The first JSON-like object or array in ``text``, rewritten as valid JSON text."""
    value, _ = parse_json(text, keep_partial=keep_partial)
    return json.dumps(value, ensure_ascii=False)


def drop_open_string(text: str) -> str:
    """``text`` cut before the member or item whose string the end of the text left open
    (unchanged when every string is closed)."""
    quote = ""
    cut = 0  # end of the text kept if the last string stays open
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in _OPENERS:
            cut = i + 1
        elif c == ",":
            cut = i
        i += 1
    return text[:cut] if quote else text
