"""An IVF index's direct map is built once, even when threads decode from it together."""

from __future__ import annotations

import threading

import numpy as np

from gpurag.vectors.codec import decode_all
from gpurag.vectors.faiss_setup import configured_faiss


def test_threads_decoding_one_ivf_index_build_its_direct_map_once():
    faiss = configured_faiss()
    x = np.random.default_rng(0).random((300, 8), dtype=np.float32)
    index = faiss.IndexIVFFlat(faiss.IndexFlatL2(8), 8, 4)
    index.train(x)
    index.add(x)
    built, arrived = [], threading.Event()
    real = index.make_direct_map

    def slow_build(*args):  # the first builder waits until another thread decodes too
        built.append(1)
        arrived.wait(1.0)
        return real(*args)

    index.make_direct_map = slow_build
    barrier = threading.Barrier(4)
    out: list[np.ndarray] = []

    def decode() -> None:
        barrier.wait()
        if built:  # another thread is already inside the build: let it go on
            arrived.set()
        out.append(decode_all(index, np.arange(0, 300, 7)))

    threads = [threading.Thread(target=decode) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1
    decode_all(index)
    assert len(built) == 1, "a decode after the map exists must not rebuild it"
    for got in out:
        np.testing.assert_array_equal(got, x[::7])
