"""How many CPU threads torch may use for a forward pass of the reranker.

A question's candidate subgraphs are a few hundred nodes: every op of the network is far
below the size where a second thread pays, yet torch's OpenMP threads still meet at a barrier
after each op. On a busy machine a waiting thread is descheduled and a single question's
forward pass took 10-100x longer with 2 threads than with 1 (measured: 6-8 ms vs 84-184 ms on
2 shared cores). So small batches run on one thread, and torch's own setting is restored
after (the same rule as FAISS's small searches, :mod:`gpurag.vectors.faiss_index`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

NODES_PER_THREAD = 32768  # subgraph nodes one thread handles before another may help

_LOCK = threading.Lock()
_DEPTH = 0
_SAVED = 0


def threads_for(nodes: int, available: int) -> int:
    """Threads for a forward pass over ``nodes`` subgraph nodes: one per
    :data:`NODES_PER_THREAD` nodes, at least 1, at most ``available``."""
    return max(1, min(int(available), int(nodes) // NODES_PER_THREAD))


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` (``None`` or 0: leave torch alone).

    Nested or concurrent scopes share one saved value: the first to enter saves torch's
    setting and the last to leave restores it, so overlapping calls from serving threads
    never leave torch at a scope's count."""
    if not n:
        yield
        return
    import torch

    global _DEPTH, _SAVED
    with _LOCK:
        if _DEPTH == 0:
            _SAVED = torch.get_num_threads()
        _DEPTH += 1
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0 and torch.get_num_threads() != _SAVED:
                torch.set_num_threads(_SAVED)


__all__ = ["NODES_PER_THREAD", "threads_for", "torch_threads"]
