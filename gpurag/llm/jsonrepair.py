"""Tolerant JSON parsing for model output.

Handles what compact models and truncated generations produce: code fences and chatter around
the JSON, single-quoted strings, Python literals (``True``/``None``), bare keys and words,
trailing or missing commas, and output cut off mid-string or mid-object (the incomplete member
is dropped, open strings and containers are closed).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)(?:```|$)", re.DOTALL)
_BARE = re.compile(r"[A-Za-z0-9_.+\-]+")
_LITERALS = {"true": "true", "false": "false", "null": "null", "none": "null"}
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")


class JSONRepairError(ValueError):
    """The text holds nothing that can be read as JSON."""


@dataclass
class _Frame:
    closer: str
    state: str  # object: "key" | "colon" | "value" | "comma"; array: "value" | "comma"
    safe: int  # output length at the last point where the container could be closed


def strip_fences(text: str) -> str:
    """The body of the first Markdown code fence, or the text itself."""
    match = _FENCE.search(text)
    return match.group(1) if match else text


def parse_json(text: str, keep_partial: bool = True) -> tuple[Any, bool]:
    """Parse model output as JSON; return ``(value, repaired)``.

    ``repaired`` is False when the text (after stripping whitespace) was valid JSON as is.
    ``keep_partial`` as in ``repair_json``.
    Raises ``JSONRepairError`` when no JSON value can be recovered.
    """
    if text is None:
        raise JSONRepairError("no text")
    stripped = text.strip()
    try:
        return json.loads(stripped), False
    except (json.JSONDecodeError, ValueError):
        pass
    body = strip_fences(stripped).strip()
    try:
        return json.loads(body), True
    except (json.JSONDecodeError, ValueError):
        pass
    repaired = repair_json(body, keep_partial=keep_partial)
    try:
        return json.loads(repaired), True
    except (json.JSONDecodeError, ValueError) as exc:
        raise JSONRepairError(f"could not repair JSON: {exc}; text starts {text[:80]!r}") from exc


def repair_json(text: str, keep_partial: bool = True) -> str:
    """Rewrite the first JSON-like object or array in ``text`` into valid JSON text.

    ``keep_partial``: keep a string value cut off by the end of the text (else drop its member).
    """
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        raise JSONRepairError(f"no object or array in {text[:80]!r}")
    s = text[min(starts):]
    out: list[str] = []
    stack: list[_Frame] = []
    size = 0  # len("".join(out)), tracked to avoid joins

    def emit(piece: str) -> None:
        nonlocal size
        out.append(piece)
        size += len(piece)

    def truncate(length: int) -> None:
        nonlocal size
        joined = "".join(out)[:length]
        out.clear()
        out.append(joined)
        size = len(joined)

    def value_done() -> None:
        top = stack[-1]
        top.state = "comma"
        top.safe = size

    def before_item() -> str:
        """Insert a missing comma; return the role of the next token ("key" or "value")."""
        top = stack[-1]
        if top.state == "comma":
            emit(",")
            top.state = "key" if top.closer == "}" else "value"
        if top.closer == "}":
            if top.state == "key":
                return "key"
            if top.state == "colon":
                emit(":")
                top.state = "value"
        return "value"

    def close_top(explicit: bool) -> None:
        """Close the innermost container, dropping a member that has no value yet."""
        top = stack.pop()
        incomplete = top.state in ("colon", "value") if top.closer == "}" else False
        if incomplete or (not explicit and top.state != "comma"):
            truncate(top.safe)
        joined = "".join(out).rstrip().removesuffix(",")
        truncate(len(joined))
        emit(top.closer)
        if stack:
            value_done()

    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in "{[":
            if stack:
                role = before_item()
                if role == "key":  # an object where a key belongs: drop the stray opener
                    i += 1
                    continue
            closer = "}" if c == "{" else "]"
            emit(c)
            stack.append(_Frame(closer, "key" if c == "{" else "value", size))
            i += 1
        elif c in "}]":
            if not stack:
                break
            close_top(explicit=True)
            if not stack:
                break
            i += 1
        elif c in "\"'":
            if not stack:
                break
            role = before_item()
            literal, i, closed = _read_string(s, i)
            if not closed:
                if role == "value" and keep_partial:
                    emit(json.dumps(literal, ensure_ascii=False))
                    value_done()
                break
            emit(json.dumps(literal, ensure_ascii=False))
            if role == "key":
                stack[-1].state = "colon"
            else:
                value_done()
        elif c == ",":
            top = stack[-1] if stack else None
            if top is not None and top.state == "comma":
                top.state = "key" if top.closer == "}" else "value"
                emit(",")
            i += 1
        elif c == ":":
            top = stack[-1] if stack else None
            if top is not None and top.closer == "}" and top.state == "colon":
                emit(":")
                top.state = "value"
            i += 1
        elif c.isspace():
            i += 1
        else:
            match = _BARE.match(s, i)
            if not match or not stack:
                i += 1
                continue
            word = match.group(0)
            i = match.end()
            role = before_item()
            if role == "key":
                emit(json.dumps(word))
                stack[-1].state = "colon"
                continue
            lowered = word.lower()
            if lowered in _LITERALS:
                emit(_LITERALS[lowered])
            elif _NUMBER.fullmatch(word):
                emit(word)
            elif _NUMBER.fullmatch(word.rstrip(".eE+-")):
                emit(word.rstrip(".eE+-"))
            else:
                emit(json.dumps(word))
            value_done()
    # Close whatever is still open, dropping an incomplete member at each level.
    while stack:
        close_top(explicit=False)
    return "".join(out)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\",
            '"': '"', "'": "'"}


def _read_string(s: str, i: int) -> tuple[str, int, bool]:
    """Read a quoted string at ``s[i]``; return (text, index after it, closed)."""
    quote = s[i]
    i += 1
    chars: list[str] = []
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            if i + 1 >= n:
                return "".join(chars), n, False
            nxt = s[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2:i + 6]):
                chars.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
                continue
            chars.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        if c == quote:
            # A single quote inside a word (O'Brien) is an apostrophe, not the end.
            if quote == "'" and i + 1 < n and s[i + 1].isalpha() and chars and chars[-1].isalpha():
                chars.append(c)
                i += 1
                continue
            return "".join(chars), i + 1, True
        chars.append(c)
        i += 1
    return "".join(chars), n, False
