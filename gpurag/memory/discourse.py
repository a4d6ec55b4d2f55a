"""Conversation structure read at write time, with surface rules only (zero LLM tokens).

Per session a :class:`Discourse` keeps a window of the entities mentioned in recent turns and
what each was introduced as ("My son Leo", "His teacher is Mr. Tanaka": Leo is the speaker's
son, Tanaka is Leo's teacher). For each new trace it resolves

- **pronouns** (he, she, they, his, her, their, ...) to the most recent entity of the window
  that is not a speaker of the session (one speaker addresses the other as "you");
- **possessive chains**: an entity's descriptor walked through its owners ("Tanaka teacher Leo
  son Mira"), so a question about "Mira's son's teacher" reaches a turn that only says "He
  teaches at Westfield School";
- **relative dates** ("yesterday", "three days ago", "last week(end)", "last Friday", "last
  month") to absolute dates by the trace's own time (its session date);
- **attribute claims**: (subject, attribute) pairs such as (Mira, residence) from a lexicon of
  paraphrases ("moved house", "new place", "relocated", "lives in", "address"), used to let a
  newer claim supersede an older one in ranking (:func:`supersede`).

The result is an :class:`Annotation`: referent names (added to the trace's entity tags), an
expansion text (added to its lexical document), resolved dates and claims. The stored text is
never changed.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpurag.extract.fast import _SEP  # joins a batch's texts: no word searched for holds it

SPEAKER = re.compile(r"^\s*(?P<name>[A-Z][\w'’.-]*(?:\s+[A-Z][\w'’.-]*){0,2})\s*:\s*")
PRONOUN = re.compile(r"\b(?:he|him|his|she|her|hers|they|them|their|theirs)\b", re.IGNORECASE)
FIRST_PERSON = re.compile(r"\b(?:I|[Mm]y|[Mm]e|[Mm]ine|[Ww]e|[Oo]ur|[Uu]s)\b")
_TITLE = r"(?:(?:Mr|Mrs|Ms|Dr|Miss|Prof)\.?\s+)?"
_NAME = r"[A-Z][\w'’-]+(?:\s+[A-Z][\w'’-]+){0,2}"
DESCRIPTOR = re.compile(
    rf"\b(?P<owner>[Mm]y|[Oo]ur|[Hh]is|[Hh]er|[Tt]heir)\s+(?P<noun>[a-z]+(?:\s+(?!is\b|was\b|named\b|called\b)[a-z]+)?)"
    rf"(?:,)?\s+(?:is\s+|was\s+|named\s+|called\s+)?{_TITLE}(?P<name>{_NAME})")
WINDOW = 6  # turns back within the session that a pronoun may reach
CHAIN = 3  # descriptor links walked

_NUM = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
        "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
RELATIVE = re.compile(
    r"\b(?P<expr>yesterday|today|tonight|this\s+morning|this\s+afternoon|this\s+evening|"
    r"last\s+night|the\s+day\s+before\s+yesterday|last\s+weekend|last\s+week|last\s+month|"
    r"last\s+year|last\s+(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
    r"(?:days?|weeks?|months?|years?)\s+ago)\b", re.IGNORECASE)

ATTRIBUTES: dict[str, re.Pattern] = {
    "residence": re.compile(
        r"\b(?:address|moved(?:\s+house)?|move\s+to|relocat\w*|live[sd]?\s+(?:in|at|on)|"
        r"living\s+(?:in|at|on)|new\s+(?:place|home|house|flat|apartment)|settled\s+into|"
        r"find\s+us\s+at|home\s+is)\b", re.IGNORECASE),
    "job": re.compile(
        r"\b(?:work(?:s|ing)?\s+(?:as|at|for)|my\s+job|new\s+job|employ\w*|hired|"
        r"position\s+(?:as|at)|promoted|career|do\s+for\s+a\s+living)\b", re.IGNORECASE),
    "partner": re.compile(
        r"\b(?:girlfriend|boyfriend|partner|wife|husband|married|dating|engaged|fianc[eé]e?)\b",
        re.IGNORECASE),
    "phone": re.compile(r"\b(?:phone|mobile|cell)\s*(?:number)?\b", re.IGNORECASE),
    "email": re.compile(r"\be-?mail\b", re.IGNORECASE),
    "hobby": re.compile(
        r"\b(?:hobby|hobbies|my\s+thing|picked\s+up|took\s+up|taken\s+up|love\s+\w+ing|"
        r"enjoy\s+\w+ing|favou?rite\s+(?:way|pastime|thing)|in\s+my\s+free\s+time|"
        r"every\s+(?:evening|weekend|morning|night|\w+day)|on\s+weekends|"
        r"my\s+\w+\s+(?:class|walk|club|lessons?))\b", re.IGNORECASE),
}
QUESTION_ATTRIBUTES: dict[str, re.Pattern] = {
    **ATTRIBUTES,
    "residence": re.compile(r"\b(?:address|live[sd]?|living|home|moved|move|house|reside\w*)\b",
                            re.IGNORECASE),
    "job": re.compile(r"\b(?:job|work\w*|employ\w*|living|occupation|profession|career)\b",
                      re.IGNORECASE),
    "hobby": re.compile(r"\b(?:hobby|hobbies|pastime|free\s+time|for\s+fun|interested\s+in|"
                        r"would\s+\w+(?:\s+\w+)?\s+(?:enjoy|like|appreciate|value))\b",
                        re.IGNORECASE),
}
ANY_ATTRIBUTE = re.compile("|".join(f"(?:{p.pattern})" for p in ATTRIBUTES.values()),
                           re.IGNORECASE)  # one search first: most turns claim nothing
# words one of which every match of a pattern contains (lower case): an ASCII text holding
# none of them cannot match, so the pattern is not run (most turns hold none)
_RELATIVE_WORDS = ("yesterday", "today", "tonight", "this", "last", "ago")
_ATTRIBUTE_WORDS = (
    "address", "move", "relocat", "live", "living", "new", "settled", "find", "home", "work",
    "job", "employ", "hired", "position", "promot", "career", "friend", "partner", "wife",
    "husband", "married", "dating", "engaged", "fianc", "phone", "mobile", "cell", "mail",
    "hobb", "thing", "picked", "took", "taken", "love", "enjoy", "favo", "free", "every",
    "weekend", "class", "walk", "club", "lesson")


@functools.lru_cache(maxsize=16)
def _words_pattern(words: tuple[str, ...]) -> re.Pattern:
    """One pattern finding any of ``words`` as a substring (what ``any(w in low ...)`` asks,
    in one pass)."""
    return re.compile("|".join(re.escape(w) for w in words))


def _may_match(text: str, words: tuple[str, ...]) -> bool:
    """False only when ``text`` is ASCII and holds none of ``words`` in any case."""
    if not text.isascii():
        return True
    return _words_pattern(words).search(text.lower()) is not None


# what every DESCRIPTOR match holds (lower case): a text holding none has no descriptor
_OWNER_WORDS = ("my", "our", "his", "her", "their")


# what a batch's texts are searched for at once (:func:`batch_flags`), as bits
PRONOUNS, OWNERS, RELATIVES, ATTRIBUTE_WORDS = 1, 2, 4, 8


# PRONOUN on lower-cased ASCII text, spelled as a prefix tree whose branches open with a
# letter (h, s, t) and check, after the letter, the word boundary before it: the regex engine then
# skips to those letters instead of trying every position (the same matches)
_PRONOUN_LOWER = re.compile(
    r"(?:h(?<=\bh)(?:e(?:rs?)?|i[ms])|s(?<=\bs)he|t(?<=\bt)he(?:[ym]|irs?))\b")


def batch_flags(texts: Sequence[str]) -> list[int]:
    """Per text, which of the rules' first tests it may pass: a bit is clear only when the
    text holds no match of ``PRONOUN`` (``PRONOUNS``), none of the owner words (``OWNERS``),
    or is ASCII and holds none of the relative-time words (``RELATIVES``) or none of the
    attribute words (``ATTRIBUTE_WORDS``), in any case. A turn's body is a part of its text,
    so what the text lacks its body lacks. The texts are lower-cased and joined, and each test
    is one pass over them (substrings by ``str.find``); a non-ASCII text passes ``PRONOUNS``
    too (case-insensitive matching reaches beyond ASCII there)."""
    n = len(texts)
    lows = [t.lower() for t in texts]
    low = _SEP.join(lows)
    ends = np.cumsum(np.fromiter(map(len, lows), np.int64, count=n) + 1)
    stops = [*ends.tolist(), len(low) + 1]  # where each text's successor starts
    flags = np.zeros(n, np.int64)

    def mark(at: list[int], bit: int) -> None:
        if at:
            flags[np.searchsorted(ends, np.asarray(at, np.int64), side="right")] |= bit

    mark([m.start() for m in _PRONOUN_LOWER.finditer(low)], PRONOUNS)
    for words, bit in ((_OWNER_WORDS, OWNERS), (_RELATIVE_WORDS, RELATIVES),
                       (_ATTRIBUTE_WORDS, ATTRIBUTE_WORDS)):
        at = []
        for w in words:
            i = low.find(w)
            while i >= 0:
                at.append(i)
                i = low.find(w, stops[bisect_right(stops, i)])  # from the next text on
        mark(at, bit)
    other = [i for i, t in enumerate(texts) if not t.isascii()]
    if other:
        flags[other] |= PRONOUNS | RELATIVES | ATTRIBUTE_WORDS
    return flags.tolist()


BEFORE = re.compile(r"\b(?:before|previous(?:ly)?|used\s+to|former(?:ly)?|old|earlier|"
                    r"originally|prior|first)\b", re.IGNORECASE)


@dataclass
class Annotation:
    """What the discourse rules read off one trace."""

    speaker: str = ""
    refs: list[str] = field(default_factory=list)  # entities pronouns/possessives point to
    expansion: str = ""  # words added to the trace's lexical document
    dates: list[str] = field(default_factory=list)  # ISO dates of relative expressions
    claims: list[tuple[str, str]] = field(default_factory=list)  # (subject key, attribute)


_HONORIFIC = re.compile(r"^(?:mr|mrs|ms|dr|miss|prof)\.?\s+", re.IGNORECASE)


@functools.lru_cache(maxsize=1 << 16)
def key(name: str) -> str:
    """A comparable form of a name: case, spaces and a title ("Mr. Tanaka") do not matter."""
    return "".join(_HONORIFIC.sub("", name.strip()).lower().split())


def speaker_of(text: str) -> str:
    m = SPEAKER.match(text)
    return m.group("name") if m else ""


def resolve_dates(text: str, when: float) -> list[str]:
    """ISO dates (``YYYY-MM-DD``, or ``YYYY-MM`` / ``YYYY`` for months and years) of the
    relative time expressions of ``text``, by the trace time ``when`` (epoch seconds)."""
    if when != when or not _may_match(text, _RELATIVE_WORDS) or not RELATIVE.search(text):
        return []
    try:
        day = dt.datetime.fromtimestamp(when, tz=dt.UTC).date()
    except (OverflowError, OSError, ValueError):
        return []
    out = []
    for m in RELATIVE.finditer(text):
        e = " ".join(m.group("expr").lower().split())
        if e in ("today", "tonight", "this morning", "this afternoon", "this evening"):
            out.append(day.isoformat())
        elif e in ("yesterday", "last night"):
            out.append((day - dt.timedelta(days=1)).isoformat())
        elif e == "the day before yesterday":
            out.append((day - dt.timedelta(days=2)).isoformat())
        elif e == "last weekend":
            sat = day - dt.timedelta(days=(day.weekday() - 5) % 7 or 7)
            out.append(sat.isoformat())
        elif e == "last week":
            out.append((day - dt.timedelta(days=7)).isoformat())
        elif e == "last month":
            y, mth = (day.year, day.month - 1) if day.month > 1 else (day.year - 1, 12)
            out.append(f"{y:04d}-{mth:02d}")
        elif e == "last year":
            out.append(f"{day.year - 1:04d}")
        elif e.startswith("last "):
            wd = _WEEKDAYS.index(e.split()[1])
            out.append((day - dt.timedelta(days=(day.weekday() - wd) % 7 or 7)).isoformat())
        else:
            num, unit, _ = e.split()
            n = int(num) if num.isdigit() else _NUM[num]
            unit = unit.rstrip("s")
            if unit == "day":
                out.append((day - dt.timedelta(days=n)).isoformat())
            elif unit == "week":
                out.append((day - dt.timedelta(days=7 * n)).isoformat())
            elif unit == "month":
                total = day.year * 12 + day.month - 1 - n
                out.append(f"{total // 12:04d}-{total % 12 + 1:02d}")
            else:
                out.append(f"{day.year - n:04d}")
    return out


def date_words(iso: str) -> str:
    """``2023-05-07`` -> ``"7 May 2023"`` (what a question may say)."""
    parts = [int(p) for p in iso.split("-")]
    if len(parts) == 3:
        d = dt.date(*parts)
        return f"{d.day} {d.strftime('%B')} {d.year}"
    if len(parts) == 2:
        return f"{dt.date(parts[0], parts[1], 1).strftime('%B')} {parts[0]}"
    return str(parts[0])


class Discourse:
    """Write-time discourse state of every session (see the module docstring)."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self._recent: dict[str, deque] = {}  # session -> (turn, [names]) of recent traces
        self._speakers: dict[str, set[str]] = {}
        self._desc: dict[str, tuple[str, str]] = {}  # name key -> (noun, owner name)

    def annotate(self, text: str, session: str, turn: int, when: float,
                 names: list[str]) -> Annotation:
        """Annotate one trace (``names``: the entity surfaces tagged in it) and remember it."""
        return self.annotate_many([text], [session], [turn], [when], [names])[0]

    def annotate_many(self, texts: Sequence[str], sessions: Sequence[str],
                      turns: Sequence[int], whens: Sequence[float],
                      names: Sequence[list[str]]) -> list[Annotation]:
        """:meth:`annotate` of each trace in order. The batch's texts are searched once for
        what most turns lack (a pronoun, an owner word, a relative-time word, an attribute
        word: :func:`batch_flags`); the rules that need one run only on the turns that have
        it, the same rules on the same text."""
        flags = batch_flags(texts)
        return [self._annotate(t, s, u, w, n, f) for t, s, u, w, n, f
                in zip(texts, sessions, turns, whens, names, flags, strict=True)]

    def _annotate(self, text: str, session: str, turn: int, when: float, names: list[str],
                  flags: int) -> Annotation:
        said = SPEAKER.match(text) if ":" in text else None  # (a speaker ends with ":")
        ann = Annotation(speaker=said.group("name") if said else "")
        speakers = self._speakers.get(session)
        if speakers is None:
            speakers = self._speakers[session] = set()
        if ann.speaker:
            speakers.add(key(ann.speaker))
        body = text[said.end():] if ann.speaker else text
        recent = self._recent.get(session)
        if recent is None:
            recent = self._recent[session] = deque(maxlen=self.window)
        while recent and turn - recent[0][0] > self.window:
            recent.popleft()
        own = [n for n in names if key(n) not in speakers
               and (" " in n.strip() or not _sentence_initial(body, n))]  # (several words)
        referent = ""
        if flags & PRONOUNS and PRONOUN.search(body):
            for _, prior in reversed(recent):
                cands = [n for n in prior if key(n) not in speakers]
                if cands:
                    referent = cands[-1]
                    break
        if referent:
            ann.refs.append(referent)
        owned = (flags & OWNERS) and _words_pattern(_OWNER_WORDS).search(body.lower()) is not None
        for m in DESCRIPTOR.finditer(body) if owned else ():
            owner = m.group("owner").lower()
            owner_name = (ann.speaker if owner in ("my", "our") else referent)
            name = m.group("name")
            if owner_name and key(name) != key(owner_name) and key(name) not in speakers:
                self._desc[key(name)] = (m.group("noun"), owner_name)  # the latest wins
        words: list[str] = []
        for n in dict.fromkeys([*ann.refs, *own]) if ann.refs or self._desc else ():
            if n in ann.refs or key(n) in self._desc:
                words.extend(self.chain(n, include_self=n in ann.refs))
        ann.expansion = " ".join(words)
        ann.dates = resolve_dates(body, when) if flags & RELATIVES else []
        if ann.dates:
            ann.expansion = " ".join([ann.expansion, *(date_words(d) for d in ann.dates)]).strip()
        if (flags & ATTRIBUTE_WORDS and not body.rstrip().endswith("?")
                and _may_match(body, _ATTRIBUTE_WORDS) and ANY_ATTRIBUTE.search(body)):
            subject = ann.speaker if FIRST_PERSON.search(body) else (
                (own or ann.refs or [""])[0])
            if subject:
                ann.claims = [(key(subject), a) for a, pat in ATTRIBUTES.items()
                              if pat.search(body)]
        recent.append((turn, [*ann.refs, *own]))  # its own names last: the likeliest next
        return ann

    def state(self) -> dict:
        """The state to continue annotating from (JSON-ready), for a memory snapshot."""
        return {"window": self.window,
                "recent": {s: [[t, list(ns)] for t, ns in q] for s, q in self._recent.items()},
                "speakers": {s: sorted(v) for s, v in self._speakers.items()},
                "desc": {k: list(v) for k, v in self._desc.items()}}

    @classmethod
    def from_state(cls, state: dict) -> Discourse:
        d = cls(int(state["window"]))
        d._recent = {s: deque(((int(t), list(ns)) for t, ns in q), maxlen=d.window)
                     for s, q in state["recent"].items()}
        d._speakers = {s: set(v) for s, v in state["speakers"].items()}
        d._desc = {k: (str(v[0]), str(v[1])) for k, v in state["desc"].items()}
        return d

    def chain(self, name: str, include_self: bool = True) -> list[str]:
        """``name`` and its descriptor chain: "Tanaka teacher Leo son Mira"."""
        out = [name] if include_self else []
        seen = {key(name)}
        k = key(name)
        for _ in range(CHAIN):
            if k not in self._desc:
                break
            noun, owner = self._desc[k]
            out.append(noun)
            if key(owner) in seen:
                break
            out.append(owner)
            seen.add(key(owner))
            k = key(owner)
        return out


def _sentence_initial(body: str, name: str) -> bool:
    """A one-word name that only opens a sentence ("Tell me more", "Guess what") is too
    likely a capitalized common word to be a referent."""
    if " " in name.strip():
        return False
    at = body.find(name)
    while at >= 0:
        before = body[:at].rstrip()
        if before and before[-1] not in ".!?:;\"'(":
            return False
        at = body.find(name, at + len(name))
    return True


def question_attributes(question: str) -> list[str]:
    """The attributes a question asks about."""
    return [a for a, pat in QUESTION_ATTRIBUTES.items() if pat.search(question)]


def supersede(ids: np.ndarray, scores: np.ndarray, claims: dict[int, list[tuple[str, str]]],
              times: np.ndarray, attrs: list[str], subjects: set[str],
              before: bool) -> np.ndarray:
    """Scores where, among candidates claiming the same (subject, attribute) the question asks
    about, the newest claim ranks first (``before``: the older ones rank first instead); the
    others keep their order among themselves, just below it. ``ids``/``scores`` aligned."""
    if not attrs or not claims:
        return scores
    groups: dict[tuple[str, str], list[int]] = {}
    for pos, tid in enumerate(ids.tolist()):
        for c in claims.get(tid, ()):
            if c[1] in attrs and (not subjects or c[0] in subjects):
                groups.setdefault(c, []).append(pos)
    out = scores.copy()
    for members in groups.values():
        if len(members) < 2:
            continue
        m = np.asarray(members)
        t = np.nan_to_num(times[ids[m]], nan=-np.inf)
        top = float(out[m].max())
        newest = m[int(np.argmax(t))]
        if before:  # the older claims are what is asked: each above the newest
            others = m[m != newest]
            out[others] = top + 1e-6 * (1 + np.argsort(np.argsort(out[others])))
        else:
            out[newest] = top + 1e-6
    return out
