"""Atomic commit (an interrupted build keeps the old index) and resume (no re-embedding)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gpurag.pipeline.build as build_mod
from gpurag import Index, IndexConfig
from gpurag.backends.embed import load_embedder
from gpurag.device import resolve_device
from gpurag.store import layout
from tests.conftest import write_jsonl


class BoomError(RuntimeError):
    pass


def _build_embedder():
    """The cached instance the build pipeline will use."""
    return load_embedder(IndexConfig().embedder, device=resolve_device())


def _count_encodes(monkeypatch, fail_after: int | None = None) -> list[int]:
    """Wrap the pipeline's embedder.encode and encode_tokens (passages: the chunker's token
    ids): count calls, optionally raise after N calls."""
    emb = _build_embedder()
    real, real_tokens = type(emb).encode, type(emb).encode_tokens
    calls: list[int] = []

    def count(n: int) -> None:
        if fail_after is not None and len(calls) >= fail_after:
            raise BoomError("simulated crash while embedding")
        calls.append(n)

    def encode(texts, batch_size=64):
        count(len(texts))
        return real(emb, texts, batch_size=batch_size)

    def encode_tokens(flat, lengths, batch_size=64):
        count(len(lengths))
        return real_tokens(emb, flat, lengths, batch_size=batch_size)

    monkeypatch.setattr(emb, "encode", encode)
    monkeypatch.setattr(emb, "encode_tokens", encode_tokens)
    return calls


def _leftovers(out) -> set[str]:
    """What is beside the index besides itself and its embedding cache (kept on purpose)."""
    cache = layout.sibling(out, layout.EMBED_CACHE_SUFFIX).name
    return {p.name for p in out.parent.iterdir() if p.name not in (out.name, cache)}


@pytest.fixture
def corpora(tmp_path, sample_records):
    a = write_jsonl(tmp_path / "a" / "docs.jsonl", sample_records[:6])
    b = write_jsonl(tmp_path / "b" / "docs.jsonl", sample_records[6:16])
    return a, b


@pytest.mark.parametrize("where", ["save_index", "encode"])
def test_interrupted_build_keeps_previous_index(tmp_path, corpora, monkeypatch, where):
    src_a, src_b = corpora
    out = tmp_path / "out" / "index"
    first = Index.build(src_a, out, graph=False, show_progress=False)
    a_ids = sorted(first.chunks["chunk_id"])

    with monkeypatch.context() as m:
        if where == "save_index":
            def fail(*args, **kwargs):
                raise BoomError("simulated crash while writing")
            m.setattr(build_mod, "save_index", fail)
        else:
            _count_encodes(m, fail_after=1)
        with pytest.raises(BoomError):
            Index.build(src_b, out, graph=False, show_progress=False, ingest_batch_chunks=8)

    still = Index.open(out, verify=True)
    assert still.manifest.counts["chunks"] == len(a_ids)
    assert sorted(still.chunks["chunk_id"]) == a_ids
    assert set(still.chunks["doc_id"]) <= {r for r in first.chunks["doc_id"]}
    assert not (out.parent / ".index.tmp").exists()
    assert ".index.tmp" not in _leftovers(out)

    # After the failure, the same build succeeds and replaces A by B.
    second = Index.build(src_b, out, graph=False, show_progress=False, ingest_batch_chunks=8)
    assert second.manifest.counts["documents"] == 10
    assert not set(second.chunks["chunk_id"]) & set(a_ids)
    assert _leftovers(out) == set(), "no .tmp, .old or .work folder after a successful build"


def test_crash_between_renames_is_recovered(tmp_path, corpora):
    src_a, _ = corpora
    out = tmp_path / "index"
    stale = tmp_path / ".index.tmp"  # left by a build killed with SIGKILL
    stale.mkdir()
    (stale / "junk.npy").write_bytes(b"junk")
    built = Index.build(src_a, out, graph=False, show_progress=False)
    assert not stale.exists(), "a stale temporary folder is cleaned by the next build"
    assert "junk.npy" not in built.manifest.files
    n = len(built.chunks)
    os.rename(out, tmp_path / ".index.old")  # the state after the first rename of a commit
    reopened = Index.open(out)
    assert len(reopened.chunks) == n
    assert out.is_dir() and not (tmp_path / ".index.old").exists()


def test_build_refuses_to_replace_a_foreign_directory(tmp_path, corpora):
    from gpurag.errors import IndexFormatError

    src_a, _ = corpora
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("do not delete", encoding="utf-8")
    with pytest.raises(IndexFormatError, match="not a gpurag index"):
        Index.build(src_a, out, graph=False, show_progress=False)
    assert (out / "thesis.tex").read_text(encoding="utf-8") == "do not delete"
    assert not (tmp_path / ".precious.tmp").exists()


def test_resume_does_not_re_embed_finished_parts(tmp_path, sample_records, monkeypatch):
    src = write_jsonl(tmp_path / "src" / "docs.jsonl", sample_records[:14])
    opts = dict(graph=False, show_progress=False, ingest_batch_chunks=6)  # 3 docs a part

    # Reference: an uninterrupted build of the same input and settings elsewhere.
    with monkeypatch.context() as m:
        full_calls = _count_encodes(m)
        ref = Index.build(src, tmp_path / "ref" / "index", **opts)
    assert len(full_calls) > 2, "the build must embed in several parts for this test"

    out = tmp_path / "out" / "index"
    done_before_crash = 2
    with monkeypatch.context() as m:
        crashed_calls = _count_encodes(m, fail_after=done_before_crash)
        with pytest.raises(BoomError):
            Index.build(src, out, **opts)
    assert len(crashed_calls) == done_before_crash
    assert not out.exists()
    assert (out.parent / ".index.work").is_dir(), "the finished parts are kept for a resume"

    with monkeypatch.context() as m:
        resumed_calls = _count_encodes(m)
        index = Index.build(src, out, **opts)
    assert len(resumed_calls) == len(full_calls) - done_before_crash
    assert resumed_calls == full_calls[done_before_crash:]
    assert sum(resumed_calls) + sum(crashed_calls) == len(ref.chunks)

    assert index.chunks["chunk_id"].tolist() == ref.chunks["chunk_id"].tolist()
    assert index.manifest.counts == ref.manifest.counts
    np.testing.assert_allclose(index.passage_vectors(),
                               ref.passage_vectors(), atol=1e-6)
    assert index.manifest.extra["ingest"]["documents"] == 14
    assert _leftovers(out) == set()


def test_changed_input_discards_old_work(tmp_path, sample_records, monkeypatch):
    """A resume only reuses parts of the same input and settings."""
    src = write_jsonl(tmp_path / "src" / "docs.jsonl", sample_records[:9])
    out = tmp_path / "out" / "index"
    opts = dict(graph=False, show_progress=False, ingest_batch_chunks=6)
    with monkeypatch.context() as m:
        _count_encodes(m, fail_after=1)
        with pytest.raises(BoomError):
            Index.build(src, out, **opts)
    write_jsonl(src, sample_records[20:29])  # other documents, other size
    with monkeypatch.context() as m:
        calls = _count_encodes(m)
        index = Index.build(src, out, **opts)
    assert sum(calls) == len(index.chunks), "every chunk of the new input embedded afresh"
    assert set(index.chunks["doc_id"]) == {r["id"] for r in sample_records[20:29]}


def test_rebuild_with_index_inside_source_folder(tmp_path, sample_records):
    src = tmp_path / "docs"
    write_jsonl(src / "a.jsonl", sample_records[:4])
    out = src / "index"
    first = Index.build(src, out, graph=False, show_progress=False)
    second = Index.build(src, out, graph=False, show_progress=False)
    assert second.manifest.extra["ingest"]["files"] == first.manifest.extra["ingest"]["files"]
    assert second.manifest.counts == first.manifest.counts


def test_build_onto_a_regular_file_is_refused_cleanly(tmp_path, sample_records):
    from gpurag.errors import IndexFormatError

    src = write_jsonl(tmp_path / "src.jsonl", sample_records[:2])
    out = tmp_path / "out"
    out.write_text("not an index", encoding="utf-8")
    with pytest.raises(IndexFormatError):
        Index.build(src, out, graph=False, show_progress=False)
    assert out.read_text(encoding="utf-8") == "not an index"


def test_resume_survives_new_mtimes_of_the_same_bytes(tmp_path, sample_records, monkeypatch):
    """A corpus copied or restored again (new modification times, same bytes) still resumes:
    the fingerprint is the content, not the file's times."""
    src = write_jsonl(tmp_path / "src" / "docs.jsonl", sample_records[:9])
    out = tmp_path / "out" / "index"
    opts = dict(graph=False, show_progress=False, ingest_batch_chunks=6)
    with monkeypatch.context() as m:
        crashed = _count_encodes(m, fail_after=1)
        with pytest.raises(BoomError):
            Index.build(src, out, **opts)
    later = src.stat().st_mtime + 3600
    os.utime(src, (later, later))
    with monkeypatch.context() as m:
        resumed = _count_encodes(m)
        index = Index.build(src, out, **opts)
    assert sum(crashed) + sum(resumed) == len(index.chunks), "nothing embedded twice"

    # one byte changed, same size and times: not the same input
    with monkeypatch.context() as m:
        _count_encodes(m, fail_after=1)
        with pytest.raises(BoomError):
            Index.build(src, tmp_path / "out2" / "index", **opts)
    data = bytearray(src.read_bytes())
    data[data.index(b"a")] = ord("e")
    src.write_bytes(bytes(data))
    os.utime(src, (later, later))
    with monkeypatch.context() as m:
        calls = _count_encodes(m)
        again = Index.build(src, tmp_path / "out2" / "index", **opts)
    assert sum(calls) == len(again.chunks), "a changed input is embedded afresh"


def test_changed_graph_setting_keeps_embeddings_and_extraction(tmp_path, sample_records,
                                                               monkeypatch, caplog):
    """A build that died in the graph stage, rerun with another merge threshold, redoes only
    what that setting changes: no passage is embedded and no chunk extracted again."""
    import gpurag.pipeline.graph_stage as graph_stage
    from gpurag.extract.fast import FastExtractor
    from gpurag.pipeline.chunk_embed import embed_text

    src = write_jsonl(tmp_path / "src" / "docs.jsonl", sample_records[:12])
    out = tmp_path / "out" / "index"
    with monkeypatch.context() as m:
        def boom(*args, **kwargs):
            raise BoomError("simulated crash in alias resolution")
        m.setattr(graph_stage, "resolve_entities", boom)
        with pytest.raises(BoomError):
            Index.build(src, out, show_progress=False)

    embedded: list[str] = []
    extracted: list[int] = []
    emb = _build_embedder()
    real_encode, real_extract = type(emb).encode, FastExtractor.extract
    with monkeypatch.context() as m:
        m.setattr(emb, "encode", lambda texts, batch_size=64: (
            embedded.extend(texts), real_encode(emb, texts, batch_size=batch_size))[1])
        m.setattr(emb, "encode_tokens", lambda flat, lengths, batch_size=64: (
            embedded.append("passages by token ids"), 1 / 0))
        m.setattr(FastExtractor, "extract", lambda self, chunks, offset=0: (
            extracted.append(len(chunks)), real_extract(self, chunks, offset))[1])
        with caplog.at_level("INFO", logger="gpurag.pipeline.workdir"):
            index = Index.build(src, out, show_progress=False, merge_threshold=0.85)
    assert extracted == [], "the extraction checkpoints were kept"
    passages = {embed_text(t, x) for t, x in zip(index.chunks["title"], index.chunks["text"],
                                                 strict=True)}
    assert embedded and not passages & set(embedded), "only names and facts were embedded"
    assert index.manifest.config["merge_threshold"] == 0.85
    assert "merge_threshold" in caplog.text and "chunk_embed, extract" in caplog.text

    ref = Index.build(src, tmp_path / "ref" / "index", show_progress=False, merge_threshold=0.85)
    assert index.manifest.counts == ref.manifest.counts


def test_changed_extractor_setting_keeps_embeddings(tmp_path):
    """Stage order: a changed extraction setting discards the extraction, not the chunks."""
    from gpurag.pipeline.workdir import WorkDir

    target = tmp_path / "index"
    first = WorkDir(target, {"chunk_embed": {"source": "s"}, "extract": {"extractor": "fast"},
                             "rest": {"seed": 1}})
    first.state["chunk_embed"] = {"done": True, "parts": 1}
    first.state["extract"] = {"done_rows": 5, "parts": 1}
    first.path("chunks/part-00000.parquet").write_bytes(b"x")
    first.path("extract/mentions-00000.parquet").write_bytes(b"x")
    first.save()
    second = WorkDir(target, {"chunk_embed": {"source": "s"}, "extract": {"extractor": "llm"},
                              "rest": {"seed": 1}})
    assert second.resumed and second.state["chunk_embed"] == {"done": True, "parts": 1}
    assert "extract" not in second.state
    assert (second.root / "chunks/part-00000.parquet").exists()
    assert not (second.root / "extract").exists()
    third = WorkDir(target, {"chunk_embed": {"source": "t"}, "extract": {"extractor": "llm"},
                             "rest": {"seed": 1}})
    assert not third.resumed and not (third.root / "chunks").exists()


def test_an_unreadable_input_file_does_not_stop_the_fingerprint(tmp_path, monkeypatch):
    """Ingest skips and reports a file it cannot read; the resume fingerprint marks it instead
    of failing the build before it starts."""
    import builtins

    from gpurag.ingest import readers

    good = tmp_path / "src" / "a.txt"
    good.parent.mkdir()
    good.write_text("Some text.", encoding="utf-8")
    locked = tmp_path / "src" / "b.txt"
    locked.write_text("Other text.", encoding="utf-8")
    before = readers.source_fingerprint(good.parent)

    def guarded_open(path, *args, **kwargs):
        if str(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(readers, "open", guarded_open, raising=False)
    monkeypatch.setattr(readers, "_DIGESTS", {})
    assert readers.file_digest(locked) == "unreadable:13"
    assert readers.source_fingerprint(good.parent) != before


def test_a_damaged_state_file_discards_the_work_instead_of_failing(tmp_path):
    import json

    from gpurag.pipeline.workdir import WorkDir

    stages = {"chunk_embed": {"source": "s"}, "extract": {"extractor": "fast"}}
    work = WorkDir(tmp_path / "index", stages)
    work.state["chunk_embed"] = {"done": True}
    work.save()
    state = json.loads((work.root / "state.json").read_text())
    state["key"], state["inputs"]["chunk_embed"] = "other", ["not", "a", "mapping"]
    (work.root / "state.json").write_text(json.dumps(state))
    again = WorkDir(tmp_path / "index", stages)
    assert not again.resumed
    (again.root / "state.json").write_text("{not json")
    assert not WorkDir(tmp_path / "index", stages).resumed


def test_the_graph_steps_after_extraction_show_progress(tmp_path, sample_records, capsys):
    """Alias resolution, facts, Leiden and the fact vectors take minutes on a large corpus:
    a bar names the running step, after the extraction's."""
    from gpurag.runtime import Runtime

    src = write_jsonl(tmp_path / "src" / "docs.jsonl", sample_records[:6])
    Index.build(src, tmp_path / "index", runtime=Runtime.create(device="cpu", progress=True))
    err = capsys.readouterr().err
    assert "extract (" in err and "graph: 100%" in err and "5/5" in err
    for step in ("resolving aliases", "Leiden communities", "facts", "writing"):
        assert step in err
    Index.build(src, tmp_path / "quiet", show_progress=False)
    assert "graph:" not in capsys.readouterr().err


def _three_files(folder, records):
    """A folder corpus of three JSONL files, four documents each (two documents a part)."""
    for i, name in enumerate(("a.jsonl", "b.jsonl", "c.jsonl")):
        write_jsonl(folder / name, records[4 * i:4 * i + 4])
    return folder


def _same_index(index, ref) -> None:
    assert index.chunks["chunk_id"].tolist() == ref.chunks["chunk_id"].tolist()
    assert index.manifest.counts == ref.manifest.counts
    assert index.manifest.extra["ingest"] == ref.manifest.extra["ingest"]
    np.testing.assert_array_equal(index.passage_vectors(), ref.passage_vectors())


def _edited_resume(tmp_path, sample_records, monkeypatch, edit, crash):
    """Build killed by ``crash`` (a context manager), ``edit`` the corpus, rerun: the
    rerun's embed calls, a fresh build's embed calls, and both indexes."""
    opts = dict(graph=False, show_progress=False, ingest_batch_chunks=4)
    src = _three_files(tmp_path / "src", sample_records)
    out = tmp_path / "out" / "index"
    with monkeypatch.context() as m:
        crash(m)
        with pytest.raises(BoomError):
            Index.build(src, out, **opts)
    edit(src)
    with monkeypatch.context() as m:
        fresh_calls = _count_encodes(m)
        ref = Index.build(src, tmp_path / "ref" / "index", **opts)
    with monkeypatch.context() as m:
        calls = _count_encodes(m)
        index = Index.build(src, out, **opts)
    _same_index(index, ref)
    assert _leftovers(out) == set()
    return calls, fresh_calls


def _kill_after(n):
    return lambda m: _count_encodes(m, fail_after=n)


def test_editing_the_last_file_keeps_the_parts_of_the_files_before(
        tmp_path, sample_records, monkeypatch, caplog):
    def edit(src):
        write_jsonl(src / "c.jsonl", sample_records[20:24])

    with caplog.at_level("WARNING"):
        calls, fresh = _edited_resume(tmp_path, sample_records, monkeypatch, edit,
                                      _kill_after(5))
    assert len(fresh) == 6, "two documents a part, three files of four"
    assert calls == fresh[4:], "only the two parts of the edited file are embedded again"
    assert "after 2 unchanged files (4 parts); c.jsonl changed" in caplog.text


def test_editing_the_first_file_redoes_everything(tmp_path, sample_records, monkeypatch):
    def edit(src):
        write_jsonl(src / "a.jsonl", sample_records[20:24])

    calls, fresh = _edited_resume(tmp_path, sample_records, monkeypatch, edit,
                                  _kill_after(5))
    assert calls == fresh


def test_a_file_added_after_stage_one_keeps_its_parts(tmp_path, sample_records, monkeypatch):
    """Stage 1 finished, the build failed later; a new last file: only its parts are embedded
    (the final part before it was full, so it did not depend on the end of the input)."""
    def fail_later(m):
        def boom(*a, **k):
            raise BoomError("simulated failure after stage 1")
        m.setattr(build_mod, "write_dense_part", boom)

    def edit(src):
        write_jsonl(src / "d.jsonl", sample_records[20:24])

    calls, fresh = _edited_resume(tmp_path, sample_records, monkeypatch, edit, fail_later)
    assert len(fresh) == 8
    assert calls == fresh[6:]


def test_a_final_part_closed_by_the_end_of_input_is_redone(tmp_path, sample_records,
                                                           monkeypatch):
    """Five documents in the last file: the final part holds one, closed by the end of the
    input, so a file added after it may extend it: it is redone."""
    def fail_later(m):
        write_jsonl(tmp_path / "src" / "c.jsonl", sample_records[8:13])

        def boom(*a, **k):
            raise BoomError("simulated failure after stage 1")
        m.setattr(build_mod, "write_dense_part", boom)

    def edit(src):
        write_jsonl(src / "d.jsonl", sample_records[20:24])

    calls, fresh = _edited_resume(tmp_path, sample_records, monkeypatch, edit, fail_later)
    assert len(fresh) == 9, "two parts each for a, b and d (shifted by one); three for c"
    assert calls == fresh[6:]


def test_an_older_work_folder_without_file_digests_redoes_stage_one(
        tmp_path, sample_records, monkeypatch):
    import json

    opts = dict(graph=False, show_progress=False, ingest_batch_chunks=4)
    src = _three_files(tmp_path / "src", sample_records)
    out = tmp_path / "out" / "index"
    with monkeypatch.context() as m:
        _count_encodes(m, fail_after=5)
        with pytest.raises(BoomError):
            Index.build(src, out, **opts)
    state_path = out.parent / ".index.work" / "state.json"
    state = json.loads(state_path.read_text())
    for key in ("reach", "source_files"):  # what an older build did not record
        state["chunk_embed"].pop(key, None)
    state_path.write_text(json.dumps(state))
    write_jsonl(src / "c.jsonl", sample_records[20:24])
    with monkeypatch.context() as m:
        calls = _count_encodes(m)
        index = Index.build(src, out, **opts)
    assert sum(calls) == len(index.chunks)
