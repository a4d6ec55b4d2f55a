"""Non-LLM entity extraction, kept as one import path: the regex extractor
(:mod:`gpurag.extract.fast`), the spaCy one (:mod:`gpurag.extract.spacy_ner`) and what they share
(:mod:`gpurag.extract.assembly`: titles, spans, sentence co-occurrence relations)."""

from gpurag.extract.assembly import (
    TITLE_LABEL,
    assemble_extraction,
    cooccurrence_relations,
    find_span,
)
from gpurag.extract.fast import ENTITY_PATTERN, SENTENCE_BREAK, STOP_WORDS, FastExtractor
from gpurag.extract.spacy_ner import DEFAULT_SPACY_MODEL, SpacyExtractor, load_spacy

__all__ = [
    "DEFAULT_SPACY_MODEL",
    "ENTITY_PATTERN",
    "SENTENCE_BREAK",
    "STOP_WORDS",
    "TITLE_LABEL",
    "FastExtractor",
    "SpacyExtractor",
    "assemble_extraction",
    "cooccurrence_relations",
    "find_span",
    "load_spacy",
]
