"""Turn a passage corpus into memory traces: one trace per chat line of a session.

A passage whose first line is ``Time: <stamp>`` (the chat logs of ``lihua_world``) is a session
(its id) of turns (its other non-empty lines) at that time; any other passage is one trace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from gpurag.errors import InputError

_TIME_LINE = re.compile(r"^\s*Time:\s*(\S+)\s*$")


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
    path = Path(path)
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
            yield from (t for t in session_traces(doc_id, text, lineno) if t["text"])


def frame_traces(doc_ids: Iterable[str], texts: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Traces of (doc id, text) pairs, e.g. an index's chunks, in order."""
    for order, (doc_id, text) in enumerate(zip(doc_ids, texts, strict=True)):
        yield from (t for t in session_traces(str(doc_id), str(text), order) if t["text"])
