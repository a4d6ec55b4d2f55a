"""Lazy parts built once per object, safely under threads.

An opened index is shared by every thread that queries it (``gpurag serve``'s worker, a
caller's own pool), and its parts (the graph retriever, BM25, the entity linker, the bridge
matrices, device searchers) are built on first use. An unguarded ``if self._x is None: self._x =
build()`` (or :func:`functools.cached_property`, which has no lock since Python 3.12) lets two
cold threads both build: double the cost and the memory, and one of the two copies dropped.

:func:`built_once` is the one pattern for these: a read without a lock when the part is there,
else a per-object, per-part lock and a second look before building, so exactly one thread builds
and the others wait for, then share, its part. The value is stored only once complete, so no
thread ever sees a half-built one; a build that raised stores nothing and is tried again.
:class:`once_property` is :func:`functools.cached_property` on top of it, and :class:`Memo` a
small locked LRU for parts keyed by a setting (bounded: a client sending many distinct values
cannot grow an index's memory without limit).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, MutableMapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_GUARD = threading.Lock()  # makes each object's per-part locks
_LOCKS = "_once_locks"  # where an object keeps them (in its __dict__)


def _lock_of(obj: Any, key: Hashable) -> threading.RLock:
    with _GUARD:
        locks = obj.__dict__.get(_LOCKS)
        if locks is None:
            locks = obj.__dict__[_LOCKS] = {}
        lock = locks.get(key)
        if lock is None:  # reentrant: a part built from itself would rebuild, not hang
            lock = locks[key] = threading.RLock()
        return lock


def built_once(obj: Any, slot: str, build: Callable[[], T], *,
               fresh: Callable[[T], bool] | None = None,
               store: MutableMapping[Any, Any] | None = None) -> T:
    """``store[slot]`` (default ``obj.__dict__``, i.e. the attribute ``obj.<slot>``) when it
    holds a value that is not None (and ``fresh(value)``, where given), else ``build()``, run
    by one thread at a time per (``obj``, store, slot), stored and returned."""
    store = obj.__dict__ if store is None else store
    value = store.get(slot)
    if value is not None and (fresh is None or fresh(value)):
        return value
    with _lock_of(obj, (id(store), slot)):
        value = store.get(slot)
        if value is None or (fresh is not None and not fresh(value)):
            value = build()
            store[slot] = value  # published whole, after the build
    return value


class once_property(Generic[T]):  # noqa: N801 - named like functools.cached_property
    """:func:`functools.cached_property` that builds once under threads (:func:`built_once`):
    the value is kept in the instance's ``__dict__`` under the method's name, as there."""

    def __init__(self, fn: Callable[[Any], T]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        value = obj.__dict__.get(self.name)
        if value is not None:
            return value
        return built_once(obj, self.name, lambda: self.fn(obj))


class Memo(Generic[T]):
    """At most ``size`` values by key, the least recently used dropped first; each built once
    (under the memo's lock) by :meth:`get`."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a memo holds at least one value, not {size}")
        self.size = size
        self._values: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.RLock()

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            value = build()
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)
            return value

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._values

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)
