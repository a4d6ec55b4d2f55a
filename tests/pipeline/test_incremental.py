"""Incremental indexing (issue 13): an exact insert and a delete give what a full build of the
result gives (the default, local insert: test_incremental_local.py).

The sample corpus split A/B: ``build(A) + insert(B)`` against ``build(A ∪ B)`` and
``build(A ∪ B) + delete(B)`` against ``build(A)``, compared file by file (every file of the
index, byte for byte) and by retrieval (top-5 and Recall@5 on the sample questions). The
extractor batch is made small so that the stored extraction is really reused (and the batch a
change touches really re-extracted). A deleted document's unique marker must be nowhere in the
new version: no table, no array-derived text, no search result, no file's bytes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from gpurag import Index
from gpurag.cli import main
from gpurag.errors import IndexBusyError, InputError
from gpurag.metrics import gold_ranks, recall_at
from gpurag.pipeline import graph_stage, incremental
from gpurag.store import WriteLock, layout, open_index_dir
from tests.conftest import _build_shared, copy_index

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample"
SPLIT = 30  # A: the first 30 documents, B: the other 27
BATCH = 8  # extractor batch: the stored extraction of A is reused up to chunk 24
MARKER = "Quorvantix Zelmidor"


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch):
    monkeypatch.setattr(graph_stage, "EXTRACT_BATCH", BATCH)
    monkeypatch.setattr(incremental, "EXTRACT_BATCH", BATCH)


@pytest.fixture(scope="module")
def runtime(split_runtime):
    return split_runtime  # tests/pipeline/conftest.py: CPU, one embedding cache a session


def _records() -> list[dict]:
    lines = (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _questions() -> list[dict]:
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _file_digests(index: Index) -> dict[str, str]:
    return {rel: meta["sha256"] for rel, meta in index.manifest.files.items()}


def _retrieval(index: Index) -> tuple[list[list[str]], float]:
    qs = _questions()
    results = index.query_batch([q["question"] for q in qs], k=5)
    top = [[p.doc_id for p in r.passages] for r in results]
    ranks = [gold_ranks(t, q["gold_ids"]) for t, q in zip(top, qs, strict=True)]
    return top, recall_at(ranks, 5)


def assert_equivalent(got: Index, want: Index) -> None:
    """Same files byte for byte (so same chunks, vectors, entities, graph, communities), the
    same counts, and the same top-5 and Recall@5."""
    a, b = _file_digests(got), _file_digests(want)
    assert set(a) == set(b)
    assert [rel for rel in a if a[rel] != b[rel]] == []
    assert got.manifest.counts == want.manifest.counts
    (top_a, rec_a), (top_b, rec_b) = _retrieval(got), _retrieval(want)
    same = np.mean([x == y for x, y in zip(top_a, top_b, strict=True)])
    assert same >= 0.95 and abs(rec_a - rec_b) <= 0.01


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    records = _records()
    return {"A": _write(root / "a" / "A.jsonl", records[:SPLIT]),
            "B": _write(root / "b" / "B.jsonl", records[SPLIT:]),
            "AB": _write(root / "ab" / "AB.jsonl", records),
            "b_ids": [r["id"] for r in records[SPLIT:]]}


def test_build_then_insert_equals_build_of_the_union(split_index, tmp_path, corpus, runtime):
    base = split_index("A", tmp_path / "inc", runtime)
    grown = base.insert(corpus["B"], show_progress=False, exact=True)
    full = split_index("AB", tmp_path / "full", runtime)
    assert_equivalent(grown, full)
    r = grown.last_update
    assert r.version == 2 and r.documents == corpus["b_ids"] and r.chunks == 27
    # only the new chunks and the open batch they join were extracted: 57 - 24
    assert r.reextracted_chunks == 57 - (SPLIT // BATCH) * BATCH
    # stored name and fact vectors reused: only names/facts new to the union were embedded
    old_names = set(base.dir.table(layout.NAMES)["name"])
    old_facts = set(base.dir.table(layout.FACTS)["text"])
    new_names = set(full.dir.table(layout.NAMES)["name"]) - old_names
    new_facts = set(full.dir.table(layout.FACTS)["text"]) - old_facts - old_names
    assert r.reused_vectors > 0
    assert r.embedded_texts == len(new_names) + len(new_facts - new_names)
    # lineage in the manifest
    extra = grown.manifest.extra
    assert extra["version"] == 2 and extra["parent"]["version"] == 1
    assert extra["parent"]["checksum"] == base.manifest.checksum
    assert extra["change"]["op"] == "insert"
    assert extra["change"]["documents"] == {"count": 27, "ids": corpus["b_ids"]}
    assert extra["communities"] == "full re-cluster"
    assert base.query("Who founded Kestrel Dynamics?").passages  # the old object still reads


def test_insert_equals_build_with_each_index_embedding_on_its_own(tmp_path, corpus,
                                                                   monkeypatch):
    """As in production, without the tests' session embedding cache: A's build, B's insert
    (which embeds B's new texts in batches of their own) and the build of the union (which
    embeds them among A's) each embed what they need themselves; the files must still be the
    same byte for byte (vectors independent of what they were batched with)."""
    from gpurag.runtime import Runtime, Settings

    monkeypatch.setattr(graph_stage, "EXTRACT_BATCH", BATCH)
    monkeypatch.setattr(incremental, "EXTRACT_BATCH", BATCH)
    own = Runtime.create(Settings(), device="cpu", progress=False)  # each index's own cache
    base = Index.build(corpus["A"], tmp_path / "a" / "inc", runtime=own, show_progress=False)
    grown = base.insert(corpus["B"], show_progress=False, exact=True)
    full = Index.build(corpus["AB"], tmp_path / "ab" / "full", runtime=own,
                       show_progress=False)
    assert grown.last_update.embedded_texts > 0  # B's names and facts were embedded anew
    assert_equivalent(grown, full)


def test_delete_equals_build_of_what_remains(split_index, tmp_path, corpus, runtime):
    full = split_index("AB", tmp_path / "full", runtime)
    shrunk = full.delete(corpus["b_ids"], show_progress=False, exact=True)
    only_a = split_index("A", tmp_path / "a", runtime)
    assert_equivalent(shrunk, only_a)
    assert shrunk.last_update.reextracted_chunks == SPLIT - (SPLIT // BATCH) * BATCH
    assert shrunk.manifest.extra["change"]["documents"]["count"] == 27
    # a delete from the middle: the chunks after it move up, their batches are re-extracted
    records = _records()
    middle = [r["id"] for r in records[10:13]]
    rest = _write(tmp_path / "rest" / "rest.jsonl", records[:10] + records[13:SPLIT])
    cut = shrunk.delete(middle, show_progress=False, exact=True)
    assert_equivalent(cut, Index.build(rest, tmp_path / "rest.index", runtime=runtime,
                                       show_progress=False))


def _all_text(index_dir: Path) -> list[str]:
    """Every string cell of every table of the index, and the manifest."""
    texts = [(index_dir / layout.MANIFEST).read_text(encoding="utf-8")]
    for p in index_dir.rglob("*.parquet"):
        frame = pq.read_table(p).to_pandas()
        for col in frame.columns:
            texts += frame[col].astype(str).tolist()
    return texts


@pytest.fixture(scope="module")
def secret_index_path(tmp_path_factory, runtime) -> Path:
    """The sample corpus with a secret document among it, built once (read-only: copy it)."""
    records = _records()
    secret = {"id": "secret-doc", "title": f"{MARKER} Institute",
              "text": f"The {MARKER} Institute was founded by Elvira {MARKER} in Varnholt. "
                      f"{MARKER} later moved the Institute to Brenmoor University."}
    src = _write(tmp_path_factory.mktemp("secret") / "docs.jsonl",
                 [*records[:20], secret, *records[20:]])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graph_stage, "EXTRACT_BATCH", BATCH)
        mp.setattr(incremental, "EXTRACT_BATCH", BATCH)
        return _build_shared(tmp_path_factory, "secret", src, runtime=runtime)


def _api_text(index: Index) -> list[str]:
    """Every string cell of every table as the index's readers give it (IndexDir.table)."""
    texts = []
    for rel in index.manifest.files:
        if rel.endswith(".parquet"):
            frame = index.dir.table(rel)
            for col in frame.columns:
                texts += frame[col].astype(str).tolist()
    return texts


def _files_holding(path: Path, needle: bytes) -> set[str]:
    """The files of the index folder holding ``needle``: in a string cell of a Parquet file
    (read raw, as stored: compressed pages hide the bytes), anywhere in any other file."""
    held = set()
    for p in path.rglob("*"):
        if not p.is_file():
            continue
        if p.suffix == ".parquet":
            frame = pq.read_table(p).to_pandas()
            found = any(frame[c].astype(str).str.contains(needle.decode(), regex=False).any()
                        for c in frame.columns)
        else:
            found = needle in p.read_bytes()
        if found:
            held.add(p.relative_to(path).as_posix())
    return held


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "local"])
def test_deleted_document_leaves_no_trace(tmp_path, runtime, exact, secret_index_path):
    """An exact delete leaves no byte of the document in the index. A local delete leaves
    nothing readable (tables as readers give them, queries, names) while its text stays in
    the files it keeps (tombstoned: the chunk table, the stored extraction, the mention and
    relation tables) until
    ``compact``, which leaves no byte of it either."""
    index = Index.open(copy_index(secret_index_path, tmp_path / "idx"), runtime=runtime)
    assert any(MARKER in t for t in _all_text(index.path))  # the check can see it
    assert MARKER in index.dir.table(layout.ENTITIES)["name"].str.cat(sep="|")

    after = index.delete(["secret-doc"], show_progress=False, exact=exact)
    assert ("incremental" in after.manifest.extra) is not exact
    assert not [t for t in _api_text(after) if MARKER in t]
    needle = MARKER.encode()
    held = _files_holding(after.path, needle)
    # the BM25 vocabulary holds words as its tokenizer gives them (lower case, one a word)
    words = [w.lower().encode() for w in MARKER.split()]
    lowered = set().union(*(_files_holding(after.path, w) for w in words))
    if exact:
        assert not held and not [t for t in _all_text(after.path) if MARKER in t]
        assert not lowered, lowered
    else:  # only in what the delete kept as stored (hard links), never in what it wrote,
        # and the words in the BM25 vocabulary (kept until compact, as the docs say)
        assert held and held <= {layout.CHUNKS, layout.EXTRACT_MENTIONS,
                                 layout.EXTRACT_RELATIONS, layout.MENTIONS,
                                 layout.RELATIONS}, held
        vocab = f"{layout.LEXICAL_DIR}/vocab.index.json"
        assert vocab in lowered and lowered <= held | {vocab}, lowered
    for mode in ("dense", "bm25", "graph"):
        hits = after.query(f"{MARKER} Institute founder", k=10, mode=mode)
        assert all(MARKER not in p.text and p.doc_id != "secret-doc" for p in hits.passages)
    names = after.dir.table(layout.NAMES)["name"].tolist()
    assert after.retriever.entity_index.index.ntotal == len(names)
    assert not [n for n in names if MARKER in n]
    if not exact:  # the names only the secret used stay as blank rows, their vectors masked
        from gpurag.vectors.codec import decode_all

        blank = np.flatnonzero(after.dir.table(layout.NAMES)["count"].to_numpy() == 0)
        assert len(blank) and all(names[i] == "" for i in blank)
        assert not decode_all(after.retriever.entity_index.index, blank).any()
        assert set(blank) <= set(after.dir.deleted_rows(layout.DELETED_NAMES).tolist())
        compacted = after.compact(show_progress=False)
        assert not _files_holding(compacted.path, needle)
        assert not set().union(*(_files_holding(compacted.path, w) for w in words))
        assert not [t for t in _all_text(compacted.path) if MARKER in t]


def test_confidence_after_a_local_delete_equals_the_rebuilds(tmp_path, runtime,
                                                            secret_index_path):
    """known_share reads live counts: a word only the deleted document used (still in the
    BM25 vocabulary after a local delete) weighs as unknown, n is the live passages."""
    from gpurag.query.confidence import known_share

    local = Index.open(copy_index(secret_index_path, tmp_path / "a"), runtime=runtime).delete(
        ["secret-doc"], show_progress=False)
    exact = Index.open(copy_index(secret_index_path, tmp_path / "b"), runtime=runtime).delete(
        ["secret-doc"], show_progress=False, exact=True)
    assert MARKER.split()[0].lower() in local.retriever.lexical.model.vocab_dict
    questions = [f"Who founded the {MARKER} Institute?", "Where was the Institute moved?",
                 "What did Elvira found in Varnholt?"]
    got = known_share(local.retriever.lexical, questions)
    want = known_share(exact.retriever.lexical, questions)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[0] < 1.0


def test_insert_skips_known_ids_and_nothing_new_changes_nothing(split_index, tmp_path, corpus,
                                                               runtime):
    index = split_index("A", tmp_path / "idx", runtime)
    again = index.insert(corpus["A"], show_progress=False)
    assert again.last_update.version is None
    assert again.last_update.skipped == {"already in the index": SPLIT}
    assert again.manifest.checksum == index.manifest.checksum
    mixed = _write(tmp_path / "mixed.jsonl", _records()[SPLIT - 2 : SPLIT + 2])
    grown = index.insert(mixed, show_progress=False)
    assert grown.last_update.skipped == {"already in the index": 2}
    assert grown.last_update.documents == [r["id"] for r in _records()[SPLIT : SPLIT + 2]]


def test_delete_errors_and_lock(split_index, tmp_path, corpus, runtime):
    index = split_index("A", tmp_path / "idx", runtime)
    with pytest.raises(InputError, match="none of the 1 document ids"):
        index.delete(["no-such-doc"])
    with pytest.raises(InputError, match="empty"):
        index.delete(list(index.chunks["doc_id"].unique()))
    partly = index.delete(["p01", "no-such-doc"], show_progress=False)
    assert partly.last_update.not_found == ["no-such-doc"]
    with WriteLock(index.path), pytest.raises(IndexBusyError):
        partly.insert(corpus["B"])
    with WriteLock(index.path), pytest.raises(IndexBusyError):
        partly.delete(["p02"])
    assert Index.open(index.path).manifest.extra["version"] == 2


def test_cli_insert_and_delete(split_index, tmp_path, corpus, runtime, capsys):
    out = tmp_path / "idx"
    split_index("A", out, runtime)
    assert main(["-q", "insert", str(out), str(corpus["B"])]) == 0
    assert "version 2: 27 documents (27 chunks) added" in capsys.readouterr().out
    ids = tmp_path / "ids.txt"
    ids.write_text("p01\np02\n\n", encoding="utf-8")
    assert main(["-q", "delete", str(out), "--ids-file", str(ids)]) == 0
    assert "version 3: 2 documents" in capsys.readouterr().out
    assert main(["-q", "delete", str(out), "--doc-ids", "p03"]) == 0
    index = Index.open(out)
    assert index.manifest.counts["chunks"] == 57 - 3  # local deletes: tombstoned rows stay
    assert len(index.chunks) == 57 and (index.chunks["doc_id"] == "").sum() == 3
    assert [h["op"] for h in index.manifest.extra["history"]] == ["insert", "delete", "delete"]
    assert main(["-q", "delete", str(out), "--doc-ids", "nope"]) == 2


def test_stored_extraction_matches_a_fresh_extraction(split_index, tmp_path, corpus, runtime):
    """The raw extraction kept in the index is what the extractor gives (so reusing it is
    sound), with per-batch counters summing to the manifest's."""
    index = split_index("AB", tmp_path / "idx", runtime)
    stored = incremental.load_stored(index.dir)
    extractor = incremental._extractor(stored.config, runtime, False)
    fresh, _ = incremental.extract_from(index.chunks, extractor, 0)
    pd.testing.assert_frame_equal(stored.extraction.mentions, fresh.mentions)
    pd.testing.assert_frame_equal(stored.extraction.relations, fresh.relations)
    sums = stored.batch_stats.groupby("key")["value"].sum()
    assert {f"extract_{k}": int(v) for k, v in sums.items()}.items() <= \
        index.manifest.counts.items()
    assert os.path.getsize(index.dir.file(layout.NAMES_FAISS)) > 0


def test_dense_only_index_and_an_index_without_stored_extraction(split_index, tmp_path, corpus,
                                                                 runtime, monkeypatch):
    """A dense index grows like a dense build; an index written before the extraction was kept
    (simulated: nothing stored) is re-extracted whole and still equals a rebuild."""
    dense = split_index("A", tmp_path / "dense", runtime, graph=False).insert(
        corpus["B"], show_progress=False)
    assert_equivalent(dense, split_index("AB", tmp_path / "dense-full", runtime, graph=False))
    with monkeypatch.context() as m:
        m.setattr(graph_stage, "write_extraction", lambda *a, **k: None)
        old = Index.build(corpus["A"], tmp_path / "old", runtime=runtime, show_progress=False)
    assert not old.dir.has(layout.EXTRACT_MENTIONS)
    grown = old.insert(corpus["B"], show_progress=False)
    assert grown.last_update.reextracted_chunks == 57
    assert_equivalent(grown, split_index("AB", tmp_path / "full", runtime))


def test_insert_into_a_triples_index_equals_build_of_the_union(tmp_path, corpus, runtime):
    """Imported triples go on top of the rule-based extraction, whose output depends on its
    batch: an insert re-extracts the open batch as for the fast extractor, and equals a
    rebuild."""
    records = _records()
    triples = tmp_path / "triples.jsonl"
    rows = [{"id": r["id"], "entities": [r["title"]],
             "triples": [[r["title"], "is described in", f"passage {r['id']}"]]}
            for r in records[::3]]
    triples.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    opts = dict(runtime=runtime, show_progress=False, triples=str(triples))
    base = Index.build(corpus["A"], tmp_path / "inc", **opts)
    grown = base.insert(corpus["B"], show_progress=False, exact=True)
    assert grown.last_update.reextracted_chunks == 57 - (SPLIT // BATCH) * BATCH
    assert_equivalent(grown, Index.build(corpus["AB"], tmp_path / "full", **opts))


def test_an_exact_update_opens_the_index_once(split_index, tmp_path, corpus, runtime,
                                              monkeypatch):
    """The exact fallback loads the version it opened to decide (updates.py opened and
    checked every file of the index a second time)."""
    from gpurag.pipeline import updates

    base = split_index("A", tmp_path / "dense", runtime, graph=False)
    opened: list[str] = []

    def counting(path, *a, **k):
        opened.append(str(path))
        return open_index_dir(path, *a, **k)

    monkeypatch.setattr(updates, "open_index_dir", counting)
    monkeypatch.setattr(incremental, "open_index_dir", counting)
    grown = base.insert(corpus["B"], show_progress=False)  # dense-only: the exact path
    assert len(opened) == 1 and len(grown.chunks) == 57
    opened.clear()
    assert len(grown.delete(corpus["b_ids"][:3], show_progress=False).chunks) < 57
    assert len(opened) == 1
