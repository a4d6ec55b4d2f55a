"""The write-time discourse results of a memory (:mod:`gpurag.memory.discourse`) in its
snapshot, so an open after ``compact`` reads them instead of running the rules over every
trace again: each trace's expansion, claims, resolved dates and referents, a digest of the
names the rules read in it, and the per-session state the rules continue from for the traces
appended since.

``compact`` re-tags every trace against the whole vocabulary; when every trace's names come
out as the rules read them (:func:`unchanged`), the rules, which see only texts, times and
those names, would give the same results in the same order, so they are not run again.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gpurag.memory.discourse import Discourse

TABLE = "discourse.parquet"
STATE = "discourse_state.parquet"


@dataclass
class Results:
    """The discourse results of a memory's traces: per trace its expansion and the digest of
    the names the rules read (lists), its claims, resolved dates and referents (by trace),
    the claims' index and the rules' per-session state."""

    expansion: list[str]
    claims: dict[int, list[tuple[str, str]]]
    dates: dict[int, list[str]]
    refs: dict[int, list[str]]
    read: list[int]
    discourse: Discourse
    claim_index: dict[tuple[str, str], list[int]] = field(default_factory=dict)


def names_key(names: list[str]) -> int:
    """A digest of the names the rules read in one trace (1 + CRC-32: 0 means none read)."""
    return 1 + zlib.crc32("\x1f".join(names).encode("utf-8"))


def unchanged(read: Sequence[int], texts: Sequence[str], canon: np.ndarray,
              surfaces: Sequence[str], raws: list[list[int]]) -> bool:
    """Whether the rules would read, in every trace (``texts``), the names they read when it
    came (``read``, :func:`names_key`), its vocabulary tags now being ``raws`` (entries of the
    vocabulary's ``canon`` map and ``surfaces``)."""
    if len(read) != len(texts):
        return False
    for i, raw in enumerate(raws):
        if not texts[i]:
            if read[i]:
                return False
            continue
        if names_key([surfaces[int(canon[j])] for j in raw if canon[j] >= 0]) != read[i]:
            return False
    return True


def tables(r: Results, n: int) -> dict[str, pd.DataFrame]:
    """The snapshot tables of the discourse results of ``n`` traces."""
    claims = ["" if i not in r.claims else json.dumps(r.claims[i]) for i in range(n)]
    dates = ["" if i not in r.dates else json.dumps(r.dates[i]) for i in range(n)]
    refs = ["" if i not in r.refs else json.dumps(r.refs[i]) for i in range(n)]
    read = r.read if len(r.read) == n else [0] * n
    return {TABLE: pd.DataFrame({"expansion": r.expansion[:n], "claims": claims,
                                 "dates": dates, "refs": refs,
                                 "read": pd.array(read, dtype="int64")}),
            STATE: pd.DataFrame({"state": [json.dumps(r.discourse.state())]})}


def restore(folder: Path, done: int, raw_n: list[int]) -> Results | None:
    """The discourse results of the first ``done`` traces from the snapshot ``folder``; None
    when it predates them (the rules then run again)."""
    if not (folder / TABLE).exists() or not (folder / STATE).exists():
        return None
    frame = pd.read_parquet(folder / TABLE)
    if len(frame) != done or len(raw_n) != done or "read" not in frame:
        return None
    claims: dict[int, list[tuple[str, str]]] = {}
    claim_index: dict[tuple[str, str], list[int]] = {}
    for i in (frame["claims"] != "").to_numpy().nonzero()[0].tolist():
        claims[i] = [tuple(c) for c in json.loads(frame["claims"].iat[i])]
        for c in claims[i]:
            claim_index.setdefault(c, []).append(i)
    dates = {i: json.loads(frame["dates"].iat[i])
             for i in (frame["dates"] != "").to_numpy().nonzero()[0].tolist()}
    refs = {i: json.loads(frame["refs"].iat[i])
            for i in (frame["refs"] != "").to_numpy().nonzero()[0].tolist()}
    state = json.loads(pd.read_parquet(folder / STATE)["state"].iat[0])
    return Results(frame["expansion"].astype(str).tolist(), claims, dates, refs,
                   frame["read"].astype("int64").tolist(), Discourse.from_state(state),
                   claim_index)
