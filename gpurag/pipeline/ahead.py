"""Run an iterator one or more items ahead of its consumer, on a background thread.

Stage 1 prepares batch ``i + 1`` (reading, cutting into parts, tokenizing, chunk ids: the
tokenizer and file reads release the GIL) while the caller embeds batch ``i``. The queue is
bounded (``depth`` items), so at most ``depth`` prepared batches wait in memory. The items
come in the iterator's order, an exception the iterator raises is raised in the consumer at
the point it would have come, and leaving the ``with`` block (done, failed or interrupted)
stops the producer after the item it is preparing. Nothing is checkpointed by the producer:
a kill loses at most the prepared batches, which a resume prepares again.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

_DONE = object()
_POLL_S = 0.1  # how often a blocked producer checks whether the consumer has left


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


@contextlib.contextmanager
def ahead(items: Iterable[T], depth: int = 1, name: str = "gpurag-ahead"
          ) -> Iterator[Iterator[T]]:
    """``items``, produced on a thread up to ``depth`` ahead of the consumer (``depth`` 0:
    produced in the caller's thread, as a plain loop would)."""
    if depth < 1:
        yield iter(items)
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    source = iter(items)

    def produce() -> None:
        try:
            for item in source:
                if not put(item):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            put(_Failed(exc))
            return
        finally:  # a generator left early is closed here, not by whichever thread frees it
            close = getattr(source, "close", None)
            if close is not None:
                close()
        put(_DONE)

    def consume() -> Iterator[T]:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.exc
            yield item  # type: ignore[misc]

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        yield consume()
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            with contextlib.suppress(queue.Empty):
                q.get(timeout=_POLL_S)
        thread.join()
