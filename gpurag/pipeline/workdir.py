"""The resumable work folder of a build: ``.<index>.work`` beside the target index."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpurag.store.layout import WORK_SUFFIX, sibling

log = logging.getLogger(__name__)

# The checkpoint folders of each stage that keeps state in a work folder.
STAGE_FOLDERS: dict[str, tuple[str, ...]] = {
    "chunk_embed": ("chunks", "emb"),
    "extract": ("extract",),
}


def fingerprint(inputs: Mapping[str, Any]) -> str:
    """A short stable hash of a JSON-able mapping."""
    payload = json.dumps(inputs, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


class WorkDir:
    """Holds finished parts of each stage and a ``state.json`` naming what is done.

    ``key`` is either one fingerprint for the whole folder (a different one discards it all)
    or, per stage in pipeline order, the inputs that stage's checkpoints depend on: a stage
    whose inputs changed is discarded with every stage after it, and the stages before it are
    kept. A build whose leiden or linking settings changed thus keeps its embeddings and its
    extraction; what is discarded, and why, is logged.
    """

    def __init__(self, target: Path, key: str | Mapping[str, Mapping[str, Any]],
                 partial: Mapping[str, Callable[..., dict[str, Any] | None]] | None = None
                 ) -> None:
        self.root = sibling(target, WORK_SUFFIX)
        # per stage: ``f(work, stage_state, old_inputs, new_inputs)``, that stage's state cut
        # to what its changed inputs leave valid (None: redo it); later stages are redone
        self.partial = dict(partial or {})
        self.stage_inputs = {} if isinstance(key, str) else {s: dict(v) for s, v in key.items()}
        self.key = key if isinstance(key, str) else fingerprint(self.stage_inputs)
        self.state: dict[str, Any] = {}
        state = self._read_state()
        if state.get("key") == self.key:
            self.state = state
        elif state and self.stage_inputs and isinstance(state.get("inputs"), dict):
            self.state = self._keep_unchanged_stages(state)
        elif state:
            log.warning("discarding the interrupted build's work in %s: it was made from other "
                        "inputs or settings", self.root)
        if not self.state:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root.mkdir(parents=True)
            self.state = {"key": self.key}
        self.state["key"] = self.key
        if self.stage_inputs:
            self.state["inputs"] = self.stage_inputs
        self.save()

    def _read_state(self) -> dict[str, Any]:
        path = self.root / "state.json"
        if not path.is_file():
            return {}
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, OSError):
            log.warning("discarding %s: its state.json is unreadable", self.root)
            return {}
        return state if isinstance(state, dict) else {}

    def _keep_unchanged_stages(self, state: dict[str, Any]) -> dict[str, Any]:
        """The stages of ``state`` whose inputs are unchanged, up to the first changed one;
        the folders of that stage and every later one are removed."""
        old_inputs: dict[str, Any] = state["inputs"]
        kept: dict[str, Any] = {}
        changed: str | None = None
        for stage, inputs in self.stage_inputs.items():
            if changed is None and old_inputs.get(stage) == inputs:
                if stage in state:
                    kept[stage] = state[stage]
                continue
            if changed is None and stage in self.partial and isinstance(state.get(stage), dict):
                old = old_inputs.get(stage)
                cut = self.partial[stage](self, state[stage], old if isinstance(old, dict)
                                          else {}, inputs)
                if cut is not None:
                    kept[stage] = cut
                    changed = stage
                    continue
            if changed is None:
                changed = stage
                old = old_inputs.get(stage)
                old = old if isinstance(old, dict) else {}
                fields = sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k))
                dropped = [s for s in list(self.stage_inputs)[list(self.stage_inputs).index(stage):]
                           if s in state]
                what = ", ".join(fields) or "the inputs"
                done = ", ".join(kept)
                if dropped and done:
                    log.warning("the interrupted build in %s is resumed after its %s stage: "
                                "%s changed, so %s is redone", self.root, done, what,
                                ", ".join(dropped))
                elif dropped:
                    log.warning("the interrupted build in %s starts over: %s changed, so %s "
                                "is redone", self.root, what, ", ".join(dropped))
                elif done:
                    log.info("resuming the interrupted build in %s with its %s checkpoints "
                             "(%s changed, which they do not depend on)", self.root, done,
                             what)
            for folder in STAGE_FOLDERS.get(stage, ()):
                shutil.rmtree(self.root / folder, ignore_errors=True)
        if not kept:
            return {}
        return {"key": self.key, **kept}

    def has_progress(self) -> bool:
        """Whether any stage has a finished checkpoint a rerun would reuse."""
        # ``shards``: a cluster's results that came back ahead of the finished prefix
        return any(isinstance(v, dict) and (v.get("parts") or v.get("done_rows")
                                            or v.get("shards"))
                   for k, v in self.state.items() if k not in ("key", "inputs"))

    @property
    def resumed(self) -> bool:
        return any(k not in ("key", "inputs") for k in self.state)

    def path(self, rel: str) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def save(self) -> None:
        """Atomically rewrite ``state.json``."""
        tmp = self.root / "state.json.tmp"
        tmp.write_text(json.dumps(self.state, indent=1), encoding="utf-8")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self.root / "state.json")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
