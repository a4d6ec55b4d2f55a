"""Render an evidence subgraph as one self-contained interactive HTML file (pyvis/vis-network,
JavaScript inlined: the file opens without a network)."""

from __future__ import annotations

import html as html_lib
import os
import re
from pathlib import Path
from typing import Any

from gpurag.errors import ConfigError
from gpurag.export.writers import _atomic_file

COLORS = {"question": "#f2b134", "seed": "#e0604f", "entity": "#5b8def", "passage": "#4caf7d"}
SHAPES = {"question": "star", "seed": "dot", "entity": "dot", "passage": "box"}
_TEXT_PREVIEW = 600


def _hover_text(node: dict[str, Any]) -> str:
    """Plain text shown on hover: provenance and (for passages) the passage text."""
    kind = node["kind"]
    if kind == "passage":
        text = " ".join(str(node["text"]).split())
        if len(text) > _TEXT_PREVIEW:
            text = text[:_TEXT_PREVIEW] + "…"
        return (f"rank {node['rank']}  score {node['score']:.4f}\n"
                f"doc {node['doc_id']}  chars [{node['char_start']}:{node['char_end']}]\n"
                f"chunk {node['chunk_id']}\n{node['title']}\n\n{text}")
    if kind == "seed":
        return f"seed entity {node['label']}\nmatched via {node['via']}, score {node['score']:.3f}"
    if kind == "question":
        return f"question: {node['label']}"
    return f"entity {node['label']}"


_REMOTE_ASSET = re.compile(
    r"<link[^>]*?href=\"https?://[^>]*?>|<script[^>]*?src=\"https?://[^>]*?>\s*</script>",
    re.DOTALL)


def _strip_remote_assets(html: str) -> str:
    """pyvis's page links Bootstrap from a CDN for optional widgets; the graph needs none of it,
    so the file is kept free of network references."""
    return _REMOTE_ASSET.sub("", html)


def render_html(subgraph: dict[str, list[dict[str, Any]]], title: str = "") -> str:
    """The HTML page for ``subgraph`` (see :func:`gpurag.export.evidence.evidence_subgraph`).

    Node data is embedded by pyvis as JSON with ``<`` escaped, so passage text cannot close the
    page's script; the heading is HTML-escaped here."""
    try:
        from pyvis.network import Network
    except ImportError as exc:
        raise ConfigError("--explain needs pyvis: pip install 'gpurag[viz]'") from exc
    net = Network(height="720px", width="100%", directed=True, cdn_resources="in_line")
    for node in subgraph["nodes"]:
        label = node["label"] if len(node["label"]) <= 60 else node["label"][:57] + "…"
        net.add_node(node["id"], label=label, title=_hover_text(node),
                     color=COLORS.get(node["kind"], "#999999"),
                     shape=SHAPES.get(node["kind"], "dot"),
                     size=28 if node["kind"] == "question" else 18)
    for edge in subgraph["edges"]:
        net.add_edge(edge["source"], edge["target"], title=edge["kind"], label=edge["kind"],
                     width=1 + 3 * float(edge.get("weight", 0.3)))
    net.toggle_physics(True)
    page = _strip_remote_assets(net.generate_html())
    if title:  # pyvis's own heading option prints the heading twice
        heading = f'<h3 style="font-family:sans-serif">{html_lib.escape(title)}</h3>'
        page = page.replace("<body>", "<body>\n" + heading, 1)
    return page


def write_explain_html(subgraph: dict[str, list[dict[str, Any]]], out: str | os.PathLike,
                       title: str = "") -> Path:
    """Write the evidence page to ``out`` (atomically) and return its path."""
    html = render_html(subgraph, title=title)
    path = Path(out)
    _atomic_file(path, lambda tmp: tmp.write_text(html, encoding="utf-8"))
    return path
