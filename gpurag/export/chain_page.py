"""The explain page: a result's evidence chains drawn left to right as a layered graph
(question -> question entities -> bridge entities -> passages), one self-contained HTML file
(inline SVG, CSS and a few lines of script; nothing is fetched, so it opens offline).

Each column is one layer: the question, the entities a chain starts at, the bridge entities by
their depth in the chains, then the passages in rank order. Boxes are sized to their labels and
stacked per column, so no two labels overlap. Edges are coloured by kind (see the legend); the
sentence (or triple) behind a link, its passage and char span show on hover, in the box under
the graph and as the element's tooltip. Gold passages, when given, are outlined.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from gpurag.export.writers import _atomic_file

CHAR_W = 7.6  # px per character of the 13px label font (generous, so labels fit their boxes)
BOX_H, LINE_H, PAD_X, GAP_Y, GAP_X, MARGIN = 26, 16, 10, 14, 70, 20
TOP = 44  # room above the boxes for links that skip a layer
LANE = 22
MAX_LABEL = 38
PER_PASSAGE = 1
EDGE_STYLE = {  # kind: (colour, dash, legend)
    "question": ("#9e9e9e", "4 3", "question names the entity"),
    "relation": ("#3f6fd8", "", "relation (its sentence or triple on hover)"),
    "same passage": ("#8e5bd0", "6 3", "named in the same passage (the walk's step)"),
    "page of": ("#2e9d5b", "", "the passage is the entity's page"),
    "mentioned in": ("#7cc49a", "3 3", "the passage mentions the entity"),
    "retrieved": ("#bdbdbd", "1 4", "found by similarity, no chain"),
}
NODE_STYLE = {  # kind: (fill, stroke, legend)
    "question": ("#fff4d6", "#f2b134", "question"),
    "seed": ("#fde3df", "#e0604f", "entity the question names"),
    "entity": ("#e3ecfd", "#5b8def", "bridge entity"),
    "passage": ("#e2f4ea", "#4caf7d", "passage (rank, document, title)"),
}
GOLD = "#d4a017"


def _short(text: str, n: int = MAX_LABEL) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _wrap(text: str, width: int = 30, lines: int = 4) -> list[str]:
    words, out, line = " ".join(text.split()).split(" "), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            out.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    out.append(line)
    if len(out) > lines:
        out = out[:lines]
        out[-1] = _short(out[-1] + " …", width)
    return [_short(x, width) for x in out]


def _edge_kind(relation: str) -> str:
    return relation if relation in ("same passage", "page of", "mentioned in") else "relation"


def layout(result: Any, gold: set[str] | None = None, per_passage: int = PER_PASSAGE
           ) -> dict[str, Any]:
    """Nodes (id, kind, label lines, column, x, y, w, h, hover) and edges (source, target,
    kind, label, hover) of ``result``'s page: its ``per_passage`` best chains per passage."""
    gold = gold or set()
    chains: list[Any] = []
    count: dict[int, int] = {}
    for c in result.chains:
        if count.get(c.rank, 0) < per_passage:
            count[c.rank] = count.get(c.rank, 0) + 1
            chains.append(c)
    nodes: dict[str, dict[str, Any]] = {}
    edges: dict[tuple[str, str, str], dict[str, Any]] = {}

    def node(nid: str, kind: str, lines: list[str], column: int, hover: str, **extra: Any
             ) -> None:
        if nid in nodes:
            nodes[nid]["column"] = min(nodes[nid]["column"], column)
            return
        nodes[nid] = {"id": nid, "kind": kind, "lines": lines, "column": column,
                      "hover": hover, "order": len(nodes), **extra}

    def edge(src: str, dst: str, kind: str, label: str, hover: str) -> None:
        edges.setdefault((src, dst, label), {"source": src, "target": dst, "kind": kind,
                                             "label": label, "hover": hover})

    node("question", "question", _wrap(result.question), 0, f"question: {result.question}")
    depth = max((len(c.entities) for c in chains), default=0)
    pcol = depth + 1
    for p in result.passages:
        text = " ".join(p.text.split())
        hover = (f"#{p.rank} {p.doc_id} [{p.char_start}:{p.char_end}] {p.title}\n"
                 f"score {p.score:.4f}\n\n{text[:600]}{'…' if len(text) > 600 else ''}")
        node(f"passage:{p.chunk_id}", "passage", [_short(f"#{p.rank} {p.doc_id} {p.title}")],
             pcol, hover, gold=p.doc_id in gold, rank=p.rank, doc_id=p.doc_id)
    seeds = {s.name: s for s in result.seeds}
    for c in chains:
        types = list(getattr(c, "types", [])) + [""] * len(c.entities)
        for i, name in enumerate(c.entities):
            kind = "seed" if i == 0 else "entity"
            s = seeds.get(name)
            how = f"matched by {s.via}, score {s.score:.3f}" if s is not None else ""
            label = _short(name, MAX_LABEL - 9) + (f" · {types[i]}" if types[i] else "")
            node(f"entity:{name}", kind, [label], i + 1,
                 f"{'question entity' if i == 0 else 'bridge entity'} {name}"
                 f"{f' ({types[i]})' if types[i] else ''}\n{how}".strip())
        edge("question", f"entity:{c.entities[0]}", "question", "names",
             f"the question names {c.entities[0]}")
        for step in c.steps:
            src = f"entity:{step.source}"
            dst = (f"passage:{c.chunk_id}" if step.target_kind == "passage"
                   else f"entity:{step.target}")
            where = f"#{step.rank} " if step.rank is not None else ""
            hover = (f"{step.source} —{step.triple or step.relation}→ {step.target}\n"
                     f"\"{' '.join(step.text.split())}\"\n"
                     f"{where}{step.doc_id} [{step.char_start}:{step.char_end}]")
            edge(src, dst, _edge_kind(step.relation), step.triple or step.relation, hover)
    reached = {e["target"] for e in edges.values()}
    for p in result.passages:
        nid = f"passage:{p.chunk_id}"
        if nid not in reached:
            edge("question", nid, "retrieved", "retrieved", f"#{p.rank} found by similarity")
    # columns: boxes sized to their labels, stacked; passages in rank order
    columns: dict[int, list[dict[str, Any]]] = {}
    for n in nodes.values():
        if n["kind"] == "passage":
            n["column"] = pcol
        columns.setdefault(n["column"], []).append(n)
    x = MARGIN
    height = 0.0
    for col in sorted(columns):
        members = sorted(columns[col], key=lambda n: (n.get("rank", 0), n["order"]))
        width = max(max(len(line) for line in n["lines"]) * CHAR_W + 2 * PAD_X
                    for n in members)
        y = TOP
        for n in members:
            n["w"] = width
            n["h"] = BOX_H + LINE_H * (len(n["lines"]) - 1)
            n["x"], n["y"] = x, y
            y += n["h"] + GAP_Y
        height = max(height, y)
        x += width + GAP_X
    return {"nodes": list(nodes.values()), "edges": list(edges.values()),
            "columns": sorted(columns), "width": x - GAP_X + MARGIN,
            "height": height + MARGIN}


def _svg(graph: dict[str, Any]) -> str:
    e = html.escape
    nodes = {n["id"]: n for n in graph["nodes"]}
    parts = []
    for kind, (colour, _, _) in EDGE_STYLE.items():
        parts.append(f'<marker id="arrow-{kind.replace(" ", "-")}" viewBox="0 0 10 10" '
                     f'refX="10" refY="5" markerWidth="7" markerHeight="7" '
                     f'orient="auto-start-reverse">'
                     f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>')
    out = [f'<svg id="chains" xmlns="http://www.w3.org/2000/svg" width="{graph["width"]:.0f}" '
           f'height="{graph["height"]:.0f}" viewBox="0 0 {graph["width"]:.0f} '
           f'{graph["height"]:.0f}"><defs>{"".join(parts)}</defs>']
    for i, ed in enumerate(graph["edges"]):
        a, b = nodes[ed["source"]], nodes[ed["target"]]
        colour, dash, _ = EDGE_STYLE[ed["kind"]]
        dash_attr = f'stroke-dasharray="{dash}" ' if dash else ""
        x1, y1 = a["x"] + a["w"], a["y"] + a["h"] / 2
        x2, y2 = b["x"], b["y"] + b["h"] / 2
        between = [c for c in graph["columns"] if a["column"] < c < b["column"]]
        if between and x2 > x1:  # skips a layer: over its boxes, in the lane at the top
            lane = LANE - 3 * (i % 4)
            d = (f"M{x1:.1f},{y1:.1f} C{x1 + 30:.1f},{y1:.1f} {x1 + 10:.1f},{lane:.1f} "
                 f"{x1 + 40:.1f},{lane:.1f} L{x2 - 40:.1f},{lane:.1f} C{x2 - 10:.1f},"
                 f"{lane:.1f} {x2 - 30:.1f},{y2:.1f} {x2:.1f},{y2:.1f}")
        elif x2 <= x1:  # a link back to an earlier column: around the boxes' bottom
            x1, x2 = a["x"] + a["w"] / 2, b["x"] + b["w"] / 2
            y1, y2 = a["y"] + a["h"], b["y"] + b["h"]
            d = (f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + 40:.1f} {x2:.1f},{y2 + 40:.1f} "
                 f"{x2:.1f},{y2:.1f}")
        else:
            mid = (x1 + x2) / 2
            d = f"M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
        out.append(f'<path class="edge" id="edge-{i}" data-kind="{e(ed["kind"])}" d="{d}" '
                   f'fill="none" stroke="{colour}" stroke-width="1.8" '
                   f'{dash_attr}'
                   f'marker-end="url(#arrow-{ed["kind"].replace(" ", "-")})" '
                   f'data-hover="{e(ed["hover"])}"><title>{e(ed["hover"])}</title></path>')
    for n in graph["nodes"]:
        fill, stroke, _ = NODE_STYLE[n["kind"]]
        width = 1.5
        if n.get("gold"):
            stroke, width = GOLD, 4
        out.append(f'<g class="node" data-id="{e(n["id"])}" data-kind="{n["kind"]}" '
                   f'data-gold="{str(bool(n.get("gold"))).lower()}" data-hover="{e(n["hover"])}">'
                   f'<title>{e(n["hover"])}</title>'
                   f'<rect x="{n["x"]:.1f}" y="{n["y"]:.1f}" width="{n["w"]:.1f}" '
                   f'height="{n["h"]:.1f}" rx="6" fill="{fill}" stroke="{stroke}" '
                   f'stroke-width="{width}"/>')
        for j, line in enumerate(n["lines"]):
            out.append(f'<text class="label" x="{n["x"] + PAD_X:.1f}" '
                       f'y="{n["y"] + 17 + j * LINE_H:.1f}">{e(line)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _legend(gold: bool) -> str:
    rows = []
    for fill, stroke, text in NODE_STYLE.values():
        rows.append(f'<li><span class="sw" style="background:{fill};border-color:{stroke}">'
                    f'</span>{html.escape(text)}</li>')
    if gold:
        rows.append(f'<li><span class="sw" style="border:3px solid {GOLD}"></span>'
                    'gold passage</li>')
    for colour, dash, text in EDGE_STYLE.values():
        style = "dashed" if dash else "solid"
        rows.append(f'<li><span class="ln" style="border-top:2px {style} {colour}"></span>'
                    f'{html.escape(text)}</li>')
    return '<ul id="legend">' + "".join(rows) + "</ul>"


_STYLE = """body{font:13px system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:16px;
color:#222}h1{font-size:16px;margin:0 0 8px}#legend{list-style:none;padding:0;margin:8px 0;
display:flex;flex-wrap:wrap;gap:6px 18px}#legend li{display:flex;align-items:center;gap:6px}
.sw{display:inline-block;width:18px;height:12px;border:1.5px solid;border-radius:3px}
.ln{display:inline-block;width:26px}#graph{overflow:auto;border:1px solid #e0e0e0}
#chains{max-width:100%;height:auto}
text.label{font:13px system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;fill:#222;
pointer-events:none}.edge{cursor:help}.edge:hover{stroke-width:4}.node{cursor:help}
#hover{white-space:pre-wrap;background:#fafafa;border:1px solid #e0e0e0;padding:8px;
margin-top:8px;min-height:48px}"""

_SCRIPT = """document.querySelectorAll('[data-hover]').forEach(function (el) {
  el.addEventListener('mouseenter', function () {
    document.getElementById('hover').textContent = el.getAttribute('data-hover'); });
});"""


def render_page(result: Any, gold: set[str] | None = None, title: str = "") -> str:
    """The explain page of ``result`` (a ``QueryResult`` with ``chains``) as HTML."""
    graph = layout(result, gold)
    data = json.dumps({"nodes": [{k: n[k] for k in ("id", "kind", "column")}
                                 for n in graph["nodes"]],
                       "edges": [{k: ed[k] for k in ("source", "target", "kind")}
                                 for ed in graph["edges"]]}).replace("<", "\\u003c")
    heading = html.escape(title or result.question)
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>{heading}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{heading}</h1>{_legend(bool(gold))}<div id=\"graph\">{_svg(graph)}</div>"
            "<div id=\"hover\">Hover a link for the sentence that states it, a box for its "
            "details.</div>"
            f"<script type=\"application/json\" id=\"graph-data\">{data}</script>"
            f"<script>{_SCRIPT}</script></body></html>")


def write_page(result: Any, out: str | Path, gold: set[str] | None = None,
               title: str = "") -> Path:
    """Write :func:`render_page` to ``out`` atomically; returns the path."""
    out = Path(out)
    page = render_page(result, gold, title)
    _atomic_file(out, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    return out
