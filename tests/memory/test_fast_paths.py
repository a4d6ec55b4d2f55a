"""The faster forms of the memory's hot paths return exactly what the plain forms did: the
dense-vector push PPR and relational view of the scale index (gpurag.memory.scale), the
prefix-pruned tagging and incremental canonical map of the vocabulary, and the one-pass word
prefilters of the discourse rules. Each is compared with a plain reference on fixtures."""

from __future__ import annotations

import numpy as np
import pytest

from gpurag.memory import Memory
from gpurag.memory.discourse import _ATTRIBUTE_WORDS, _RELATIVE_WORDS, _may_match
from gpurag.memory.scale import MASS_FLOOR, ScaleIndex
from gpurag.memory.synthetic import generate
from gpurag.memory.vocab import _TOKEN, INTERJECTIONS, MAX_TOKENS, Vocabulary, split_camel
from gpurag.resolve.normalize import normalize_name
from tests.memory.test_scale import _Precomputed, _traces


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    rows, vec = _traces(400, seed=11)
    rows += [{"text": f"Lone{i} waved.", "session": "solo", "turn": i, "time": 500.0 + i}
             for i in range(6)]  # entities in one-entity rows only: no degree (dangling)
    vec = np.r_[vec, vec[:6]]
    mem = Memory.create(tmp_path_factory.mktemp("fast") / "m", embedder=_Precomputed(),
                        scale_from=0)
    mem.add_many(rows, vectors=vec)
    mem._refresh()
    yield mem, mem._index
    mem.close()


def _sparse_push(idx: ScaleIndex, anchor: int, damping: float, eps: float = 1e-5):
    """The push before the dense vectors: targets found with np.unique each round."""
    deg, m = idx.deg, idx.m.view()
    ptr, ents = idx.row_ptr.view(), idx.row_ent.view()
    r, p = np.zeros(len(deg)), np.zeros(len(deg))
    touched = [np.asarray([anchor], np.int64)]
    r[anchor] = 1.0
    front = touched[0]
    while len(front):
        mass = r[front]
        r[front] = 0.0
        p[front] += (1 - damping) * mass
        dangling = deg[front] == 0
        if dangling.any():
            r[anchor] += damping * float(mass[dangling].sum())
        live = front[~dangling]
        nxt = [np.asarray([anchor], np.int64)] if dangling.any() else []
        if len(live):
            owner, rows = idx.postings(live)
            share = (damping * mass[~dangling] / deg[live])[owner]
            multi = m[rows] >= 2
            owner, rows, share = owner[multi], rows[multi], share[multi]
            size = m[rows].astype(np.int64)
            pos = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
            nb = ents[np.repeat(ptr[rows], size) + pos].astype(np.int64)
            val = np.repeat(share / (size - 1), size)
            keep = nb != np.repeat(live[owner], size)
            targets, inv = np.unique(nb[keep], return_inverse=True)
            r[targets] += np.bincount(inv, weights=val[keep], minlength=len(targets))
            touched.append(targets)
            nxt.append(targets)
        cand = np.unique(np.concatenate(nxt)) if nxt else np.zeros(0, np.int64)
        front = cand[r[cand] >= eps * np.maximum(deg[cand], 1)]
    seen = np.unique(np.concatenate(touched))
    support = seen[p[seen] > 0]
    return support, p[support] / max(p[anchor], MASS_FLOOR)


def test_dense_push_gives_the_sparse_push_bit_for_bit(index):
    _mem, idx = index
    anchors = [*range(0, len(idx.deg), 7), *np.flatnonzero(idx.deg == 0)[:3].tolist()]
    assert (idx.deg[anchors] == 0).any()  # a dangling anchor among them
    for a in anchors:
        for damping in (0.5, 0.85):
            got, want = idx.push(int(a), damping), _sparse_push(idx, int(a), damping)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert not idx._r.any() and not idx._p.any()  # the scratch is left zero


def test_relational_view_equals_a_per_row_loop(index):
    _mem, idx = index
    rng = np.random.default_rng(4)
    anchors = rng.choice(np.flatnonzero(idx.deg > 0), 3, replace=False)
    masses = idx.masses(anchors, 0.5)
    w = np.asarray([0.5, 0.3, 0.2])
    rows = np.r_[np.arange(idx.n), rng.integers(0, idx.n, 20)]  # repeats too
    got = idx.relational_of(rows, masses, w)
    ptr, ents = idx.row_ptr.view(), idx.row_ent.view()
    for j, row in enumerate(rows.tolist()):
        logm = 0.0
        for wa, (keys, vals) in zip(w, masses, strict=True):
            mass = dict(zip(keys.tolist(), np.float32(vals).tolist(), strict=True))
            best = max([mass.get(e, 0.0) for e in ents[ptr[row]:ptr[row + 1]].tolist()],
                       default=0.0)
            logm += wa * np.log(np.maximum(np.float32(best), MASS_FLOOR))
        assert got[j] == np.float32(np.exp(logm)), row


def _plain_tag(vocab: Vocabulary, text: str) -> list[int]:
    """Tagging without the prefix pruning."""
    raw = _TOKEN.findall(split_camel(text))
    toks = normalize_name(raw) if raw else []
    found = []
    for i in range(len(toks)):
        if not (raw[i][0].isupper() or raw[i][0].isdigit()):
            continue
        key = ""
        for j in range(i, min(len(toks), i + MAX_TOKENS)):
            key += toks[j].replace(" ", "")
            if key in vocab.index:
                found.append(vocab.index[key])
    return list(dict.fromkeys(found))


def _plain_canonical(v: Vocabulary) -> np.ndarray:
    """The canonical map computed from scratch, as before it was kept between calls."""
    n = len(v.keys)
    canon = np.arange(n, dtype=np.int64)
    single = np.asarray(v.n_tokens) == 1
    cap = np.asarray([v.cap_count[k] for k in v.keys], dtype=np.float64)
    low = np.asarray([v.lower_words.get(k, 0) for k in v.keys], dtype=np.float64)
    opener = np.asarray([a in INTERJECTIONS for a, _ in v.first_last])
    common = (single & (low >= np.maximum(1.0, 0.2 * cap))) | opener
    ends: dict[str, list[int]] = {}
    for i in np.flatnonzero(~single):
        a, b = v.first_last[i]
        ends.setdefault(a, []).append(int(i))
        if b != a:
            ends.setdefault(b, []).append(int(i))
    for i in np.flatnonzero(single & ~common):
        owners = ends.get(v.keys[i])
        if owners is not None and len(owners) == 1:
            canon[i] = owners[0]
    canon[common] = -1
    return canon


def _conversation_texts() -> list[str]:
    corpus, _ = generate(6, seed=3, n_sessions=4)
    extra = ["Hey Wolfgang, WolfgangSchulz and Dr. Mira Okafor-Reyes met Li Hua at 5 Elm Road.",
             "Wolfgang said thanks; Thanks Wolfgang!", "the wolfgang thing", "Li Hua LiHua li hua",
             "Hello Mary Ann Smith Jones Brown Green White of York 2023 Vol 2."]
    return [r["text"] for r in corpus] + extra


def test_pruned_tagging_and_kept_canonical_map_equal_the_plain_ones():
    texts = _conversation_texts()
    vocab = Vocabulary()
    for lo in range(0, len(texts), 17):  # grown in batches, checked after each
        vocab.learn(texts[lo:lo + 17])
        assert np.array_equal(vocab.canonical(), _plain_canonical(vocab))
        for t in texts:
            assert vocab.tag(t) == _plain_tag(vocab, t), t
    assert (vocab.canonical() == -1).any() and (vocab.canonical()
                                                != np.arange(len(vocab))).any()
    again = Vocabulary.from_frames(vocab.to_frame(), vocab.lower_frame())  # a fresh vocabulary
    assert np.array_equal(again.canonical(), vocab.canonical())
    assert [again.tag(t) for t in texts] == [vocab.tag(t) for t in texts]


def test_word_prefilters_equal_any_substring():
    texts = [*_conversation_texts(), "I MOVED to Oslo", "Ünïcode move", "nothing here", ""]
    for words in (_ATTRIBUTE_WORDS, _RELATIVE_WORDS):
        for t in texts:
            want = (not t.isascii()) or any(w in t.lower() for w in words)
            assert _may_match(t, words) == want


def test_sort_unique_equals_numpy_unique():
    from gpurag.memory.postings import unique

    rng = np.random.default_rng(9)
    for a in (np.zeros(0, np.int64), np.asarray([5]), rng.integers(0, 7, 50),
              rng.integers(0, 1 << 40, 3000), rng.integers(-5, 5, 100).astype(np.int32)):
        want, inv = np.unique(a, return_inverse=True)
        got, ginv = unique(a, return_inverse=True)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        assert np.array_equal(ginv, inv) and np.array_equal(unique(a), want)


def test_bm25_bounded_by_the_common_terms_equals_the_full_scoring(index):
    mem, idx = index
    rng = np.random.default_rng(5)
    texts = [mem.texts[i] for i in rng.integers(0, 400, 30)]
    qs = [t.replace(" at ", " met plan at ") for t in texts]  # rare names + common words
    qs += ["Porto3 met the budget plan", "plan met", "met Lone2 plan plan", "Ann1 plan"]
    old = idx.common_df
    idx.common_df = 60  # "met", "plan" and the topic words are common here
    try:
        used = []
        real = idx._lexical_bounded

        def spy(*a):
            got = real(*a)
            used.append(got is not None)
            return got

        idx._lexical_bounded = spy
        for k in (1, 5, 20):
            got = idx.lexical(qs, k)
            for q, g in zip(qs, got, strict=True):
                terms = np.asarray([idx.term_ids[w] for w in idx.tokens(q)
                                    if w in idx.term_ids])
                avg = float(idx.doc_len.view().mean())
                assert g == idx._lexical_all(terms, avg, k), q  # same docs, same floats
        assert any(used) and not all(used)  # bounded answers, and fallbacks
    finally:
        idx.common_df = old
        del idx._lexical_bounded
