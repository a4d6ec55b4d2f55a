"""Content tokens of normalized names as sparse rows, with vectorized pair tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp

from gpurag.resolve.normalize import FUNCTION_WORDS


def _string_similarity(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Indel (LCS) similarity in [0, 1] of aligned string pairs."""
    if len(a) == 0:
        return np.zeros(0, dtype=np.float32)
    try:
        from rapidfuzz.distance import Indel
        from rapidfuzz.process import cpdist
    except ImportError:  # pragma: no cover - rapidfuzz is a dependency; tiny fallback
        from difflib import SequenceMatcher

        return np.asarray(
            [SequenceMatcher(None, x, y).ratio() for x, y in zip(a, b, strict=True)],
            dtype=np.float32,
        )
    return cpdist(list(a), list(b), scorer=Indel.normalized_similarity).astype(np.float32)


def _rowsum(m: sp.csr_matrix) -> np.ndarray:
    return np.asarray(m.sum(axis=1)).ravel()


def _binary_matrix(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    m = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=shape)
    m.data[:] = 1.0  # duplicates collapse to a set
    return m


@dataclass
class Tokens:
    """Per normalized key: content-token sets as sparse rows, plus vectorized pair tests.

    Words (``full``) are tokens of 2+ characters or digits; single letters are initials, which
    match an identical initial or a word with that first letter on the other side.
    """

    full: sp.csr_matrix  # key x word, 1 where the key has the word
    position: sp.csr_matrix  # key x word, 1-based position of the word among the key's words
    initials: sp.csr_matrix  # key x letter, single-letter tokens
    first_letter: sp.csr_matrix  # word x letter
    vocab: np.ndarray  # word strings (columns of ``full``)
    n_full: np.ndarray
    n_init: np.ndarray
    last: np.ndarray  # last content token ("" if none)
    acronym: np.ndarray  # first letters of the content tokens when 2+ of them, else ""

    @classmethod
    def build(cls, keys: Sequence[str]) -> Tokens:
        n = len(keys)
        toks = pd.Series(list(keys), dtype=object).str.split().explode()
        toks = toks[toks.notna() & ~toks.isin(FUNCTION_WORDS)]
        owner = toks.index.to_numpy(np.int64)
        words = toks.to_numpy(dtype=object)
        first = toks.str[:1].to_numpy(dtype=object)
        single = ((toks.str.len() == 1) & toks.str.isalpha()).to_numpy(dtype=bool)
        wid, vocab = pd.factorize(words)
        lid, alphabet = pd.factorize(first)
        frame = pd.DataFrame({"owner": owner, "word": words, "first": first, "wid": wid})
        whole = frame[~single].drop_duplicates(["owner", "wid"])
        pos = whole.groupby("owner").cumcount().to_numpy() + 1
        shape = (n, len(vocab))
        full = _binary_matrix(whole["owner"].to_numpy(), whole["wid"].to_numpy(), shape)
        position = sp.csr_matrix(
            (pos.astype(np.float32), (whole["owner"].to_numpy(), whole["wid"].to_numpy())),
            shape=shape,
        )
        initials = _binary_matrix(owner[single], lid[single], (n, len(alphabet)))
        word_letter = pd.DataFrame({"w": wid, "l": lid}).drop_duplicates("w")
        first_letter = _binary_matrix(
            word_letter["w"].to_numpy(), word_letter["l"].to_numpy(), (len(vocab), len(alphabet))
        )
        last = np.full(n, "", dtype=object)
        acronym = np.full(n, "", dtype=object)
        if len(frame):  # tokens come grouped by owner, in order (explode keeps the rows' order)
            head = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
            tail = np.r_[head[1:], len(owner)] - 1
            last[owner[head]] = words[tail]
            initials_str = np.add.reduceat(first, head)  # each key's first letters, joined
            multi = tail - head >= 1
            acronym[owner[head][multi]] = initials_str[multi]
        return cls(
            full=full,
            position=position,
            initials=initials,
            first_letter=first_letter,
            vocab=np.asarray(vocab, dtype=object),
            n_full=_rowsum(full).astype(np.int64),
            n_init=_rowsum(initials).astype(np.int64),
            last=last,
            acronym=acronym,
        )

    def relation(
        self, i: np.ndarray, j: np.ndarray, token_similarity: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For pairs ``(i, j)``: ``i_in_j`` (every token of i is matched in j), ``j_in_i``, and
        ``variant`` (each side has exactly one unmatched word and they are spelling variants).
        """
        fi, fj = self.full[i], self.full[j]
        common = fi.multiply(fj).tocsr()
        inter = _rowsum(common).astype(np.int64)
        free_i, free_j = self.n_full[i] - inter, self.n_full[j] - inter  # unmatched words
        ii, ij = self.initials[i], self.initials[j]
        # first letters of each side's unmatched words
        free_letters_i = ((fi - common) @ self.first_letter).astype(bool).astype(np.float32)
        free_letters_j = ((fj - common) @ self.first_letter).astype(bool).astype(np.float32)
        # words of one side covered by initials of the other ("fitzgerald" by "f")
        cover_i = _rowsum(ij.multiply(free_letters_i)).astype(np.int64)
        cover_j = _rowsum(ii.multiply(free_letters_j)).astype(np.int64)
        # initials matched by an identical initial or an unmatched word of the other side
        hit_i = _rowsum(ii.multiply((ij + free_letters_j).astype(bool))).astype(np.int64)
        hit_j = _rowsum(ij.multiply((ii + free_letters_i).astype(bool))).astype(np.int64)
        miss_i = np.maximum(free_i - cover_i, 0) + (self.n_init[i] - hit_i)
        miss_j = np.maximum(free_j - cover_j, 0) + (self.n_init[j] - hit_j)
        variant = np.zeros(len(i), dtype=bool)
        cand = np.flatnonzero((free_i == 1) & (free_j == 1) & (miss_i == 1) & (miss_j == 1))
        if len(cand):
            di = (fi[cand] - common[cand]).tocsr()
            dj = (fj[cand] - common[cand]).tocsr()
            di.eliminate_zeros()
            dj.eliminate_zeros()
            di.sort_indices()
            dj.sort_indices()
            wi = self.vocab[di.indices]  # exactly one per row
            wj = self.vocab[dj.indices]
            si, sj = pd.Series(wi, dtype=object), pd.Series(wj, dtype=object)
            # long alphabetic words only: "apobec3a" / "apobec3b" are different genes
            long_enough = ((si.str.len() >= 6) & si.str.isalpha()).to_numpy() & (
                (sj.str.len() >= 6) & sj.str.isalpha()
            ).to_numpy()
            sim = _string_similarity(wi.tolist(), wj.tolist())
            variant[cand] = long_enough & (sim >= token_similarity)
        return miss_i == 0, miss_j == 0, variant

    def same_order(self, short: np.ndarray, long: np.ndarray) -> np.ndarray:
        """Whether the words ``short`` shares with ``long`` come in the same order in both
        ("university of pennsylvania" is not inside "pennsylvania state university")."""
        shared = self.full[short].multiply(self.full[long]).tocsr()
        pos_s = shared.multiply(self.position[short]).tocsr()
        pos_l = shared.multiply(self.position[long]).tocsr()
        for m in (pos_s, pos_l):
            m.sort_indices()
        row = np.repeat(np.arange(len(short)), np.diff(pos_s.indptr))
        order = np.lexsort((pos_s.data, row))
        ranked_l, ranked_row = pos_l.data[order], row[order]
        backwards = (np.diff(ranked_l) <= 0) & (ranked_row[1:] == ranked_row[:-1])
        bad = np.bincount(ranked_row[1:][backwards], minlength=len(short))
        return bad == 0
