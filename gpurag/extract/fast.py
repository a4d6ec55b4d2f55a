"""The fast regex extractor: capitalized names, dates, years and quoted titles in one regex
pass over the batch, assembled by :mod:`gpurag.extract.assembly`."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from gpurag.arrays import unique_sorted
from gpurag.extract.assembly import assemble_extraction, texts_and_titles
from gpurag.extract.base import Extraction

_SEP = "\x00"  # joins chunk texts: not a word or space character, so no match crosses it


def _char_class(*preds: Any) -> str:
    """A regex character class of all BMP characters satisfying any of ``preds`` (unbound
    ``str`` methods such as ``str.isupper``), as ranges. The tests run as C loops over one
    string of the plane and the runs are found with NumPy: at import this costs a few
    milliseconds instead of 65,536 Python calls."""
    plane = "".join(map(chr, range(0x10000)))
    hit = np.zeros(len(plane), dtype=bool)
    for pred in preds:
        hit |= np.fromiter(map(pred, plane), dtype=bool, count=len(plane))
    codes = np.flatnonzero(hit)
    if not len(codes):
        return "[]"
    breaks = np.flatnonzero(np.diff(codes) != 1)
    starts = codes[np.r_[0, breaks + 1]].tolist()
    ends = codes[np.r_[breaks, len(codes) - 1]].tolist()
    parts = [re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
             for lo, hi in zip(starts, ends, strict=True)]
    return "[" + "".join(parts) + "]"


_U = _char_class(str.isupper, str.istitle)
_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December|"
    "Jan\\.|Feb\\.|Mar\\.|Apr\\.|Jun\\.|Jul\\.|Aug\\.|Sept?\\.|Oct\\.|Nov\\.|Dec\\."
)
_ABBREV = (
    "St|Mt|Ft|Dr|Mr|Mrs|Ms|Jr|Sr|Gen|Col|Lt|Sgt|Capt|Cpt|Rev|Prof|Sen|Gov|Pres|Rep|Co|Inc|Ltd|"
    "Corp|Bros|No|Vol|Adm|Maj|Hon"
)
# words that start sentences (or are capitalized) but never start a name
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOP_WORDS = _words(
    """A About Above According Across After Afterwards Again Against Ago Albeit All Almost Along
    Already Also Although Always Among Amongst An And Another Any Anyone Anything Are Around As
    At Be Because Been Before Being Below Beside Besides Between Beyond Both But By Can Could
    Did Do Does Despite During Each Either Else Even Eventually Ever Every Except
    Finally Following For Formerly From Further Furthermore Had Has Have He Hence Her Here
    Hers Herself Him Himself His How However I If In Including Indeed Initially Instead Into Is
    It Its Itself Just Lately Least Less Like Many Meanwhile Might More Moreover
    Most Mostly Much Must My Near Nearly Neither Never Nevertheless No Nobody None Nor Not
    Nothing Now Of Often On Once Only Or Other Others Otherwise Our Out Over Overall Perhaps
    Prior Rather Recently Regardless Several She Should Similarly Since So Some Sometimes
    Soon Still Subsequently Such Than That The Their Them Themselves Then There Thereafter
    Therefore These They This Those Though Through Throughout Thus To Too Toward
    Towards Under Unlike Until Upon Us Was We Were What Whatever When Whenever Where Whereas
    Whether Which While Who Whom Whose Why With Within Without Would Yet You Your"""
)
_CALENDAR = _words(
    """Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May
    June July August September October November December"""
)
# one-word names dropped outright
SINGLE_WORD_DROP = STOP_WORDS | _CALENDAR


def _alternation(words: frozenset[str] | list[str]) -> str:
    """A group matching exactly one of ``words`` (each literal), as a prefix tree:
    ``(?:A(?:bout|...)?|B...)``. The regex engine tries one branch per letter instead of one
    per word. Where the caller only asks whether some word matches (a lookahead, or words of
    which at most one can be followed by what comes next), it is the plain ``a|b|...``."""
    tree: dict = {}
    for w in words:
        node = tree
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        alts = [re.escape(ch) + emit(node[ch]) for ch in sorted(k for k in node if k)]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 and "" not in node else f"(?:{'|'.join(alts)})"
        return body + ("?" if "" in node else "")

    return f"(?:{emit(tree)})"


_STOP_ALT = _alternation(STOP_WORDS)  # (in a lookahead: whether one of them is there)
# a word: a capital, then letters/digits, each apostrophe or hyphen followed by one (runs
# between separators: the same words as one loop over the three, in fewer regex steps)
_WORD = rf"{_U}[^\W_]*(?:(?:['’](?![sS]\b)|-)(?=[^\W_])[^\W_]*)*"
_TOKEN = (
    rf"(?:{_alternation(_ABBREV.split('|'))}\.(?=[ \t]+{_U})"  # St. Louis, Dr. Who
    rf"|{_U}\.(?:[ \t]?{_U}\.)*(?:[ \t]?{_WORD})?"  # J. R. R. Tolkien, U.S., U.S. Army
    rf"|{_WORD})"
)
_CONNECT = (  # between name tokens: space, optional possessive, optional particle (+ "the")
    r"(?:['’]s)?[ \t]+"
    r"(?:(?:of|for|de|la|le|du|des|di|da|del|della|von|van|der|den|y|&)[ \t]+(?:the[ \t]+)?)?"
)
_NUMBER_TAIL = r"(?:[ \t]+\d{1,3}[A-Za-z]?\b(?![.,]\d))?"  # Apollo 11, Formula 1
_YEAR_HEAD = r"(?:(?:1[0-9]{3}|20[0-9]{2})(?:[–-][0-9]{2,4})?[ \t]+)?"  # 2018 Winter Olympics
_NAME = (
    rf"\b{_YEAR_HEAD}(?={_U})(?!{_STOP_ALT}\b)"
    rf"{_TOKEN}(?:{_CONNECT}{_TOKEN})*{_NUMBER_TAIL}"
)
_DATE = (
    rf"\b(?:(?:{_MONTHS})[ \t]+\d{{1,2}}(?:st|nd|rd|th)?,?[ \t]+\d{{4}}"
    rf"|\d{{1,2}}[ \t]+(?:{_MONTHS}),?[ \t]+\d{{4}}"
    rf"|(?:{_MONTHS})[ \t]+\d{{4}})\b"
)
_YEAR = r"\b(?:1[0-9]{3}|20[0-9]{2})(?:s\b|\b)(?![.,]\d)"
_WORK = (
    r"(?:(?<=[\s(\x00]\")|(?<=^\"))"
    rf"{_U}[^\"\n\x00]{{0,80}}?(?=\")"
    r"|(?<=“)[^”\n\x00]{1,80}(?=”)"
)
ENTITY_PATTERN = re.compile(
    rf"(?P<DATE>{_DATE})|(?P<WORK>{_WORK})|(?P<NAME>{_NAME})|(?P<YEAR>{_YEAR})"
)
SENTENCE_BREAK = re.compile(
    r"(?<=[.!?])"
    rf"(?<!\b{_U}\.)"
    r"(?<!\b(?:Mr|Dr|St|Mt|Ft|Jr|Sr|Ms|Co|No|Lt|vs)\.)"
    r"(?<!\b(?:Mrs|Gen|Col|Sgt|Rev|Inc|Ltd|Vol|Gov|Sen|Rep|Cpt|Adm|Maj|Hon)\.)"
    r"(?<!\b(?:Capt|Prof|Corp|Pres|Bros)\.)"
    r"[\"'”’)\]]*\s+"
    rf"(?=[\"'“‘(\[]?(?:{_U}|\d))"
)
# a lower-case ASCII word of 2+ letters, not inside a longer word: the letter before it is
# tested after its first letter, so the pattern opens with a character class (the regex
# engine then skips to those letters instead of trying every position; the same matches as
# ``(?<![^\W\d_])[a-z][a-z]+(?![^\W\d_])``, _PLAIN_LOWER in tests/memory/test_write_batch.py)
_LOWER_WORD = re.compile(r"[a-z](?<![^\W\d_][a-z])[a-z]+(?![^\W\d_])")
_LABELS = {"DATE": "DATE", "WORK": "WORK", "NAME": "NAME", "YEAR": "DATE"}


@dataclass
class FastExtractor:
    """Regex/heuristic entity extractor: capitalized multi-word names (with ``of``/``de``/...
    connectors, initials and a trailing number), dates and years, and quoted titles.

    A one-word capitalized match at a sentence start is dropped when the same word occurs in
    lower case anywhere in the batch (``Born``, ``Located``) -- batches of a few hundred chunks
    or more make this reliable; ``STOP_WORDS`` covers the rest. Labels: ``NAME``, ``DATE``,
    ``WORK``, ``TITLE``.
    """

    max_per_sentence: int = 24
    max_name_chars: int = 80
    name: str = field(init=False)
    cpu_bound: ClassVar[bool] = True  # batches may run in worker processes

    def __post_init__(self) -> None:
        self.name = f"fast-v2(max_per_sentence={self.max_per_sentence})"

    def extract(self, chunks: pd.DataFrame, offset: int = 0) -> Extraction:
        """Extract mentions and co-occurrence relations from a batch of chunks."""
        texts, titles = texts_and_titles(chunks)
        n = len(texts)
        if n == 0:
            return Extraction()
        joined = _SEP.join(texts)
        lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=n)
        base = np.r_[0, np.cumsum(lengths + 1)[:-1]].astype(np.int64)[:n]

        hits = [(m.start(), m.end(), m.lastgroup) for m in ENTITY_PATTERN.finditer(joined)]
        breaks = np.fromiter((m.end() for m in SENTENCE_BREAK.finditer(joined)), dtype=np.int64)
        starts = np.fromiter((h[0] for h in hits), dtype=np.int64, count=len(hits))
        ends = np.fromiter((h[1] for h in hits), dtype=np.int64, count=len(hits))
        groups = pd.Series([h[2] for h in hits], dtype=object)
        words = pd.Series([joined[s:e] for s, e, _ in hits], dtype=object)
        chunk = np.searchsorted(base, starts, side="right") - 1
        sent_all = unique_sorted(np.r_[base, breaks])  # global sentence starts
        sent_idx = np.searchsorted(sent_all, starts, side="right") - 1
        at_sentence_start = sent_all[np.maximum(sent_idx, 0)] == starts

        stats: Counter = Counter()
        keep = (ends - starts) <= self.max_name_chars
        single = (
            (groups == "NAME").to_numpy()
            & ~words.str.contains(" ", regex=False).to_numpy(dtype=bool)
            & ~words.str.endswith(".").to_numpy(dtype=bool)
        )
        keep &= ~(single & words.isin(SINGLE_WORD_DROP).to_numpy())
        letter = single & (words.str.len() == 1).to_numpy(dtype=bool)  # "B" of "LL.B"
        keep &= ~letter
        stats["dropped_single_letter"] += int(letter.sum())
        suspect = single & at_sentence_start & keep
        if suspect.any():
            lower_words = set(_LOWER_WORD.findall(joined))
            common = words[suspect].str.lower().isin(lower_words).to_numpy()
            drop = np.flatnonzero(suspect)[common]
            keep[drop] = False
            stats["dropped_sentence_initial"] += len(drop)
        labels = groups.map(_LABELS).to_numpy(dtype=object)

        per_chunk = np.split(sent_all, np.searchsorted(sent_all, base[1:]))
        return assemble_extraction(
            texts,
            titles,
            chunk[keep],
            (starts - base[chunk])[keep],
            (ends - base[chunk])[keep],
            labels[keep],
            [s - b for s, b in zip(per_chunk, base, strict=True)],
            offset,
            self.max_per_sentence,
            stats,
            names=words.to_numpy(dtype=object)[keep],
        )
