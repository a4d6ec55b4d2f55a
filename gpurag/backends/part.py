"""A part of the runtime (a callable with the name of what implements it), how a part is
named, and the record of the parts a build actually ran."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# The keywords a graph query's walk (gpurag.query.walk) passes the PPR part besides
# ``(g, reset)``: a part of one's own must take them all (it may ignore ``method``, ``eps``
# and the size rule ``push_min_edges`` / ``push_max_seeds``, as the device's power iteration
# does). Runtime checks a user's ``ppr`` against them; gpurag.contracts.check_ppr calls with them.
PPR_WALK_KEYWORDS = ("k", "lo", "hi", "gather", "damping", "tol", "method", "eps",
                     "local_fanout", "push_min_edges", "push_max_seeds")


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


def rejected_keywords(fn: Any, names: Sequence[str]) -> list[str]:
    """The ``names`` a call of ``fn`` (a :class:`Part`'s own function) by keyword would
    reject: none where it takes ``**kwargs`` or its signature cannot be read."""
    fn = fn.fn if isinstance(fn, Part) else fn
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable without a readable signature
        return []
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return []
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [name for name in names if name not in named]


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
