"""What a setting accepts (:class:`Rule`: a type, a range, choices) and the machine bounds of
thread and worker counts. Imports nothing of gpurag's but its errors' module's siblings, so
both :mod:`gpurag.config` and :mod:`gpurag.settings` build on it."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def named_keywords(unknown: Callable[[type, str, Any], None]) -> Callable[[type], type]:
    """A settings dataclass's decorator: a constructor keyword that names no field goes to
    ``unknown(cls, key, value)``, which raises an error naming it and the valid ones (instead
    of Python's bare ``TypeError: unexpected keyword argument``)."""

    def wrap(cls: type) -> type:
        init = cls.__init__
        names = frozenset(f.name for f in dataclasses.fields(cls) if f.init)

        @functools.wraps(init)
        def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
            for key in kwargs:
                if key not in names:
                    unknown(cls, key, kwargs[key])
            init(self, *args, **kwargs)

        cls.__init__ = checked_init
        return cls

    return wrap


@dataclass(frozen=True)
class Rule:
    """What one setting accepts: a type, an optional range or list of choices."""

    kind: type
    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False  # lo itself excluded
    open_hi: bool = False  # hi itself excluded
    choices: tuple[str, ...] = ()
    more_choices: Callable[[], tuple[str, ...]] | None = None  # asked only for other values
    optional: bool = False  # None (or an empty string) means "not set"

    def describe(self) -> str:
        """The accepted values in words, e.g. ``a number in (0, 1)``."""
        if self.kind is bool:
            return f"a boolean word ({'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)})"
        if self.kind is dict:
            return "a table (dict)"
        if self.kind is str:
            choices = self._all_choices()
            return f"one of {', '.join(choices)}" if choices else "a non-empty string"
        noun = "a whole number" if self.kind is int else "a finite number"
        if self.lo is not None and self.hi is not None:
            return (f"{noun} in {'(' if self.open_lo else '['}{_num(self.lo)}, "
                    f"{_num(self.hi)}{')' if self.open_hi else ']'}")
        if self.lo is not None:
            return f"{noun} {'>' if self.open_lo else '>='} {_num(self.lo)}"
        if self.hi is not None:
            return f"{noun} {'<' if self.open_hi else '<='} {_num(self.hi)}"
        return noun

    def coerce(self, value: Any) -> Any:
        """``value`` converted to this rule's type and checked (``ValueError`` if it does not
        fit)."""
        if self.optional and (value is None or (isinstance(value, str) and not value.strip())):
            return None
        if self.kind is bool:
            return _to_bool(value)
        if self.kind is dict:
            if not isinstance(value, dict):
                raise ValueError
            return value
        if self.kind is str:
            return self._to_str(value)
        number = _to_int(value) if self.kind is int else _to_float(value)
        if self.lo is not None and (number < self.lo or (self.open_lo and number == self.lo)):
            raise ValueError
        if self.hi is not None and (number > self.hi or (self.open_hi and number == self.hi)):
            raise ValueError
        return number

    def _to_str(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValueError
        if self.choices or self.more_choices:
            value = value.strip().lower()
            if value not in self.choices and value not in self._all_choices():
                raise ValueError
        return value

    def _all_choices(self) -> tuple[str, ...]:
        extra = self.more_choices() if self.more_choices else ()
        return tuple(dict.fromkeys((*self.choices, *extra)))


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise ValueError


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return int(value.strip())
    raise ValueError


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        number = float(value.strip())
    else:
        raise ValueError
    if not math.isfinite(number):
        raise ValueError
    return number


def machine_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def bounded_workers(n: int, name: str) -> int:
    """``n`` threads or worker processes, at most the machine's cores (``GPURAG_THREADS=100000``
    used to start that many and grow memory for minutes); a lowered value is logged (info:
    a setting carried to a smaller machine is not an error)."""
    cores = machine_cores()
    if n > cores:
        import logging

        logging.getLogger("gpurag.config").info(
            "%s=%d is more than the %d CPU cores here: using %d", name, n, cores, cores)
        return cores
    return n
