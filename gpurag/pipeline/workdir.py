"""The resumable work folder of a build: ``.<index>.work`` beside the target index."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from gpurag.store.layout import WORK_SUFFIX, sibling


class WorkDir:
    """Holds finished parts of each stage and a ``state.json`` naming what is done.

    The state is keyed by a fingerprint of the inputs and config; a different key discards it.
    """

    def __init__(self, target: Path, key: str) -> None:
        self.root = sibling(target, WORK_SUFFIX)
        self.key = key
        self.state: dict[str, Any] = {}
        state_path = self.root / "state.json"
        if state_path.is_file():
            try:
                state = json.loads(state_path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, OSError):
                state = {}
            if state.get("key") == key:
                self.state = state
        if not self.state:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root.mkdir(parents=True)
            self.state = {"key": key}
            self.save()

    @property
    def resumed(self) -> bool:
        return len(self.state) > 1

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
