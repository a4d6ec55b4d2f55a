"""Turn a passage corpus into memory traces: one trace per chat line of a session.

A passage whose first line is ``Time: <stamp>`` (the chat logs of ``lihua_world``) is a session
(its id) of turns (its other non-empty lines) at that time; any other passage is one trace.
Consecutive one-turn passages stamped with the same time whose ids differ only in a trailing
number (``conv3:D2:4``, ``conv3:D2:5``: one dialogue turn per passage) are the turns of one
session (the id without that number), numbered by it; so are unstamped one-turn passages
whose ids differ only in a trailing number and follow each other. Every trace names its passage in
``meta["doc"]`` when that is not its session, so a passage is ranked where its trace is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from gpurag.errors import InputError

_TIME_LINE = re.compile(r"^\s*Time:\s*(\S+)\s*$")
_TRAILING_NUMBER = re.compile(r"^(?P<prefix>.*\D)(?P<n>\d+)$")


def session_traces(doc_id: str, text: str, order: int) -> list[dict[str, Any]]:
    """The traces of one passage (see the module docstring)."""
    lines = text.split("\n")
    m = _TIME_LINE.match(lines[0]) if lines else None
    if m is None:
        return [{"text": text.strip(), "session": doc_id, "turn": 0, "time": float(order)}]
    turns = [ln.strip() for ln in lines[1:] if ln.strip()]
    return [{"text": t, "session": doc_id, "turn": i, "time": m.group(1)}
            for i, t in enumerate(turns)]


def corpus_traces(path: str | Path) -> Iterator[dict[str, Any]]:
    """Traces of every passage of a ``corpus.jsonl`` (``{"id", "text"}`` per line)."""
    yield from group_turns(_passages(Path(path)))


def _passages(path: Path) -> Iterator[tuple[str, str, int]]:
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
                doc_id, text = str(rec["id"]), str(rec["text"])
            except (KeyError, TypeError, ValueError, RecursionError) as exc:  # ValueError: JSON
                raise InputError(f"{path}:{lineno}: not a passage record "
                                 f"({type(exc).__name__}: {str(exc)[:200]})") from None
            yield doc_id, text, lineno


def group_turns(passages: Iterable[tuple[str, str, int]]) -> Iterator[dict[str, Any]]:
    """Traces of ``(doc id, text, order)`` passages, the one-turn passages of one session
    grouped (see the module docstring)."""
    time_of: dict[str, Any] = {}  # session prefix -> the time it was first seen with
    held: tuple[dict[str, Any], str, str, str] | None = None  # unstamped one-turn passage
    for doc_id, text, order in passages:
        traces = [t for t in session_traces(doc_id, text, order) if t["text"]]
        m = _TRAILING_NUMBER.match(doc_id)
        one = len(traces) == 1 and m is not None
        prefix = (m.group("prefix").rstrip(":_-. /") or doc_id) if m else ""
        stamped = _TIME_LINE.match(text.split("\n", 1)[0]) is not None
        if one and stamped:
            t = traces[0]
            seen = time_of.setdefault(prefix, t["time"])
            session = prefix if seen == t["time"] else f"{prefix}@{t['time']}"
            t.update(session=session, turn=int(m.group("n")), meta={"doc": doc_id})
        elif one and held is not None and held[1] == prefix:
            # unstamped: consecutive passages of one prefix are one session
            prev, _, prev_id, prev_n = held
            if prev["session"] == prev_id:
                prev.update(session=prefix, turn=int(prev_n), meta={"doc": prev_id})
            traces[0].update(session=prefix, turn=int(m.group("n")), meta={"doc": doc_id})
        if held is not None:
            yield held[0]
            held = None
        if one and not stamped:
            held = (traces[0], prefix, doc_id, m.group("n"))
            continue
        yield from traces
    if held is not None:
        yield held[0]


def frame_traces(doc_ids: Iterable[str], texts: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Traces of (doc id, text) pairs, e.g. an index's chunks, in order."""
    yield from group_turns((str(d), str(t), order)
                           for order, (d, t) in enumerate(zip(doc_ids, texts, strict=True)))
