"""Cheap entity types from name patterns and title pages, shown in evidence chains."""

from __future__ import annotations

import pandas as pd

from gpurag.extract.entity_types import entity_types


def test_types_from_pages_and_names():
    names = pd.Series(["Zoë Ødegård", "Tarnwick", "The Salt Orchard", "Saltwater Lanterns",
                       "Kestrel Dynamics Ltd.", "River Quellan", "1888", "12 October 1492",
                       "Anselm Greyhaven", "Perrin"])
    pages = pd.Series([
        "Zoë Ødegård (born 1984) grew up in Tarnwick. She is a singer.",
        "Tarnwick is a ferry port at the mouth of the River Quellan.",
        "The Salt Orchard is a folk band formed in Tarnwick in 2005 by Z. Ødegård.",
        "Saltwater Lanterns is a 2016 drama film directed by Runa Leclerc-Haug.",
        "", "", "", "",
        "Anselm Greyhaven (1910–1988) grew up by the sea.",  # no defining noun: dates
        ""])
    assert list(entity_types(names, pages)) == [
        "PERSON", "PLACE", "ORG", "WORK", "ORG", "PLACE", "DATE", "DATE", "PERSON", ""]


def test_chains_carry_the_types(graph_index):
    r = graph_index.query("Where did the lead singer of the band behind the album Lowtide "
                          "Hymnal study?", k=5)
    typed = {e: t for c in r.chains for e, t in zip(c.entities, c.types, strict=True)}
    assert typed["Lowtide Hymnal"] == "WORK" and typed["Zoë Ødegård"] == "PERSON"
    assert typed.get("Salt Orchard", "ORG") == "ORG"
    assert all(len(c.types) == len(c.entities) for c in r.chains)
    from gpurag.export.chain_page import render_page

    assert "Zoë Ødegård · PERSON" in render_page(r)


def test_exports_carry_the_types(graph_index):
    from gpurag.export.frames import graph_frames

    nodes = graph_frames(graph_index.dir).nodes
    typed = dict(zip(nodes["name"], nodes["entity_type"], strict=True))
    assert typed["Zoë Ødegård"] == "PERSON" and typed["Tarnwick"] == "PLACE"
    assert typed["Glimmerfold Records"] == "ORG" and typed["Lowtide Hymnal"] == "WORK"
