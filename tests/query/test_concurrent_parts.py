"""The lazy parts of an opened index are built once when cold threads race for them (the
service and a caller's own pool share one ``Index``), and no thread sees one half built.

Deterministic, not timing-bound: each part's builder is slowed (monkeypatched) so the first
caller stays inside it until a second caller enters the same builder, or a second passes:
unguarded code builds twice (fails), guarded code keeps the second caller waiting on the
part's lock and both get the first caller's part.
"""

from __future__ import annotations

import threading
import types

import pytest

from gpurag import Index
from gpurag.once import Memo, built_once, once_property
from gpurag.query import communities as communities_mod
from gpurag.query import evidence as evidence_mod
from gpurag.query import graph as graph_mod
from gpurag.query import lexical as lexical_mod
from gpurag.query import linking as linking_mod
from gpurag.query import second_hop as second_hop_mod
from gpurag.resolve import normalize as normalize_mod
from gpurag.store import checks as checks_mod

WAIT_FOR_SECOND_S = 1.0  # how long the first builder waits for a second one (guarded: all)


class Slowed:
    """A builder whose first call waits for a second call to enter (or the wait to pass)."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self.calls = 0
        self.entered, self.second = threading.Event(), threading.Event()
        self.done = threading.Event()  # the first call returned
        self._count = threading.Lock()

    def __call__(self, *args, **kwargs):
        with self._count:
            self.calls += 1
            first = self.calls == 1
        if first:
            self.entered.set()
            self.second.wait(WAIT_FOR_SECOND_S)
        else:
            self.second.set()
        value = self.fn(*args, **kwargs)
        if first:
            self.done.set()
        return value


def two_cold_readers(get, slowed: Slowed) -> list:
    """``get()`` in two threads, the second started once the first is inside the builder;
    each must return only once the first build is done (no reader sees a half-built part)."""
    out: list = [None, None]
    errors: list[BaseException] = []
    after_build = [False, False]

    def reader(i: int) -> None:
        try:
            out[i] = get()
            after_build[i] = slowed.done.is_set()
        except BaseException as exc:
            errors.append(exc)

    first = threading.Thread(target=reader, args=(0,))
    first.start()
    assert slowed.entered.wait(60), "the first reader never reached the builder"
    second = threading.Thread(target=reader, args=(1,))
    second.start()
    first.join(60)
    second.join(60)
    assert not errors, errors
    assert after_build == [True, True], "a reader returned while the part was being built"
    return out


def assert_built_once(get, slowed: Slowed) -> None:
    out = two_cold_readers(get, slowed)
    assert slowed.calls == 1, f"built {slowed.calls} times by two cold threads"
    assert out[0] is out[1] and out[0] is not None


@pytest.fixture
def graph(graph_index_path):
    index = Index.open(graph_index_path)
    yield index
    index.close()


def test_index_retriever(graph, monkeypatch):
    slowed = Slowed(graph_mod.GraphRetriever)
    monkeypatch.setattr(graph_mod, "GraphRetriever", slowed)
    assert_built_once(lambda: graph.retriever, slowed)


def test_index_lexical_of_a_dense_index(sample_index_path, monkeypatch):
    slowed = Slowed(lexical_mod.BM25Index.over_live)
    monkeypatch.setattr(lexical_mod.BM25Index, "over_live", slowed)
    with Index.open(sample_index_path) as index:
        assert index.retriever is None
        assert_built_once(lambda: index.lexical, slowed)


def test_index_passage_search(graph, monkeypatch):
    slowed = Slowed(graph.runtime.searcher)
    monkeypatch.setattr(graph.runtime, "searcher", slowed)
    assert_built_once(lambda: graph.passage_search, slowed)


def test_retriever_lexical(graph, monkeypatch):
    r = graph.retriever
    slowed = Slowed(r._open_lexical)
    monkeypatch.setattr(r, "_open_lexical", slowed)
    assert_built_once(lambda: r.lexical, slowed)


def test_retriever_linker(graph, monkeypatch):
    r = graph.retriever
    slowed = Slowed(linking_mod.EntityLinker)
    monkeypatch.setattr(linking_mod, "EntityLinker", slowed)
    assert_built_once(lambda: r.linker, slowed)


def test_retriever_aliases(graph, monkeypatch):
    r = graph.retriever
    slowed = Slowed(normalize_mod.alias_keys)
    monkeypatch.setattr(normalize_mod, "alias_keys", slowed)
    assert_built_once(lambda: r.aliases, slowed)


def test_retriever_bridge_pages(graph, monkeypatch):
    r = graph.retriever
    slowed = Slowed(second_hop_mod.BridgePages)
    monkeypatch.setattr(second_hop_mod, "BridgePages", slowed)
    assert_built_once(lambda: r.bridge_pages, slowed)


def test_retriever_seed_arrays(graph, monkeypatch):
    r = graph.retriever
    slowed = Slowed(graph_mod.SeedArrays)
    monkeypatch.setattr(graph_mod, "SeedArrays", slowed)
    assert_built_once(lambda: r.seed_arrays, slowed)


def test_retriever_entity_searcher(graph, monkeypatch):
    """The device searcher of the entity index (one per index: a second one would hold the
    vectors twice on the device)."""
    r = graph.retriever
    slowed = Slowed(r.searcher)
    monkeypatch.setattr(r, "searcher", slowed)
    qvecs = graph.embedder.encode(["Who designed the Corven Lighthouse?"])
    two_cold_readers(lambda: r.search("entity", qvecs, 3), slowed)
    assert slowed.calls == 1, f"built {slowed.calls} searchers by two cold threads"


def test_bridge_matrix(graph, monkeypatch):
    bp = graph.retriever.bridge_pages
    slowed = Slowed(second_hop_mod.bridge_matrix)
    monkeypatch.setattr(second_hop_mod, "bridge_matrix", slowed)
    assert_built_once(lambda: bp.matrix(3), slowed)


def test_bridge_passage_vectors(graph, monkeypatch):
    bp = graph.retriever.bridge_pages
    slowed = Slowed(second_hop_mod.PassageVectors)
    monkeypatch.setattr(second_hop_mod, "PassageVectors", slowed)
    assert_built_once(lambda: bp.passage_emb, slowed)


def test_chunk_triples_never_seen_half_built(graph, monkeypatch):
    """A second reader while the first reads the facts table gets the same answer, not the
    None the first one stored before building."""
    bp = graph.retriever.bridge_pages
    want = second_hop_mod.BridgePages(graph.retriever).chunk_triples()
    slowed = Slowed(checks_mod.table_columns)
    monkeypatch.setattr(checks_mod, "table_columns", slowed)
    out = two_cold_readers(bp.chunk_triples, slowed)
    assert slowed.calls == 1
    for got in out:
        assert (got is None) == (want is None)
        if want is not None:
            assert all((a == b).all() for a, b in zip(got, want, strict=True))


def test_evidence_data(graph, monkeypatch):
    r = graph.retriever
    slowed = Slowed(evidence_mod.EvidenceData)
    monkeypatch.setattr(evidence_mod, "EvidenceData", slowed)
    assert_built_once(lambda: evidence_mod.evidence_data(r), slowed)


def test_community_view(graph, monkeypatch):
    slowed = Slowed(communities_mod.CommunityView)
    monkeypatch.setattr(communities_mod, "CommunityView", slowed)
    assert_built_once(lambda: communities_mod.community_view(graph, 0), slowed)


def test_rerank_auto_decided_once(graph, monkeypatch):
    """``rerank="auto"`` on an index without a recorded decision decides it (synthetic
    questions ranked twice) once per opened index, not once per cold thread."""
    from gpurag.rerank import auto

    assert auto.KEY not in (graph.manifest.extra or {})  # the sample index records none
    slowed = Slowed(lambda index: {"rerank": "none", "reason": "stub"})
    monkeypatch.setattr(auto, "decide", slowed)
    two_cold_readers(lambda: auto.resolve(graph), slowed)
    assert slowed.calls == 1, f"decided {slowed.calls} times by two cold threads"


def test_bm25_matrix(graph, monkeypatch):
    lexical = graph.retriever.lexical
    lexical._matrix = None  # cold, whatever loading it did
    slowed = Slowed(lexical_mod.sp.csr_array)
    monkeypatch.setattr(lexical_mod, "sp", types.SimpleNamespace(csr_array=slowed))
    assert_built_once(lambda: lexical.matrix, slowed)


def test_second_hop_matrices_are_bounded(graph):
    """A client sending many distinct ``second_hop_max_pages`` cannot grow the per-index
    bridge matrices (nor their reached shares) without limit."""
    bp = graph.retriever.bridge_pages
    for max_pages in range(1, 40):
        bp.reached_share(max_pages)
    assert len(bp._matrices) <= 8
    assert len(bp._reached) <= 64
    # the value asked last is kept, and the same as a fresh build gives
    fresh = second_hop_mod.BridgePages(graph.retriever)
    assert (bp.matrix(39) != fresh.matrix(39)).nnz == 0


# -- the helpers themselves ----------------------------------------------------------------
class _Owner:
    def __init__(self, slowed: Slowed) -> None:
        self.slowed = slowed

    @once_property
    def part(self) -> object:
        return self.slowed(object)


def test_once_property_builds_once():
    slowed = Slowed(lambda cls: cls())
    owner = _Owner(slowed)
    assert_built_once(lambda: owner.part, slowed)
    assert owner.__dict__["part"] is owner.part


def test_built_once_retries_a_build_that_raised():
    class Obj:
        pass

    obj, calls = Obj(), []

    def build():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first build fails")
        return "part"

    with pytest.raises(RuntimeError):
        built_once(obj, "_part", build)
    assert "_part" not in obj.__dict__
    assert built_once(obj, "_part", build) == "part" == obj._part
    assert built_once(obj, "_part", build) == "part" and len(calls) == 2


def test_memo_keeps_the_most_recently_used():
    memo: Memo[int] = Memo(2)
    assert [memo.get(k, lambda k=k: k * 10) for k in (1, 2, 1, 3)] == [10, 20, 10, 30]
    assert 1 in memo and 3 in memo and 2 not in memo and len(memo) == 2
