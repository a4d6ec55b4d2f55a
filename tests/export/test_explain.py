"""`evidence_subgraph(result)` and `gpurag query --explain`: the evidence graph, rendered into a
self-contained page and checked in a real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpurag.cli import main as gpurag_main
from gpurag.export.evidence import QUESTION_ID, evidence_subgraph, passage_node_id
from gpurag.export.html import write_explain_html
from gpurag.query.results import Passage, QueryResult, SeedEntity

QUESTION = "Where is the headquarters of the company founded by the inventor of the Pellucid cell?"
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium installed")

PROBE = """<script>(function probe(tries) {
  var c = document.querySelector('#mynetwork canvas'), painted = 0;
  if (c) { var d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    for (var i = 0; i < d.length; i += 4)
      if (d[i + 3] > 0 && !(d[i] > 240 && d[i + 1] > 240 && d[i + 2] > 240)) painted++; }
  var placed = (typeof network === 'undefined') ? 0 : Object.keys(network.getPositions()).length;
  if ((painted < 100 || placed === 0) && tries > 0) {
    setTimeout(function () { probe(tries - 1); }, 250); return; }
  document.body.setAttribute('data-probe', JSON.stringify({
    nodes: network.body.data.nodes.length, edges: network.body.data.edges.length,
    placed: placed, painted: painted}));
})(40);</script></body>"""


def render_in_browser(page: Path, tmp_path: Path) -> dict:
    """Open ``page`` (plus a probe script) in headless Chromium; what vis-network drew. The
    probe waits (in the page's virtual time) until the canvas is drawn; a browser that did not
    get that far on a loaded machine is given a second try."""
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE),
                     encoding="utf-8")
    for attempt in range(2):
        dom = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             "--virtual-time-budget=20000", f"--user-data-dir={tmp_path / f'chrome{attempt}'}",
             "--dump-dom", probe.as_uri()],
            capture_output=True, text=True, timeout=180).stdout
        found = re.search(r'data-probe="([^"]*)"', dom)
        if found:
            return json.loads(found.group(1).replace("&quot;", '"'))
    raise AssertionError("the page did not run its script (no probe in the DOM)")


@pytest.fixture(scope="module")
def result(graph_index) -> QueryResult:
    return graph_index.query(QUESTION, k=5)


def test_subgraph_links_question_seeds_paths_and_passages(result):
    sub = evidence_subgraph(result)
    nodes = {n["id"]: n for n in sub["nodes"]}
    assert nodes[QUESTION_ID]["label"] == QUESTION
    passages = [n for n in sub["nodes"] if n["kind"] == "passage"]
    assert [p["chunk_id"] for p in passages] == result.chunk_ids
    assert {s.name for s in result.seeds} <= {n["label"] for n in sub["nodes"]
                                              if n["kind"] in ("seed", "entity")}
    for edge in sub["edges"]:
        assert edge["source"] in nodes and edge["target"] in nodes
    # Every passage is reachable from the question, through entity paths or directly.
    adjacency: dict[str, set[str]] = {}
    for edge in sub["edges"]:
        adjacency.setdefault(edge["source"], set()).add(edge["target"])
    seen, frontier = {QUESTION_ID}, [QUESTION_ID]
    while frontier:
        nxt = [t for s in frontier for t in adjacency.get(s, ()) if t not in seen]
        seen.update(nxt)
        frontier = nxt
    assert {passage_node_id(c) for c in result.chunk_ids} <= seen
    path = next(p for p in result.paths if len(p.entities) >= 1)
    assert any(e["kind"] == "mentions" and e["target"] == passage_node_id(path.chunk_id)
               for e in sub["edges"])


@needs_browser
def test_subgraph_page_renders_every_node_offline(result, tmp_path):
    """The vis-network page of ``evidence_subgraph(result)`` (``--explain`` draws the chain page
    below)."""
    out = write_explain_html(evidence_subgraph(result), tmp_path / "evidence.html", title=QUESTION)
    page = out.read_text(encoding="utf-8")
    assert not re.search(r'(src|href)="https?://', page), "the page must open without a network"
    sub = evidence_subgraph(result)
    drawn = render_in_browser(out, tmp_path)
    assert drawn["nodes"] == len(sub["nodes"]) and drawn["edges"] == len(sub["edges"])
    assert drawn["placed"] == len(sub["nodes"])
    assert drawn["painted"] > 1000  # the canvas holds the drawn graph, not a blank page


@needs_browser
def test_hostile_passage_text_cannot_break_the_page(tmp_path):
    hostile = "</script><script>document.body.innerHTML='owned'</script><!-- x"
    fake = QueryResult(
        question=f"what about {hostile}?", mode="graph",
        passages=[Passage(1, "c1", "d1", "T <b>1</b>", hostile, 0, 10, 0.9),
                  Passage(2, "c2", "d2", "T2", "plain text", 0, 5, 0.5)],
        seeds=[SeedEntity(7, "Seed </script>", 0.8, "entity")])
    out = write_explain_html(evidence_subgraph(fake), tmp_path / "x.html", title=fake.question)
    drawn = render_in_browser(out, tmp_path)
    assert drawn["nodes"] == 4 and drawn["painted"] > 100


# -- the layered chain page (gpurag/export/chain_page.py) ------------------------------------

BOXES = """<script>(function () {
  var labels = [].slice.call(document.querySelectorAll('text.label')).map(function (t) {
    var b = t.getBoundingClientRect(), r = t.parentNode.querySelector('rect')
      .getBoundingClientRect();
    return {text: t.textContent, x: b.left, y: b.top, w: b.width, h: b.height,
            inside: b.left >= r.left - 0.5 && b.right <= r.right + 0.5 &&
                    b.top >= r.top - 0.5 && b.bottom <= r.bottom + 0.5};
  });
  var nodes = [].slice.call(document.querySelectorAll('g.node')).map(function (g) {
    return {id: g.getAttribute('data-id'), kind: g.getAttribute('data-kind'),
            gold: g.getAttribute('data-gold') === 'true'}; });
  var edges = [].slice.call(document.querySelectorAll('path.edge')).map(function (p) {
    return {kind: p.getAttribute('data-kind'), hover: p.getAttribute('data-hover')}; });
  var legend = document.querySelectorAll('#legend li').length;
  document.body.setAttribute('data-probe', JSON.stringify(
    {labels: labels, nodes: nodes, edges: edges, legend: legend}));
})();</script></body>"""


def browser_boxes(page: Path, tmp_path: Path) -> dict:
    """Open ``page`` in headless Chromium: its labels' boxes, nodes, edges and legend rows."""
    probe = tmp_path / "boxes.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", BOXES),
                     encoding="utf-8")
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          f"--user-data-dir={tmp_path / 'chrome-boxes'}",
                          "--window-size=1400,900", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=180).stdout
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, "the page did not run its script"
    import html as html_lib

    return json.loads(html_lib.unescape(found.group(1)))


def _overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


@needs_browser
def test_chain_page_draws_the_bridge_chain_without_overlaps(graph_index, result, tmp_path):
    out = tmp_path / "chains.html"
    assert gpurag_main(["-q", "query", str(graph_index.path), QUESTION, "-k", "5",
                        "--explain", str(out), "--gold", "p01,p03"]) == 0
    page = out.read_text(encoding="utf-8")
    assert not re.search(r'(src|href)="https?://', page), "the page must open without a network"
    drawn = browser_boxes(out, tmp_path)
    ids = {n["id"] for n in drawn["nodes"]}
    # the bridge chain: question -> Pellucid cell -> Kestrel Dynamics -> p03 (rank 2)
    bridge = next(c for c in result.chains if c.doc_id == "p03" and c.bridge)
    assert {f"entity:{e}" for e in bridge.entities} <= ids
    assert {"question", *(f"passage:{c}" for c in result.chunk_ids)} <= ids
    assert {n["id"] for n in drawn["nodes"] if n["gold"]} == {
        f"passage:{p.chunk_id}" for p in result.passages if p.doc_id in ("p01", "p03")}
    # every link says what states it on hover; the sentence of the bridge step is there
    step = bridge.steps[0]
    assert any(" ".join(step.text.split()) in e["hover"] for e in drawn["edges"])
    assert {"page of", "question"} <= {e["kind"] for e in drawn["edges"]}
    assert drawn["legend"] >= 8
    labels = drawn["labels"]
    assert len(labels) >= len(ids) and all(b["w"] > 0 for b in labels)
    assert all(b["inside"] for b in labels), [b["text"] for b in labels if not b["inside"]]
    clashes = [(a["text"], b["text"]) for i, a in enumerate(labels) for b in labels[i + 1:]
               if _overlap(a, b)]
    assert not clashes
    # and a screenshot of it is a picture, not a blank page
    shot = tmp_path / "chains.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={tmp_path / 'chrome-shot'}", "--window-size=1200,440",
                    f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=180)
    Image = pytest.importorskip("PIL.Image")
    colours = Image.open(shot).convert("RGB").getcolors(1 << 24)
    assert len(colours) > 50  # colours of boxes, links and text


@needs_browser
def test_chain_page_of_thirty_nodes_keeps_labels_apart(graph_index, tmp_path):
    """A larger page (k=12: about thirty boxes) stays readable: no two labels overlap."""
    from gpurag.export.chain_page import write_page

    big = graph_index.query("Which institution employed the author of the novel adapted into "
                            "the film Saltwater Lanterns?", k=12)
    out = write_page(big, tmp_path / "big.html")
    drawn = browser_boxes(out, tmp_path)
    assert len(drawn["nodes"]) >= 15
    labels = drawn["labels"]
    assert not [(a["text"], b["text"]) for i, a in enumerate(labels) for b in labels[i + 1:]
                if _overlap(a, b)]
    assert all(b["inside"] for b in labels)


def test_chain_page_escapes_corpus_text(tmp_path):
    from gpurag.export.chain_page import render_page

    hostile = "</script><script>alert(1)</script><b>x"
    fake = QueryResult(question=f"what about {hostile}?", mode="graph",
                       passages=[Passage(1, "c1", "d1", hostile, hostile, 0, 10, 0.9)])
    page = render_page(fake)
    assert "<script>alert(1)" not in page and "<b>x" not in page
