"""A local insert writes the CSR graph and the BM25 model as deltas beside the stored files
(gpurag/graph/delta.py, gpurag/query/lexical_delta.py): no whole CSR or BM25 file written, the
merged-on-read graph equal to the graph a whole rewrite gives (entries and weights, bit for
bit), answers within the local-update tolerance, deltas folded at their bound, ``compact`` and
deletes as before."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from gpurag import Index
from gpurag.graph import csr as csr_mod
from gpurag.graph import delta as delta_mod
from gpurag.graph.csr import build_csr
from gpurag.pipeline import graph_stage, incremental
from gpurag.pipeline import incremental_local as local_mod
from gpurag.query import lexical_delta
from gpurag.store import layout
from tests.pipeline.test_incremental import (
    BATCH,
    SPLIT,
    _records,
    _retrieval,
    _write,
    assert_equivalent,
)
from tests.pipeline.test_incremental_local import _inodes, _within_tolerance

GRAPH_META = f"{layout.GRAPH_DIR}/{delta_mod.META}"
LEXICAL_META = f"{layout.LEXICAL_DIR}/{lexical_delta.META}"
GRAPH_FILES = (layout.GRAPH_INDPTR, layout.GRAPH_INDICES, layout.GRAPH_WEIGHTS)


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch):
    monkeypatch.setattr(graph_stage, "EXTRACT_BATCH", BATCH)
    monkeypatch.setattr(incremental, "EXTRACT_BATCH", BATCH)


@pytest.fixture(scope="module")
def runtime(split_runtime):
    return split_runtime


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    records = _records()
    out = {"B1": _write(root / "b1" / "B1.jsonl", records[SPLIT:SPLIT + 10]),
           "B2": _write(root / "b2" / "B2.jsonl", records[SPLIT + 10:]),
           "ids": [r["id"] for r in records]}
    for i, rec in enumerate(records[SPLIT:SPLIT + 8]):
        out[f"one{i}"] = _write(root / f"one{i}" / "one.jsonl", [rec])
    return out


def _deltas(monkeypatch, fold: float, growth: float) -> None:
    """Graph deltas folded past ``fold`` of the base; BM25 re-weighted past ``growth``
    (0 and -1: every insert writes both whole, as before the deltas)."""
    monkeypatch.setattr(local_mod, "DELTA_FOLD_FRACTION", fold)
    monkeypatch.setattr(local_mod, "lexical_growth", lambda cfg: growth)


def _graph(index: Index) -> csr_mod.CSRGraph:
    return csr_mod.load(index.dir.file(layout.GRAPH_DIR))


def _assert_same_graph(a: Index, b: Index) -> None:
    ga, gb = _graph(a), _graph(b)
    assert np.array_equal(ga.indptr, gb.indptr)
    assert np.array_equal(ga.indices, gb.indices)
    assert ga.weights.dtype == gb.weights.dtype
    assert np.array_equal(ga.weights.view(np.int32), gb.weights.view(np.int32))  # bit for bit
    assert a.retriever.graph.n_edges == ga.n_edges  # the query side reads the merged graph


def _assert_lexical_loads(index: Index) -> None:
    """The stored BM25 model (its delta included) loads: a query never falls back to a model
    rebuilt in memory, which would hide a broken delta."""
    from gpurag.query.lexical import BM25Index

    deleted = index.dir.deleted_chunks()
    model = BM25Index.load(index.dir.file(layout.LEXICAL_DIR), len(index.chunks), deleted)
    assert int(model.model.scores["num_docs"]) == len(index.chunks) - len(deleted)


def test_an_insert_writes_no_whole_csr_or_bm25_file(split_index, tmp_path, corpus, runtime,
                                                    monkeypatch):
    """Two inserts (1 and 2 documents on 30: within lexical_reweight_growth) as deltas,
    against the same inserts written whole (as before the deltas): the stored CSR and BM25
    files keep their inodes, the graph is the same bit for bit, answers within the tolerance;
    compact gives the full build; a delete and an insert after it read the merged files."""
    records = _records()
    first = _write(tmp_path / "c1" / "c1.jsonl", records[SPLIT:SPLIT + 1])
    second = _write(tmp_path / "c2" / "c2.jsonl", records[SPLIT + 1:SPLIT + 3])
    base = split_index("A", tmp_path / "inc", runtime)
    base.close()
    shutil.copytree(tmp_path / "inc", tmp_path / "whole")
    before = _inodes(tmp_path / "inc")
    with monkeypatch.context() as m:
        m.setattr(local_mod, "DELTA_FOLD_FRACTION", 100.0)  # the default growth bound
        grown = Index.open(tmp_path / "inc", runtime=runtime).insert(first, show_progress=False)
        after = _inodes(tmp_path / "inc")
        for rel in (*GRAPH_FILES, *layout.LEXICAL_FILES):
            assert after[rel] == before[rel], rel  # the stored file, linked: nothing rewritten
        written = {rel for rel, ino in after.items() if before.get(rel) != ino}
        graph_written = {r for r in written if r.startswith(("graph/", "lexical/"))}
        assert graph_written == {GRAPH_META, "graph/delta.part00001.npy", LEXICAL_META,
                                 "lexical/delta.part00001.npy"}
        info = grown.manifest.extra["incremental"]
        assert local_mod.graph_note("delta") in info["updated_locally"]
        assert info["recomputed"] == [local_mod.lexical_note("delta")]
        grown = grown.insert(second, show_progress=False)
        assert grown.manifest.extra["incremental"]["recomputed"] == [
            local_mod.lexical_note("delta")]
        assert json.loads((tmp_path / "inc" / GRAPH_META).read_text())["parts"]
    _assert_lexical_loads(grown)
    with monkeypatch.context() as m:
        _deltas(m, fold=0.0, growth=-1.0)  # whole writes: what an insert wrote before
        whole = Index.open(tmp_path / "whole", runtime=runtime).insert(
            first, show_progress=False).insert(second, show_progress=False)
    assert GRAPH_META not in whole.manifest.files and LEXICAL_META not in whole.manifest.files
    _assert_same_graph(grown, whole)
    assert grown.manifest.counts == whole.manifest.counts
    _within_tolerance(grown, whole)
    # BM25: the new passages found by their titles as the re-weighted model finds them
    qs = [r["title"] for r in records[SPLIT:SPLIT + 3]]
    got, want = grown.retriever.lexical.search(qs, 3), whole.retriever.lexical.search(qs, 3)
    assert np.array_equal(got[1][:, 0], want[1][:, 0])
    assert set(got[1][:, 0].tolist()) == {SPLIT, SPLIT + 1, SPLIT + 2}
    # compact: the full build of the same documents, byte for byte (on a copy)
    shutil.copytree(tmp_path / "inc", tmp_path / "copy")
    compacted = Index.open(tmp_path / "copy", runtime=runtime).compact(show_progress=False)
    assert not {GRAPH_META, LEXICAL_META} & set(compacted.manifest.files)
    full = Index.build(_write(tmp_path / "f" / "f.jsonl", records[:SPLIT + 3]),
                       tmp_path / "full", runtime=runtime, show_progress=False)
    assert_equivalent(compacted, full)
    # a delete reads the merged graph and model and writes both whole: as from whole files
    gone = [records[SPLIT]["id"], records[5]["id"]]
    shrunk_a = grown.delete(gone, show_progress=False)
    shrunk_b = whole.delete(gone, show_progress=False)
    assert not {GRAPH_META, LEXICAL_META} & set(shrunk_a.manifest.files)
    _assert_same_graph(shrunk_a, shrunk_b)
    assert _retrieval(shrunk_a) == _retrieval(shrunk_b)
    # and an insert after the delete: deltas over the delete's whole files again
    back = _write(tmp_path / "back" / "back.jsonl", [records[SPLIT]])
    with monkeypatch.context() as m:
        m.setattr(local_mod, "DELTA_FOLD_FRACTION", 100.0)
        again_a = shrunk_a.insert(back, show_progress=False)
    assert {GRAPH_META, LEXICAL_META} <= set(again_a.manifest.files)
    _assert_lexical_loads(again_a)
    with monkeypatch.context() as m:
        _deltas(m, fold=0.0, growth=-1.0)
        again_b = shrunk_b.insert(back, show_progress=False)
    _assert_same_graph(again_a, again_b)
    assert again_a.manifest.counts == again_b.manifest.counts
    _within_tolerance(again_a, again_b)
    # the re-inserted document is found by BM25 as its new chunk (its own id, after the
    # tombstoned rows); the deleted one is returned by no mode
    found = again_a.query(records[SPLIT]["title"], k=3, mode="bm25")
    assert found.passages[0].doc_id == records[SPLIT]["id"]
    assert found.passages[0].chunk_id == str(again_a.chunks["chunk_id"].iloc[-1])
    asked = [records[5]["title"], records[5]["text"][:80], records[SPLIT]["title"]]
    for mode in ("bm25", "dense", "graph"):
        got_ids = {p.doc_id for r in again_a.query_batch(asked, k=10, mode=mode)
                   for p in r.passages}
        assert records[5]["id"] not in got_ids and records[SPLIT]["id"] in got_ids, mode
    # compact after insert, delete, insert: the full build of what the index holds
    held = [i for i in dict.fromkeys(again_a.chunks["doc_id"].astype(str)) if i]
    by_id = {r["id"]: r for r in records}
    rebuilt = Index.build(_write(tmp_path / "held" / "held.jsonl", [by_id[i] for i in held]),
                          tmp_path / "held.index", runtime=runtime, show_progress=False)
    assert_equivalent(again_a.compact(show_progress=False), rebuilt)


def test_single_document_inserts_keep_few_parts_and_fold(split_index, tmp_path, corpus,
                                                         runtime, monkeypatch):
    """Eight one-document inserts: the graph delta stays in O(log n) parts, is folded into
    a new base when it outgrows its bound (the graph still the whole rewrite's), the BM25
    delta is re-weighted whole past its growth bound and starts again after."""
    base = split_index("A", tmp_path / "inc", runtime)
    base.close()
    shutil.copytree(tmp_path / "inc", tmp_path / "whole")
    grown = Index.open(tmp_path / "inc", runtime=runtime)
    whole = Index.open(tmp_path / "whole", runtime=runtime)
    base_edges = _graph(grown).n_edges
    graph_hows, lexical_hows, most_parts = [], [], 0
    for i in range(8):
        with monkeypatch.context() as m:
            _deltas(m, fold=0.12, growth=0.1)
            grown = grown.insert(corpus[f"one{i}"], show_progress=False)
        _assert_lexical_loads(grown)
        info = grown.manifest.extra["incremental"]
        graph_hows.append(info["updated_locally"][-1])
        lexical_hows.append(info["recomputed"][0])
        parts = [r for r in grown.manifest.files if r.startswith("graph/delta.part")]
        most_parts = max(most_parts, len(parts))
        assert len(parts) <= int(np.log2(i + 1)) + 1
        with monkeypatch.context() as m:
            _deltas(m, fold=0.0, growth=-1.0)
            whole = whole.insert(corpus[f"one{i}"], show_progress=False)
        _assert_same_graph(grown, whole)
    folded = graph_hows.index(local_mod.graph_note("folded"))  # folded once at least ...
    assert folded > 0 and local_mod.graph_note("delta") in graph_hows[folded + 1:]  # resumed
    reweighted = lexical_hows.index(local_mod.lexical_note("reweighted"))
    assert reweighted > 0 and local_mod.lexical_note("delta") in lexical_hows[reweighted + 1:]
    assert most_parts >= 2 and base_edges
    _within_tolerance(grown, whole)


def _random_graph(rng, n: int, m: int) -> csr_mod.CSRGraph:
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    return build_csr(src, dst, rng.random(m).astype(np.float32) + 0.5, n, symmetric=True)


def test_merge_on_read_equals_applying_each_change_in_turn():
    """Random base graphs and random changes (new entities shifting the passages, new and
    existing pairs): merging the parts, whichever of them were unioned first (the binary
    counter), equals applying each change to the whole graph in turn."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        n_e, n_p = int(rng.integers(3, 30)), int(rng.integers(3, 30))
        base = _random_graph(rng, n_e + n_p, int(rng.integers(5, 120)))
        whole = base
        n_e0, parts = n_e, []
        for _ in range(int(rng.integers(1, 6))):
            grow_e, grow_p = int(rng.integers(0, 4)), int(rng.integers(0, 4))
            old_e = n_e
            n_e, n_p = n_e + grow_e, n_p + grow_p
            n = n_e + n_p
            # the whole graph re-numbered to the new node ids, then the change summed in
            rows = np.repeat(np.arange(whole.n_nodes), np.diff(whole.indptr))
            cols = whole.indices.astype(np.int64)
            rows = np.where(rows >= old_e, rows + grow_e, rows)
            cols = np.where(cols >= old_e, cols + grow_e, cols)
            change = _random_graph(rng, n, int(rng.integers(1, 25)))
            moved = build_csr(rows, cols, whole.weights, n, symmetric=False)
            old_w = moved.weights[:0]
            c_rows = np.repeat(np.arange(n), np.diff(change.indptr))
            lookup = dict(zip(zip(np.repeat(np.arange(n), np.diff(moved.indptr)).tolist(),
                                  moved.indices.tolist(), strict=True),
                              moved.weights.tolist(), strict=True))
            old_w = np.array([lookup.get(k, 0.0) for k in zip(
                c_rows.tolist(), change.indices.tolist(), strict=True)], np.float32)
            new_w = (old_w.astype(np.float64) + change.weights.astype(np.float64)
                     ).astype(np.float32)
            part = np.empty(c_rows.size, delta_mod.ENTRY)
            part["key"] = delta_mod.keys(c_rows, change.indices, n_e)
            part["weight"] = new_w
            parts.append(part[np.argsort(part["key"])])
            all_rows = np.concatenate([np.repeat(np.arange(n), np.diff(moved.indptr)), c_rows])
            all_cols = np.concatenate([moved.indices, change.indices]).astype(np.int64)
            import scipy.sparse as sp

            mat = sp.coo_array((np.concatenate([moved.weights, change.weights]).astype(
                np.float64), (all_rows, all_cols)), shape=(n, n)).tocsr()
            mat.sum_duplicates()
            whole = csr_mod.CSRGraph(mat.indptr, mat.indices, mat.data.astype(np.float32))
        meta = {"base_entities": n_e0, "entities": n_e, "passages": n_p,
                "edges": whole.n_edges, "parts": []}
        for grouped in (parts, [delta_mod.union(parts)],
                        [delta_mod.union(parts[:1]), delta_mod.union(parts[1:])]):
            indptr, indices, weights = delta_mod.merge(base.indptr, base.indices,
                                                       base.weights, meta, grouped)
            assert np.array_equal(indptr, whole.indptr)
            assert np.array_equal(indices, whole.indices)
            assert np.array_equal(weights.view(np.int32), whole.weights.view(np.int32))


def test_merge_takes_removed_entries_out_and_stored_weights_does_not_find_them(tmp_path):
    """Random base graphs and parts mixing new weights, REMOVED entries of stored pairs,
    REMOVED entries of pairs an older part added and of pairs nowhere: the merge equals the
    graph of a dictionary of pairs applying each part in turn, in any grouping of the parts;
    stored_weights finds a removed pair nowhere (weight 0), never the base's weight."""
    rng = np.random.default_rng(11)
    for trial in range(20):
        n_e, n_p = int(rng.integers(3, 20)), int(rng.integers(3, 20))
        n = n_e + n_p
        base = _random_graph(rng, n, int(rng.integers(5, 100)))
        rows = np.repeat(np.arange(n), np.diff(base.indptr))
        pairs = dict(zip(zip(rows.tolist(), base.indices.tolist(), strict=True),
                         base.weights.tolist(), strict=True))
        parts = []
        for _ in range(int(rng.integers(1, 5))):
            known = list(pairs)
            pick = rng.choice(len(known), min(len(known), int(rng.integers(1, 12))),
                              replace=False) if known else []
            change = {known[i]: (delta_mod.REMOVED if rng.random() < 0.6
                                 else np.float32(rng.random() + 0.5)) for i in pick}
            for _ in range(3):  # new pairs and removals of pairs the graph lacks
                u, v = (int(x) for x in rng.integers(0, n, 2))
                if u != v and (u, v) not in change:
                    change[(u, v)] = (np.float32(rng.random() + 0.5) if rng.random() < 0.5
                                      else delta_mod.REMOVED)
            part = np.empty(len(change), delta_mod.ENTRY)
            keys = list(change)
            part["key"] = delta_mod.keys(np.array([k[0] for k in keys]),
                                         np.array([k[1] for k in keys]), n_e)
            part["weight"] = [change[k] for k in keys]
            parts.append(part[np.argsort(part["key"])])
            for k, w in change.items():
                if np.isnan(w):
                    pairs.pop(k, None)
                else:
                    pairs[k] = float(w)
        order = sorted(pairs)
        want_rows = np.array([k[0] for k in order], np.int64)
        want_indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(want_rows, minlength=n), out=want_indptr[1:])
        want_w = np.array([pairs[k] for k in order], np.float32)
        meta = {"base_entities": n_e, "entities": n_e, "passages": n_p, "edges": len(pairs),
                "parts": []}
        for grouped in (parts, [delta_mod.union(parts)],
                        [delta_mod.union(parts[:1]), delta_mod.union(parts[1:])]):
            indptr, indices, weights = delta_mod.merge(base.indptr, base.indices,
                                                       base.weights, meta, grouped)
            assert np.array_equal(indptr, want_indptr)
            assert np.array_equal(indices, [k[1] for k in order])
            assert np.array_equal(weights.view(np.int32), want_w.view(np.int32))
        # stored_weights over the saved base and parts: the merged graph's weight or none
        folder = tmp_path / f"g{trial}"
        csr_mod.save(base, folder)
        files = []
        for i, part in enumerate(parts):
            files.append(folder / f"delta.part{i:05d}.npy")
            np.save(files[-1], part)
        ask_r, ask_c = rng.integers(0, n, 60), rng.integers(0, n, 60)
        keep = ask_r != ask_c
        ask_r, ask_c = ask_r[keep], ask_c[keep]
        w, found = delta_mod.stored_weights(folder, n_e, files, ask_r, ask_c, n_e)
        for r, c, got_w, got_f in zip(ask_r.tolist(), ask_c.tolist(), w, found, strict=True):
            assert got_f == ((r, c) in pairs)
            assert got_w == np.float32(pairs.get((r, c), 0.0))


@pytest.mark.parametrize("fold", [100.0, 0.05])
def test_deletes_write_a_graph_delta_equal_to_the_whole_rewrite(split_index, tmp_path, corpus,
                                                                runtime, monkeypatch, fold):
    """A random sequence of one-document inserts and deletes, as deltas (``fold`` 100: the
    delta never folded; 0.05: folded now and then) and written whole (as before): the
    merged-on-read graph equals the whole rewrite's bit for bit after each step, and the counts
    agree; with the delta never folded a delete keeps the stored CSR files (their inodes) and
    writes only the delta's meta and a part; compact then gives the full build."""
    rng = np.random.default_rng(5 if fold > 1 else 6)
    base = split_index("A", tmp_path / "inc", runtime)
    base.close()
    shutil.copytree(tmp_path / "inc", tmp_path / "whole")
    grown = Index.open(tmp_path / "inc", runtime=runtime)
    whole = Index.open(tmp_path / "whole", runtime=runtime)
    records = _records()
    held = [r["id"] for r in records[:SPLIT]]
    inserted, hows = 0, []
    for step in range(6):
        delete = step % 2 == 1 or (step > 2 and rng.random() < 0.5)
        if delete:
            gone = [str(x) for x in rng.choice(held, int(rng.integers(1, 3)), replace=False)]
            held = [i for i in held if i not in gone]
            before = _inodes(tmp_path / "inc")
            with monkeypatch.context() as m:
                m.setattr(local_mod, "DELTA_FOLD_FRACTION", fold)
                grown = grown.delete(gone, show_progress=False)
            hows.append(grown.manifest.extra["incremental"]["updated_locally"][-1])
            if fold > 1:
                after = _inodes(tmp_path / "inc")
                for rel in GRAPH_FILES:
                    assert after[rel] == before[rel], rel  # kept: no whole CSR written
                written = {r for r, ino in after.items()
                           if r.startswith("graph/") and before.get(r) != ino}
                assert GRAPH_META in written and written <= {GRAPH_META} | {
                    r for r in after if r.startswith("graph/delta.part")}
            with monkeypatch.context() as m:
                m.setattr(local_mod, "DELTA_FOLD_FRACTION", 0.0)
                whole = whole.delete(gone, show_progress=False)
        else:
            with monkeypatch.context() as m:
                m.setattr(local_mod, "DELTA_FOLD_FRACTION", fold)
                grown = grown.insert(corpus[f"one{inserted}"], show_progress=False)
            with monkeypatch.context() as m:
                m.setattr(local_mod, "DELTA_FOLD_FRACTION", 0.0)
                whole = whole.insert(corpus[f"one{inserted}"], show_progress=False)
            held.append(records[SPLIT + inserted]["id"])
            inserted += 1
        _assert_same_graph(grown, whole)
        assert grown.manifest.counts == whole.manifest.counts
    from gpurag.pipeline import incremental_delete as delete_mod

    assert delete_mod.graph_note("delta") in hows
    if fold < 1:
        assert delete_mod.graph_note("folded") in hows
        return
    assert _retrieval(grown) == _retrieval(whole)
    compacted = grown.compact(show_progress=False)
    assert GRAPH_META not in compacted.manifest.files
    by_id = {r["id"]: r for r in records}
    rebuilt = Index.build(_write(tmp_path / "held" / "held.jsonl", [by_id[i] for i in held]),
                          tmp_path / "held.index", runtime=runtime, show_progress=False)
    assert_equivalent(compacted, rebuilt)


def test_a_bm25_delta_that_does_not_fit_its_base_is_a_format_error(split_index, tmp_path,
                                                                   corpus, runtime,
                                                                   monkeypatch):
    """A delta whose meta names another base (sealed, as a writer bug or a forger would leave
    it) is an IndexFormatError naming the delta when the graph's BM25 opens, as a bad graph
    delta is: not a warning and a BM25 rebuilt in memory (minutes at scale) that hides it."""
    from gpurag.errors import IndexFormatError
    from gpurag.store import manifest as manifest_mod

    base = split_index("A", tmp_path / "inc", runtime)
    base.close()
    with monkeypatch.context() as m:
        m.setattr(local_mod, "DELTA_FOLD_FRACTION", 100.0)
        grown = Index.open(tmp_path / "inc", runtime=runtime).insert(corpus["one0"],
                                                                     show_progress=False)
    assert LEXICAL_META in grown.manifest.files
    grown.close()
    meta_path = tmp_path / "inc" / LEXICAL_META
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["base_docs"] += 1
    meta_path.unlink()  # a new file (the stored one is a hard link into the older version)
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    mpath = tmp_path / "inc" / layout.MANIFEST
    data = json.loads(mpath.read_text(encoding="utf-8"))
    data["files"][LEXICAL_META] = manifest_mod.file_record(meta_path)
    data["checksum"] = manifest_mod.seal(data)
    mpath.write_text(json.dumps(data), encoding="utf-8")
    opened = Index.open(tmp_path / "inc", runtime=runtime)
    with pytest.raises(IndexFormatError, match="BM25 delta") as err:
        opened.query_batch(["Who founded it?"], mode="graph", k=3)
    assert str(tmp_path / "inc") in str(err.value)  # the user's path, not a pinned view


def test_one_fold_rule_for_inserts_and_deletes(split_index, tmp_path, corpus, runtime,
                                               monkeypatch):
    """Inserts and deletes decide a fold by one function, gpurag.graph.delta.folds (the
    thresholds unchanged: more than ``fraction`` of the base's entries, an empty base counted
    as one): forcing it folds both, with the stored delta's and the change's entries."""
    assert not delta_mod.folds(0, 12, 100, 0.125) and delta_mod.folds(0, 13, 100, 0.125)
    assert not delta_mod.folds(10, 2, 100, 0.125) and delta_mod.folds(10, 3, 100, 0.125)
    assert delta_mod.folds(0, 1, 0, 0.5) and not delta_mod.folds(0, 0, 0, 0.0)
    from gpurag.pipeline import incremental_delete as delete_mod

    calls = []

    def forced(stored, new, base, fraction):
        calls.append((stored, new, base, fraction))
        return True

    grown = split_index("A", tmp_path / "inc", runtime)
    monkeypatch.setattr(delta_mod, "folds", forced)
    grown = grown.insert(corpus["one0"], show_progress=False)
    assert grown.manifest.extra["incremental"]["updated_locally"][-1] == local_mod.graph_note(
        "folded")
    grown = grown.delete([_records()[0]["id"]], show_progress=False)
    assert grown.manifest.extra["incremental"]["updated_locally"][-1] == delete_mod.graph_note(
        "folded")
    assert len(calls) == 2 and all(c[3] == delta_mod.FOLD_FRACTION and c[1] > 0 and c[2] > 0
                                   for c in calls)
    assert GRAPH_META not in grown.manifest.files


def _mapped(arr) -> bool:
    """Whether ``arr``'s memory is a mapped file (np.memmap or an mmap at the base of it)."""
    import mmap

    while arr is not None:
        if isinstance(arr, (np.memmap, mmap.mmap)):
            return True
        arr = getattr(arr, "base", None)
    return False


def _reader_arrays(index: Index) -> dict[str, object]:
    """The graph and BM25 arrays a reader of ``index`` holds (opened as queries open them)."""
    g = index.retriever.graph
    s = index.lexical.model.scores
    return {"graph.indptr": g.indptr, "graph.indices": g.indices, "graph.weights": g.weights,
            "bm25.indptr": s["indptr"], "bm25.indices": s["indices"], "bm25.data": s["data"]}


def test_build_readers_map_delta_readers_hold_compact_maps_again(split_index, tmp_path,
                                                                  corpus, runtime,
                                                                  monkeypatch):
    """A reader of a build memory-maps the graph's and the BM25 model's arrays; of an index
    with deltas (a local insert's graph and BM25 deltas) it holds the merged arrays in memory
    (owned, not mapped); after compact (`gpurag compact`: Index.compact) it maps them again."""
    index = split_index("A", tmp_path / "inc", runtime)
    assert all(_mapped(a) for a in _reader_arrays(index).values()), {
        k: type(a) for k, a in _reader_arrays(index).items()}
    with monkeypatch.context() as m:
        _deltas(m, fold=100.0, growth=100.0)
        grown = index.insert(corpus["one0"], show_progress=False)
    assert GRAPH_META in grown.manifest.files and LEXICAL_META in grown.manifest.files
    held = _reader_arrays(grown)
    assert not any(_mapped(a) for a in held.values()), [k for k, a in held.items()
                                                        if _mapped(a)]
    assert all(isinstance(a, np.ndarray) and a.flags.owndata for a in held.values())
    compacted = grown.compact(show_progress=False)
    assert GRAPH_META not in compacted.manifest.files
    assert LEXICAL_META not in compacted.manifest.files
    assert all(_mapped(a) for a in _reader_arrays(compacted).values())
