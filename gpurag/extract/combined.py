"""An extractor's output added on top of a rule-based extraction of the same chunks.

An LLM names fewer entities than a rule-based pass finds and leaves out relations (the bridge of
a two-hop question is often one it dropped), and it spells names unlike the page titles. Its
typed relations therefore go on top of the co-occurrence graph instead of replacing it: on
musique_train100 the imported GPT-3.5 triples alone gave 0.540 · 0.784 · 0.690 (R@2 · R@5 ·
all-gold@8), on top of the rule-based extraction 0.566 · 0.810 · 0.680 (docs/RECALL.md).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pandas as pd

from gpurag.extract.base import Extraction, Extractor


@dataclasses.dataclass
class OnTopOfBase:
    """``primary``'s mentions and relations plus ``base``'s, for each batch of chunks.

    Joined by :func:`on_top_of`, as the triples import joins its own base.
    """

    primary: Extractor
    base: Extractor

    @property
    def name(self) -> str:
        return f"{self.primary.name}+{self.base.name}"

    @property
    def batch_size(self) -> int:
        return int(getattr(self.primary, "batch_size", 512))

    per_chunk = False  # the base's output depends on its batch

    def extract(self, chunks: pd.DataFrame, offset: int = 0) -> Extraction:
        """Both extractions of ``chunks`` (rows are positions ``offset + i``), joined."""
        return on_top_of(self.primary.extract(chunks, offset=offset),
                         self.base.extract(chunks, offset=offset))


def on_top_of(top: Extraction, base: Extraction) -> Extraction:
    """``top``'s mentions and relations, then ``base``'s, of the same chunks; a mention both
    give is kept once. ``stats``: ``top``'s, the base's as ``base_*``; whatever else ``top``
    carries (an LLM's entity descriptions) is kept."""
    mentions = pd.concat([top.mentions, base.mentions], ignore_index=True)
    mentions = mentions.drop_duplicates(ignore_index=True)
    relations = pd.concat([top.relations, base.relations], ignore_index=True)
    stats = Counter(top.stats)
    stats.update({f"base_{k}": v for k, v in base.stats.items()})
    return dataclasses.replace(top, mentions=mentions, relations=relations, stats=stats)
