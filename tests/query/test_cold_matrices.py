"""A cold ``GraphRetriever`` publishes its two graph blocks together (review Q, bug 1), and
builds them once however many cold threads ask (a second caller waits for the first's pair)."""

from __future__ import annotations

import threading
import types

import scipy.sparse as sp

from gpurag import Index
from gpurag.query import graph as graph_mod


def test_a_concurrent_cold_caller_never_gets_a_half_built_pair(graph_index_path, monkeypatch):
    """Thread ``held`` waits between its two slices of the graph; a second thread's call to
    ``_matrices`` in that gap must return both blocks, not ``(mentions, None)``: the very pair
    ``held`` built."""
    gap, go = threading.Event(), threading.Event()
    slices: list[int] = []

    class HeldFull:
        """The graph as a CSR array whose second slice in thread ``held`` waits for ``go``."""

        def __init__(self, *args, **kwargs) -> None:
            self.full = sp.csr_array(*args, **kwargs)

        def __getitem__(self, key):
            if threading.current_thread().name == "held":
                slices.append(1)
                if len(slices) == 2:
                    gap.set()
                    assert go.wait(30), "the main thread never read the matrices"
            return self.full[key]

    index = Index.open(graph_index_path)
    try:
        r = index.retriever
        monkeypatch.setattr(graph_mod, "sp", types.SimpleNamespace(csr_array=HeldFull))
        out: list[tuple] = []
        held = threading.Thread(target=lambda: out.append(r._matrices()), name="held")
        held.start()
        assert gap.wait(30), "thread held never reached its second slice"
        late: list[tuple] = []
        second = threading.Thread(target=lambda: late.append(r._matrices()), name="second")
        second.start()
        go.set()
        held.join(30)
        second.join(30)
        seen = late[0]
        assert seen is out[0]
        assert seen[0] is not None and seen[1] is not None
        assert out and out[0][0] is not None and out[0][1] is not None
        assert (seen[0] != out[0][0]).nnz == 0 and (seen[1] != out[0][1]).nnz == 0
    finally:
        index.close()
