"""A part of the runtime (a callable with the name of what implements it), how a part is
named, and the record of the parts a build actually ran."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Part:
    """``fn`` with its ``implementation`` (what ``gpurag info`` and the manifest print).

    Calling the part calls ``fn``; a user's own part need not be one: any callable (or
    object) with the component's call shape will do."""

    fn: Callable[..., Any]
    implementation: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def implementation_name(obj: Any) -> str:
    """How a record names a part: its ``implementation`` attribute when it has one, else its
    ``name``, else a function's qualified name, else its class name."""
    for attr in ("implementation", "name"):
        value = getattr(obj, attr, None)
        if isinstance(value, str) and value:
            return value
    qualname = getattr(obj, "__qualname__", None)
    if isinstance(qualname, str) and qualname:
        return qualname
    return type(obj).__name__


class BuildRecord:
    """What one build (or one query batch) actually ran: component -> implementation.

    A new record per build, so two builds in one process never share entries; only what ran
    is recorded, never what was merely selected.
    """

    def __init__(self) -> None:
        self._used: dict[str, str] = {}

    def record(self, component: str, implementation: str) -> None:
        self._used[component] = str(implementation)

    def as_dict(self) -> dict[str, str]:
        return dict(self._used)
