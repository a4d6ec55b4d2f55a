"""Reading is lazy: the first documents of a huge file come without reading the whole file."""

from __future__ import annotations

import gzip
import itertools
import time
import tracemalloc

import pytest

from gpurag.ingest import IngestReport, iter_documents

N_LINES = 200_000


def _write_big(path, gz: bool) -> int:
    """Write N_LINES distinct records (about 25 MB uncompressed); return the uncompressed size."""
    pad = "lorem ipsum dolor sit amet " * 3
    data = "".join(
        f'{{"id": "d{i}", "title": "Title {i}", "text": "Record number {i}. {pad}"}}\n'
        for i in range(N_LINES)
    ).encode()
    if gz:
        with gzip.open(path, "wb", compresslevel=1) as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return len(data)


@pytest.mark.parametrize("name", ["big.jsonl", "big.jsonl.gz"])
def test_first_documents_do_not_read_whole_file(tmp_path, name):
    path = tmp_path / name
    size = _write_big(path, gz=name.endswith(".gz"))
    assert size > 20_000_000

    report = IngestReport()
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        gen = iter_documents(path, report)
        first = list(itertools.islice(gen, 10))
        head_s = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert [d.doc_id for d in first] == [f"d{i}" for i in range(10)]
    # Reading the whole file (or even 1/50 of it) would allocate at least that much.
    assert peak < size / 50, f"peak {peak} bytes while reading 10 docs of a {size}-byte file"
    # The report counts what was consumed, not the whole file.
    assert report.documents == 10

    # The rest of the stream is still there and complete.
    t0 = time.perf_counter()
    rest = sum(1 for _ in gen)
    full_s = time.perf_counter() - t0
    assert rest == N_LINES - 10
    assert report.documents == N_LINES
    assert head_s < full_s, "taking 10 documents should be much cheaper than reading them all"
