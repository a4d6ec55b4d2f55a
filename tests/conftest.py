"""Fixtures every test shares: a clean environment, the bundled sample corpus, and the sample
indexes each built once per test session (read-only; a test that changes one copies it)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = SAMPLE_DIR = REPO / "examples" / "sample"
SAMPLE_CORPUS = SAMPLE_DIR / "corpus.jsonl"
SAMPLE_QUESTIONS = SAMPLE_DIR / "questions.jsonl"
STRAY = ("GPURAG_INDEX_", "GPURAG_QUERY_")
STRAY_NAMES = ("GPURAG_CONFIG", "GPURAG_THREADS")


def clean_env(mp: pytest.MonkeyPatch) -> None:
    """No progress bars, and no stray user settings leaking into the tests."""
    mp.setenv("GPURAG_PROGRESS", "0")
    # The default embedding cache beside each index is off in tests (a test's own
    # GPURAG_EMBED_CACHE, or its removal, turns it on): folder listings stay exact.
    mp.setenv("GPURAG_EMBED_CACHE", "off")
    for name in list(os.environ):
        if name.startswith(STRAY) or name in STRAY_NAMES:
            mp.delenv(name)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No progress bars, and no stray user settings leaking into the tests."""
    clean_env(monkeypatch)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()
            if line.strip()]


def write_jsonl(path: Path, records: list, gz: bool = False) -> Path:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path


def copy_index(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="session")
def sample_records() -> list[dict]:
    return read_jsonl(SAMPLE_CORPUS)


@pytest.fixture(scope="session")
def sample_by_id(sample_records) -> dict[str, dict]:
    return {r["id"]: r for r in sample_records}


@pytest.fixture(scope="session")
def sample_questions() -> list[dict]:
    return read_jsonl(SAMPLE_QUESTIONS)


@pytest.fixture(scope="session")
def embedder():
    from gpurag.backends.embed import load_embedder
    from gpurag.device import resolve_device

    # The same call (and so the same cached instance) as the build pipeline's.
    return load_embedder("minilm", device=resolve_device())


@pytest.fixture(scope="session")
def sample_index_path(tmp_path_factory) -> Path:
    """The sample corpus indexed once (dense only) for every read-only test."""
    from gpurag import Index

    out = tmp_path_factory.mktemp("sample") / "index"
    Index.build(SAMPLE_CORPUS, out, graph=False, show_progress=False)
    return out


@pytest.fixture(scope="session")
def sample_index(sample_index_path):
    from gpurag import Index

    return Index.open(sample_index_path)


@pytest.fixture
def index_copy(sample_index_path, tmp_path) -> Path:
    """A private copy of the sample index, free to corrupt."""
    return copy_index(sample_index_path, tmp_path / "index")


@pytest.fixture(scope="session")
def graph_index(tmp_path_factory):
    """The sample corpus indexed once with its knowledge graph (read-only: copy to change)."""
    from gpurag import Index

    out = tmp_path_factory.mktemp("graph") / "sample.index"
    return Index.build(SAMPLE_CORPUS, out, show_progress=False)
