"""Cheap entity types (PERSON, PLACE, ORG, WORK, DATE) from name patterns and title cues.

No model: a name that looks like a date is a DATE; an entity with a page (a passage it titles)
is typed by the head noun of the page's defining sentence ("X (born 1984) is a novelist" ->
PERSON, "X is a ferry port" -> PLACE, "X is a folk band" -> ORG, "X is a 2016 drama film" ->
WORK); otherwise by words of the name itself ("... Ltd.", "... University", "River ...").
Anything else stays untyped (""). Vectorized over all entities with pandas string methods.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

TYPES = ("PERSON", "PLACE", "ORG", "WORK", "DATE")
_NOUNS = {
    "PERSON": r"singer|novelist|writer|author|poet|director|actor|actress|chemist|engineer|"
              r"architect|rower|cyclist|painter|inventor|fiddler|accordionist|musician|"
              r"composer|politician|player|footballer|scientist|physicist|economist|lawyer|"
              r"journalist|businessman|businesswoman|philosopher|historian|king|queen|"
              r"priest|bishop|artist|photographer|producer|dancer|athlete|coach|teacher|"
              r"professor|friar|monk|saint|general|officer|essayist|designer|guitarist|"
              r"drummer|singer-songwriter|rapper|comedian|model|mathematician",
    "PLACE": r"town|city|village|port|river|island|islands|islets|lake|hill|hills|region|"
             r"county|country|state|province|mountain|valley|district|bay|coast|peninsula|"
             r"lighthouse|bridge|observatory|church|cathedral|station|airport|harbour|harbor|"
             r"park|street|square|building|castle|suburb|municipality|commune|capital|fells",
    "ORG": r"company|band|club|university|society|cooperative|co-operative|label|firm|group|"
           r"school|polytechnic|college|team|party|duo|trio|orchestra|choir|manufacturer|"
           r"maker|shipyard|shipwrights|organisation|organization|association|agency|"
           r"institute|foundation|corporation|airline|publisher|newspaper|brand|league",
    "WORK": r"film|novel|album|song|book|play|series|opera|painting|single|poem|game|"
            r"documentary|musical|sculpture|symphony|magazine|ep|show|sitcom|drama|comedy",
}
_DEFINING = re.compile(
    r"^[^.]*?\b(?:is|was|are|were)\s+(?:an?|the)\s+([^.,;:]*)", re.IGNORECASE)
_NAME_CUES = [
    ("ORG", r"\b(?:Ltd|Inc|Co|Corp|plc|GmbH|University|Polytechnic|Records|Club|Society|"
            r"Company|Works|Cooperative|Band|Orchestra|Choir|Shipwrights|Lampworks|Optics|"
            r"College|School|Institute|Association|Party|FC)\b\.?$"),
    ("PLACE", r"^(?:River|Lake|Mount|Mt\.|Cape|Port|Fort|Isle)\s|\s(?:River|Lake|Islands?|"
              r"Islets|Hill|Hills|Bay|Point|Fells|Harbour|Valley|Lighthouse|Observatory|"
              r"Bridge|Street|Square|County|City)$"),
]
_MONTHS = (r"January|February|March|April|May|June|July|August|September|October|November|"
           r"December")
_DATE = re.compile(rf"^(?:\d{{3,4}}s?|(?:\d{{1,2}}\s+)?(?:{_MONTHS})(?:\s+\d{{1,2}})?,?"
                   rf"(?:\s+\d{{3,4}})?|.*\bof\s+(?:{_MONTHS}))$")


def _head_type(phrases: pd.Series) -> np.ndarray:
    """The type of each defining phrase ("2016 drama film directed by ..."): the last of its
    first words (before "by", "of", "in", "from", "who", "that", "based", "founded",
    "formed", "born", "directed", "built", "set", "released") that is a known noun."""
    cut = phrases.fillna("").str.lower().str.split(
        r"\b(?:by|of|in|from|who|which|that|based|founded|formed|born|directed|built|set|"
        r"released|written|published|for|on|at|and|with)\b", n=1, regex=True).str[0]
    out = np.full(len(phrases), "", dtype=object)
    best = np.full(len(phrases), -1)
    for kind, nouns in _NOUNS.items():
        # greedy prefix: its length is where the last such noun starts
        before = cut.str.extract(rf"^(.*)\b(?:{nouns})\b", expand=False)
        at = np.where(before.notna(), before.str.len().fillna(-1), -1).astype(np.int64)
        better = at > best
        out[better] = kind
        best = np.where(better, at, best)
    return out


def entity_types(names: pd.Series, page_text: pd.Series) -> np.ndarray:
    """Per entity its type or "": ``names`` its canonical names, ``page_text`` the text of the
    passage it titles ("" when none), aligned with ``names``."""
    names = names.fillna("").astype(str)
    out = np.full(len(names), "", dtype=object)
    defining = page_text.fillna("").astype(str).str.extract(_DEFINING, expand=False)
    has_page = defining.notna().to_numpy()
    if has_page.any():
        out[has_page] = _head_type(defining[has_page])
    for kind, pattern in _NAME_CUES:
        cue = names.str.contains(pattern, regex=True).to_numpy()
        out[(out == "") & cue] = kind
    born = page_text.fillna("").astype(str).str.contains(r"\(born \d{3,4}|\(\d{3,4}\s*[–-]",
                                                         regex=True).to_numpy()
    out[(out == "") & born] = "PERSON"
    out[names.str.fullmatch(_DATE).to_numpy()] = "DATE"
    return out


def index_entity_types(index_dir) -> np.ndarray:
    """:func:`entity_types` of every entity of an index (``IndexDir``): its canonical name and
    the text of the passage its title names."""
    from gpurag.store import layout

    entities = index_dir.table(layout.ENTITIES, columns=["name"])
    page = np.full(len(entities), "", dtype=object)
    if index_dir.has(layout.MENTIONS):
        m = index_dir.table(layout.MENTIONS, columns=["entity", "chunk", "label"])
        m = m[m["label"] == "TITLE"].drop_duplicates("entity")
        texts = index_dir.table(layout.CHUNKS, columns=["text"])["text"].astype(str).to_numpy(
            dtype=object)
        page[m["entity"].to_numpy(np.int64)] = texts[m["chunk"].to_numpy(np.int64)]
    return entity_types(entities["name"], pd.Series(page))
