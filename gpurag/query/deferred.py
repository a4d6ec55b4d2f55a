"""Result fields computed on first read: a query hands its results a :class:`Pending`
computation instead of a value, and the first read of the field runs it.

``QueryResult.confidence`` and ``QueryResult.chains`` cost more than the retrieval of a dense
query and change nothing in the ranking, so a caller who reads only the passages never pays
for them; a reader (the CLI, JSON, HTTP, ``min_confidence``) gets exactly the values an eager
computation would have given, from the index the query ran on. One pending computation may
fill the field of a whole batch at once (the confidence features are batched array ops).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Pending:
    """A computation that sets one deferred field on one or more results (run at most once;
    a run that raised is tried again on the next read)."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn: Callable[[], None] | None = fn
        self._lock = threading.Lock()

    @property
    def owed(self) -> bool:
        """Whether the computation has yet to run (successfully)."""
        return self._fn is not None

    def run(self) -> None:
        with self._lock:
            if self._fn is None:
                return
            self._fn()
            self._fn = None  # drop the index and arrays it held


class Deferred:
    """A dataclass field whose stored value may be a :class:`Pending`, run on first read.

    Used as the field's default (``chains: list = Deferred(list)``): the dataclass's
    ``__init__`` then stores ``factory()`` unless given a value."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory
        self.slot = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_deferred_{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self  # the dataclass reads this as the field's default
        value = obj.__dict__.get(self.slot, self)
        if isinstance(value, Pending):
            value.run()
            value = obj.__dict__.get(self.slot, self)
            if isinstance(value, Pending):
                raise RuntimeError(f"deferred {self.slot[10:]!r} was not set by its "
                                   "computation")
        if value is self:
            value = obj.__dict__[self.slot] = self.factory()
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = self.factory() if value is self else value


def resolve(obj: Any, names: tuple[str, ...]) -> None:
    """Run what is pending for the fields ``names`` of ``obj``."""
    for name in names:
        getattr(obj, name)
