"""The split builds of the incremental tests, each built once per session: the sample corpus's
first ``SPLIT`` documents ("A") or all of it ("AB"), with the small extractor batch those tests
use. A test gets a private copy (copying ~300 kB is far cheaper than a build) and may change
it; the built folders themselves stay read-only (``tests/conftest.py`` checks that).

Those tests' runtime keeps one embedding cache (gpurag.embed.cache, outside every index) for
the session: the texts of the sample corpus are embedded by the model once, and the builds and
updates that compare against each other read the same float32 vectors back (what the model
gives again: batched and single vectors are bitwise equal, tests/embed/test_batching.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import (
    SAMPLE_CORPUS,
    _build_shared,
    read_jsonl,
    session_embeddings,
    write_jsonl,
)


@pytest.fixture(scope="session")
def split_runtime(tmp_path_factory):
    """The CPU runtime of the incremental tests, behind the session's embedding cache."""
    from gpurag.runtime import Runtime, Settings

    cache = session_embeddings(tmp_path_factory)
    return Runtime.create(Settings(embed_cache=str(cache)), device="cpu", progress=False)


@pytest.fixture(scope="session")
def split_index(tmp_path_factory, split_runtime):
    """``split_index(part, dst, runtime, **options)``: what ``Index.build(corpus[part], dst,
    runtime=runtime, show_progress=False, **options)`` gives under the tests' extractor batch
    (``part``: "A" or "AB"), opened on a copy of the session's build at ``dst``."""
    from gpurag import Index
    from gpurag.pipeline import graph_stage, incremental
    from tests.pipeline.test_incremental import BATCH, SPLIT

    records = read_jsonl(SAMPLE_CORPUS)
    root = tmp_path_factory.mktemp("split-corpus")
    sources = {"A": write_jsonl(root / "a" / "A.jsonl", records[:SPLIT]),
               "AB": write_jsonl(root / "ab" / "AB.jsonl", records)}
    built: dict[tuple, Path] = {}

    def get(part: str, dst: Path, runtime, **options):
        key = (part, *sorted(options.items()))
        if key not in built:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(graph_stage, "EXTRACT_BATCH", BATCH)
                mp.setattr(incremental, "EXTRACT_BATCH", BATCH)
                built[key] = _build_shared(
                    tmp_path_factory, f"split-{part}", sources[part],
                    runtime=split_runtime, **options)
        shutil.copytree(built[key], dst)
        return Index.open(dst, runtime=runtime)

    return get
