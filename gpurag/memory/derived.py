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
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from gpurag.memory.discourse import Discourse

if TYPE_CHECKING:
    from gpurag.memory.memory import Memory

TABLE = "discourse.parquet"
STATE = "discourse_state.parquet"


def names_key(names: list[str]) -> int:
    """A digest of the names the rules read in one trace (1 + CRC-32: 0 means none read)."""
    return 1 + zlib.crc32("\x1f".join(names).encode("utf-8"))


def unchanged(mem: Memory, raws: list[list[int]]) -> bool:
    """Whether the rules would read, in every trace, the names they read when it came."""
    if not mem.config.discourse or len(mem._read) != mem._n:
        return False
    canon, surfaces = mem.vocab.canonical(), mem.vocab.surfaces
    for i, raw in enumerate(raws):
        if not mem.texts[i]:
            if mem._read[i]:
                return False
            continue
        if names_key([surfaces[int(canon[j])] for j in raw if canon[j] >= 0]) != mem._read[i]:
            return False
    return True


def tables(mem: Memory) -> dict[str, pd.DataFrame]:
    """The snapshot tables of ``mem``'s discourse results."""
    claims = ["" if i not in mem._claims else json.dumps(mem._claims[i])
              for i in range(mem._n)]
    dates = ["" if i not in mem._dates else json.dumps(mem._dates[i]) for i in range(mem._n)]
    refs = ["" if i not in mem._refs else json.dumps(mem._refs[i]) for i in range(mem._n)]
    read = mem._read if len(mem._read) == mem._n else [0] * mem._n
    return {TABLE: pd.DataFrame({"expansion": mem._expansion[: mem._n], "claims": claims,
                                 "dates": dates, "refs": refs,
                                 "read": pd.array(read, dtype="int64")}),
            STATE: pd.DataFrame({"state": [json.dumps(mem._discourse.state())]})}


def restore(mem: Memory, folder: Path, done: int, raw_n: list[int]) -> bool:
    """Load the discourse results of the first ``done`` traces into ``mem``; False when the
    snapshot predates them (the rules then run again)."""
    if not (folder / TABLE).exists() or not (folder / STATE).exists():
        return False
    frame = pd.read_parquet(folder / TABLE)
    if len(frame) != done or len(raw_n) != done or "read" not in frame:
        return False
    mem._expansion = frame["expansion"].astype(str).tolist()
    mem._raw_n = list(raw_n)
    mem._claims, mem._claim_index, mem._dates = {}, {}, {}
    for i in (frame["claims"] != "").to_numpy().nonzero()[0].tolist():
        claims = [tuple(c) for c in json.loads(frame["claims"].iat[i])]
        mem._claims[i] = claims
        for c in claims:
            mem._claim_index.setdefault(c, []).append(i)
    for i in (frame["dates"] != "").to_numpy().nonzero()[0].tolist():
        mem._dates[i] = json.loads(frame["dates"].iat[i])
    mem._refs = {i: json.loads(frame["refs"].iat[i])
                 for i in (frame["refs"] != "").to_numpy().nonzero()[0].tolist()}
    mem._read = frame["read"].astype("int64").tolist()
    state = json.loads(pd.read_parquet(folder / STATE)["state"].iat[0])
    mem._discourse = Discourse.from_state(state)
    return True
