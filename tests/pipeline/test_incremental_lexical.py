"""The BM25 model of a local update (issue 34): the stored model updated by the change gives
the scores of a model rebuilt over all chunks; what cannot be recovered is rebuilt."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from gpurag.pipeline.incremental_lexical import recover_counts, write_lexical_delta
from gpurag.query.lexical import BM25Index, _bm25s

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample" / "corpus.jsonl"


def _chunks() -> pd.DataFrame:
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return pd.DataFrame({"chunk_id": [r["id"] for r in rows],
                         "title": [r.get("title", "") for r in rows],
                         "text": [r["text"] for r in rows]})


def test_updated_model_scores_as_a_rebuild(tmp_path):
    chunks = _chunks()
    old, new = chunks.iloc[:45].reset_index(drop=True), chunks.iloc[45:].reset_index(drop=True)
    BM25Index(old).save(tmp_path / "old")
    keep = np.ones(len(old), bool)
    keep[[3, 4, 20, 44]] = False  # a delete and an insert in one update
    assert write_lexical_delta(tmp_path / "old", tmp_path / "new", len(old), keep, new)
    final = pd.concat([old[keep], new], ignore_index=True)
    got, want = BM25Index.load(tmp_path / "new", len(final)), BM25Index(final)
    questions = [*chunks["title"].astype(str), "Who founded Kestrel Dynamics?",
                 "a word no passage has: zyxwvut"]
    (sa, ia), (sb, ib) = got.search(questions, 10), want.search(questions, 10)
    assert np.array_equal(ia, ib) and np.array_equal(sa, sb)
    # every stored weight, not only the top ones
    a, b = got.matrix.toarray(), want.matrix.toarray()
    vocab_a, vocab_b = got.model.vocab_dict, want.model.vocab_dict
    assert set(vocab_b) <= set(vocab_a)  # terms only removed passages had stay, unused
    common = sorted(w for w in vocab_b if w)  # bm25s' empty token has no row
    assert np.array_equal(a[[vocab_a[w] for w in common]], b[[vocab_b[w] for w in common]])


def test_a_passage_whose_terms_all_repeat_is_recovered(tmp_path):
    """The second passage has every term twice (its weights alone give only K / 2): its
    counts are recovered all the same and the updated model scores as a rebuild (at 50k
    enwiki passages one such passage sent every update to a full BM25 rebuild)."""
    chunks = pd.DataFrame({"chunk_id": ["a", "b", "c"], "title": ["", "", ""],
                           "text": ["alpha beta gamma", "delta delta omega omega omega",
                                    "beta beta delta kappa"]})
    BM25Index(chunks).save(tmp_path / "old")
    model = _bm25s().BM25.load(str(tmp_path / "old"), mmap=False, show_progress=False)
    tf, _, doc, dl = recover_counts(model)
    assert dl.tolist() == [3, 5, 4] and sorted(tf[doc == 1].tolist()) == [2, 3]
    new = pd.DataFrame({"chunk_id": ["d"], "title": [""], "text": ["omega alpha alpha"]})
    assert write_lexical_delta(tmp_path / "old", tmp_path / "new", 3, np.ones(3, bool), new)
    got = BM25Index.load(tmp_path / "new", 4)
    want = BM25Index(pd.concat([chunks, new], ignore_index=True))
    (sa, ia), (sb, ib) = got.search(["omega delta", "alpha beta kappa"], 4), \
        want.search(["omega delta", "alpha beta kappa"], 4)
    assert np.array_equal(ia, ib) and np.array_equal(sa, sb)


def test_another_scoring_variant_means_a_rebuild(tmp_path):
    chunks = _chunks().iloc[:5]
    bm25s = _bm25s()
    model = bm25s.BM25(method="bm25+")
    model.index(bm25s.tokenize(chunks["text"].tolist(), stopwords="en", show_progress=False),
                show_progress=False)
    model.save(str(tmp_path / "old"), show_progress=False)
    assert recover_counts(model) is None
    assert not write_lexical_delta(tmp_path / "old", tmp_path / "new", 5, np.ones(5, bool),
                                   chunks.iloc[:0])
    assert not (tmp_path / "new").exists()


def test_recovered_counts_give_back_every_stored_weight_by_the_shared_formula(tmp_path):
    """lucene_weights (gpurag.query.lexical) of the recovered counts is bm25s' stored data,
    and weights that are no formula's (one nudged) are refused without a second pass."""
    from gpurag.query.lexical import lucene_weights

    BM25Index(_chunks()).save(tmp_path / "m")
    model = _bm25s().BM25.load(str(tmp_path / "m"), mmap=False, show_progress=False)
    tf, term, doc, dl = recover_counts(model)
    n_terms = len(model.scores["indptr"]) - 1
    got = lucene_weights(tf, term, doc, dl, n_terms, float(model.k1), float(model.b))
    assert np.allclose(got, model.scores["data"], rtol=1e-6, atol=0)
    data = np.array(model.scores["data"], np.float32)
    data[np.argmax(data)] *= 0.97  # no whole tf gives this weight
    model.scores = {**model.scores, "data": data}
    assert recover_counts(model) is None


def test_new_pairs_are_inserted_in_term_then_passage_order():
    """The new passages' pairs go in at the end of their terms' runs (no sort of the stored
    pairs): the same order a sort of all pairs gives, and a stored model not in that order is
    sorted."""
    from gpurag.pipeline.incremental_lexical import _merged_pairs

    rng = np.random.default_rng(0)
    term = rng.integers(0, 40, 500)
    doc = rng.integers(0, 60, 500)
    pairs = np.unique(np.stack([term, doc], 1), axis=0)  # sorted by (term, doc)
    stored = (rng.random(len(pairs)), pairs[:, 0], pairs[:, 1])
    new = (rng.random(30), rng.integers(0, 45, 30), rng.integers(60, 63, 30))
    new = tuple(a[np.unique(np.stack([new[1], new[2]], 1), axis=0, return_index=True)[1]]
                for a in new)

    def sorted_all(a, b):
        cat = [np.concatenate([x, y]) for x, y in zip(a, b, strict=True)]
        order = np.lexsort((cat[2], cat[1]))
        return [c[order] for c in cat]

    for got, want in zip(_merged_pairs(stored, new), sorted_all(stored, new), strict=True):
        assert np.array_equal(got, want)
    shuffled = tuple(a[::-1] for a in stored)
    for got, want in zip(_merged_pairs(shuffled, new), sorted_all(shuffled, new), strict=True):
        assert np.array_equal(got, want)


def _write_delta(folder: Path, texts: list[list[str]], growth: float) -> None:
    """The BM25 deltas of inserts of ``texts`` (one list a insert) written into ``folder``
    beside its stored model, as a local insert writes them (its parts one file each here)."""
    from gpurag.pipeline.incremental_lexical import delta_part
    from gpurag.query import lexical_delta

    bm25s = _bm25s()
    for i, batch in enumerate(texts):
        meta = lexical_delta.read_meta(folder)
        model = bm25s.BM25.load(str(folder), mmap=True, show_progress=False)
        entries, meta = delta_part(model, meta, batch, growth, bm25s)
        name = f"delta.part{i + 1:05d}.npy"
        np.save(folder / name, entries, allow_pickle=False)
        meta["parts"] = [*meta["parts"], name]
        (folder / lexical_delta.META).write_text(json.dumps(meta), encoding="utf-8")


def test_a_bm25_delta_is_searched_with_the_stored_model_as_one(tmp_path):
    """Inserts written as deltas (an empty passage in the base: bm25s' vocabulary then holds
    an empty word past its terms): the loaded model has every passage, the new words, and
    scores each new passage as a rebuild would up to the stale statistics (the same best
    passage for every title question; the new passages' weights a rebuild's, the stored ones'
    within the avgdl drift), and re-weighted whole it gives a rebuild's scores."""
    chunks = _chunks()
    old = pd.concat([chunks.iloc[:50], pd.DataFrame({"chunk_id": ["empty"], "title": [""],
                                                      "text": ["the of and"]})],
                    ignore_index=True)
    BM25Index(old).save(tmp_path / "m")
    stored = BM25Index.load(tmp_path / "m", len(old))
    assert "" in stored.model.vocab_dict  # the case that shifted new words' ids
    news = [chunks.iloc[50:52], chunks.iloc[52:55]]  # within the default 10% growth
    from gpurag.query.lexical import passage_texts

    _write_delta(tmp_path / "m", [passage_texts(n) for n in news], growth=0.1)
    final = pd.concat([old, *news], ignore_index=True)
    got, want = BM25Index.load(tmp_path / "m", len(final)), BM25Index(final)
    assert got.model.scores["num_docs"] == len(final)
    assert set(want.model.vocab_dict) <= set(got.model.vocab_dict)
    titles = [str(t) for t in final["title"].iloc[len(old):]]
    (sa, ia), (sb, ib) = got.search(titles, 3), want.search(titles, 3)
    assert np.array_equal(ia[:, 0], ib[:, 0])
    # every weight: the delta's passages' a rebuild's (to the rounding of avgdl), the stored
    # passages' rescaled to the idf of now (their length normalization keeps the stored
    # avgdl: within a percent at this growth)
    common = sorted(w for w in want.model.vocab_dict if w)
    a = got.matrix[[got.model.vocab_dict[w] for w in common]].toarray()
    b = want.matrix[[want.model.vocab_dict[w] for w in common]].toarray()
    assert np.array_equal(a > 0, b > 0)
    assert np.allclose(a[:, len(old):], b[:, len(old):], rtol=1e-5, atol=0)
    assert np.allclose(a[:, : len(old)], b[:, : len(old)], rtol=0.01, atol=0)
    assert not np.allclose(stored.matrix.toarray()[[stored.model.vocab_dict[w] for w in common
                                                    if w in stored.model.vocab_dict]],
                           b[[i for i, w in enumerate(common) if w in stored.model.vocab_dict]
                             ][:, : len(old)], rtol=0.01, atol=0)  # as stored: stale
    # the delta's counts re-weighted whole give a rebuild's scores
    assert write_lexical_delta(tmp_path / "m", tmp_path / "w", len(final),
                               np.ones(len(final), bool), final.iloc[:0])
    whole = BM25Index.load(tmp_path / "w", len(final))
    qs = [*titles, "Who founded Kestrel Dynamics?"]
    (sa, ia), (sb, ib) = whole.search(qs, 5), want.search(qs, 5)
    assert np.array_equal(ia, ib) and np.array_equal(sa, sb)


def test_passages_that_move_avgdl_are_not_written_as_a_delta(tmp_path):
    """Two passages into 51 (within the 10% growth bound): of the stored passages' length, a
    delta; five times as long (the average length up by about 8%: the stored passages' length
    normalization, kept at the stored avgdl, would drift by as much), no delta (None: the
    model is re-weighted whole), and the re-weighting gives a rebuild's scores."""
    from gpurag.pipeline.incremental_lexical import AVGDL_DRIFT, delta_part
    from gpurag.query.lexical import passage_texts

    chunks = _chunks()
    old = chunks.iloc[:51].reset_index(drop=True)
    BM25Index(old).save(tmp_path / "m")
    bm25s = _bm25s()
    model = bm25s.BM25.load(str(tmp_path / "m"), mmap=True, show_progress=False)
    lengths = [len(t.split()) for t in passage_texts(old)]
    mean = float(np.mean(lengths))
    like = chunks.iloc[51:53].reset_index(drop=True)
    words = " ".join(passage_texts(chunks.iloc[51:])).split()
    near = [" ".join(words[i * round(mean): (i + 1) * round(mean)]) for i in range(2)]
    made = delta_part(model, None, near, 0.1, bm25s)
    assert made is not None
    assert abs(made[1]["total_len"] / made[1]["docs"] / (made[1]["base_len"] / 51) - 1
               ) <= AVGDL_DRIFT
    n_long = 5 * round(mean)
    far = [" ".join((words * 6)[i * n_long: (i + 1) * n_long]) for i in range(2)]
    assert delta_part(model, None, far, 0.1, bm25s) is None
    assert delta_part(model, made[1], far, 0.1, bm25s) is None  # over an existing delta too
    long_chunks = like.assign(title="", text=far)
    out = tmp_path / "w"
    assert write_lexical_delta(tmp_path / "m", out, len(old), np.ones(len(old), bool),
                               long_chunks)
    got = BM25Index.load(out, len(old) + 2)
    want = BM25Index(pd.concat([old, long_chunks], ignore_index=True))
    qs = [str(t) for t in old["title"].iloc[:10]]
    (sa, ia), (sb, ib) = got.search(qs, 5), want.search(qs, 5)
    assert np.array_equal(ia, ib) and np.allclose(sa, sb, rtol=1e-4)
