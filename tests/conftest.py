"""Fixtures every test shares: a clean environment, the bundled sample corpus, and the sample
indexes each built once per test session (read-only; a test that changes one copies it)."""

from __future__ import annotations

import gc
import gzip
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_configure(config) -> None:
    """Ctrl-C reaches the tests' child processes: a shell without job control starts a
    background job (``pytest ... &``) with SIGINT ignored, and an ignored signal is inherited
    through exec, so the tests that interrupt a child (an LLM batch, ``gpurag llm serve``)
    would wait in vain. A handler, unlike an ignore, is reset to the default in each child."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


REPO = Path(__file__).resolve().parents[1]
SAMPLE = SAMPLE_DIR = REPO / "examples" / "sample"
SAMPLE_CORPUS = SAMPLE_DIR / "corpus.jsonl"
SAMPLE_QUESTIONS = SAMPLE_DIR / "questions.jsonl"
TESTS = REPO / "tests"
NOTES_CORPUS = TESTS / "data" / "notes_corpus.jsonl"
SECOND_HOP_CORPUS = TESTS / "query" / "data" / "second_hop_corpus.jsonl"
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


@pytest.fixture(scope="module", autouse=True)
def _collect_after_module():
    """A full collection after each test module: an opened index (an object in reference
    cycles) holds its memory maps and pinned files until the cycle collector runs, which in
    one long test process can be rare enough to pass 1,024 open descriptors."""
    yield
    gc.collect()


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
def llm_url(tmp_path_factory) -> Iterator[str]:
    """Base URL (``.../v1``) of the session's real local OpenAI-compatible server, started once
    for every test folder that asks for it (tests/llm/conftest.py says how, and when it skips)."""
    from tests.llm.conftest import serve_llm

    yield from serve_llm(tmp_path_factory)


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

    # The same call (and so the same cached instance) as the build pipeline's, under the
    # tests' clean environment (a developer's GPURAG_DEVICE must not choose it).
    with pytest.MonkeyPatch.context() as mp:
        clean_env(mp)
        return load_embedder("minilm", device=resolve_device())


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


_EMBEDDINGS: dict[str, Path] = {}


def session_embeddings(tmp_path_factory) -> Path:
    """The session's embedding cache folder (gpurag.embed.cache, outside every index): a
    text is embedded by the model once, and a later build reads its vector back (the model's
    own float32 bytes: batched and single vectors are bitwise equal,
    tests/embed/test_batching.py), so a build gives the index it gives without the cache."""
    if "dir" not in _EMBEDDINGS:
        _EMBEDDINGS["dir"] = tmp_path_factory.mktemp("embeddings")
    return _EMBEDDINGS["dir"]


@pytest.fixture
def shared_embeddings(monkeypatch, tmp_path_factory) -> Path:
    """Builds in this test use the session's embedding cache (opt in, with
    ``pytestmark = pytest.mark.usefixtures("shared_embeddings")``, where no test counts the
    embedder's calls or times a process that embeds)."""
    path = session_embeddings(tmp_path_factory)
    monkeypatch.setenv("GPURAG_EMBED_CACHE", str(path))
    return path


def _build_shared(tmp_path_factory, name: str, source: Path, **options) -> Path:
    """Builds one shared session index under a clean environment (and the session's
    embedding cache); at the end of the session it checks that no test changed it (a test
    that changes an index works on a copy)."""
    from gpurag import Index

    out = tmp_path_factory.mktemp(name) / "index"
    with pytest.MonkeyPatch.context() as mp:
        clean_env(mp)
        mp.setenv("GPURAG_EMBED_CACHE", str(session_embeddings(tmp_path_factory)))
        for stray in BUILD_STRAY:
            mp.delenv(stray, raising=False)
        Index.build(source, out, show_progress=False, **options).close()
    _SHARED[out] = _files(out)
    return out


def _open_clean(path: Path):
    """``Index.open`` under the tests' clean environment: a session fixture is set up before
    the per-test ``_clean_env``, and an index opened with a developer's ``GPURAG_*`` settings
    (query defaults, device, threads) would carry them into every test that uses it."""
    from gpurag import Index

    with pytest.MonkeyPatch.context() as mp:
        clean_env(mp)
        return Index.open(path)


_SHARED: dict[Path, dict[str, tuple[int, int]]] = {}
BUILD_STRAY = ("GPURAG_LLM_URL", "GPURAG_API_KEYS")


@pytest.fixture(scope="session", autouse=True)
def _shared_indexes_unchanged():
    """Every shared session index is read-only: the session fails if a test changed one."""
    yield
    changed = [str(path) for path, files in _SHARED.items() if _files(path) != files]
    assert not changed, f"a test changed a shared session index (copy it first): {changed}"


@pytest.fixture(scope="session")
def sample_index_path(tmp_path_factory) -> Path:
    """The sample corpus indexed once (dense only) for every read-only test."""
    return _build_shared(tmp_path_factory, "sample", SAMPLE_CORPUS, graph=False)


@pytest.fixture(scope="session")
def sample_index(sample_index_path):
    return _open_clean(sample_index_path)


@pytest.fixture
def index_copy(sample_index_path, tmp_path) -> Path:
    """A private copy of the sample index, free to corrupt."""
    return copy_index(sample_index_path, tmp_path / "index")


@pytest.fixture(scope="session")
def graph_index_path(tmp_path_factory) -> Path:
    """The sample corpus indexed once with its knowledge graph (read-only: copy to change)."""
    return _build_shared(tmp_path_factory, "graph", SAMPLE_CORPUS)


@pytest.fixture(scope="session")
def graph_index(graph_index_path):
    """The session's graph index of the sample corpus, opened."""
    return _open_clean(graph_index_path)


@pytest.fixture(scope="session")
def rerank_index_path(tmp_path_factory) -> Path:
    """``tests/rerank/data/corpus.jsonl`` (multi-hop pages with questions) with its graph."""
    return _build_shared(tmp_path_factory, "rerank", TESTS / "rerank" / "data" / "corpus.jsonl")


@pytest.fixture(scope="session")
def notes_index_path(tmp_path_factory) -> Path:
    """``tests/data/notes_corpus.jsonl`` (chat notes, no bridge pages) with its graph."""
    return _build_shared(tmp_path_factory, "notes", NOTES_CORPUS)


@pytest.fixture(scope="session")
def second_hop_index_path(tmp_path_factory) -> Path:
    """``tests/query/data/second_hop_corpus.jsonl`` (pages that mention each other)."""
    return _build_shared(tmp_path_factory, "hop2", SECOND_HOP_CORPUS)
