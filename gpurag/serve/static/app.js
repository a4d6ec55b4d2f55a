// The gpurag question page: POST /v1/query, show the ranked passages, their evidence chains
// (seed entity -> ... -> passage) and a small layered graph of that evidence.
"use strict";

const $ = (id) => document.getElementById(id);
const keyInput = $("key");
keyInput.value = sessionStorage.getItem("gpurag-key") || "";
keyInput.addEventListener("change", () => sessionStorage.setItem("gpurag-key", keyInput.value));

function headers() {
  const h = { "Content-Type": "application/json" };
  if (keyInput.value) h.Authorization = "Bearer " + keyInput.value;
  return h;
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;  // never innerHTML: corpus text is data
  return node;
}

// A passage as a preview shows it: Markdown marks and a first line repeating the title dropped.
function preview(title, text) {
  let t = text.replace(/^\s{0,3}#{1,6}\s+/gm, "").replace(/(\*\*|__)(\S.*?\S|\S)\1/g, "$2")
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1").replace(/`([^`\n]+)`/g, "$1").trim();
  const first = t.split("\n", 1)[0].trim();
  if (title && first.toLowerCase() === title.trim().toLowerCase()) t = t.slice(first.length).trim();
  return t.length > 700 ? t.slice(0, 700) + "…" : t;
}

function showPassages(result) {
  const list = $("passages");
  list.replaceChildren();
  const chains = {};
  for (const path of result.paths || []) (chains[path.chunk_id] ||= []).push(path);
  for (const p of result.passages) {
    const li = el("li", "passage");
    li.dataset.rank = p.rank;
    li.dataset.docId = p.doc_id;
    const head = el("div", "head");
    head.append(el("span", "rank", "#" + p.rank), el("span", "title", p.title || p.doc_id),
                el("span", "where", `${p.doc_id} [${p.char_start}:${p.char_end}]`),
                el("span", "score", "score " + p.score.toFixed(3)));
    li.append(head, el("p", "text", preview(p.title, p.text)));
    for (const path of (chains[p.chunk_id] || []).slice(0, 3)) {
      const steps = [];
      path.entities.forEach((name, i) => {
        steps.push(name);
        if (i < path.relations.length && path.relations[i]) steps.push(`(${path.relations[i]})`);
      });
      li.append(el("p", "evidence", "evidence: " + steps.join(" → ") + " → this passage"));
    }
    list.append(li);
  }
}

function showSeeds(result) {
  const seeds = result.seeds || [];
  $("seeds").hidden = seeds.length === 0;
  $("seedlist").textContent = seeds.slice(0, 12)
    .map((s) => `${s.name} (${s.via}, ${s.score.toFixed(2)})`).join(", ");
}

// Columns: question | seeds | entities along the paths | passages; edges along each chain.
function showGraph(result) {
  const svg = $("graph");
  svg.replaceChildren();
  const paths = (result.paths || []).slice(0, 12);
  $("graphbox").hidden = paths.length === 0;
  if (!paths.length) return;
  const cols = [["question"], [], [], []];
  const label = { question: "question" };
  const add = (col, id, text) => { if (!cols[col].includes(id)) cols[col].push(id); label[id] = text; };
  const edges = [];
  for (const path of paths) {
    let prev = "question";
    path.entities.forEach((name, i) => {
      const id = "e:" + name;
      add(i === 0 ? 1 : 2, id, name);
      edges.push([prev, id]);
      prev = id;
    });
    const pid = "p:" + path.chunk_id;
    const passage = result.passages.find((p) => p.chunk_id === path.chunk_id);
    add(3, pid, passage ? `#${passage.rank} ${passage.title || passage.doc_id}` : path.chunk_id);
    edges.push([prev, pid]);
  }
  const rows = Math.max(...cols.map((c) => c.length));
  const width = 900, height = Math.max(120, rows * 28 + 20), colW = width / 4;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const pos = {};
  cols.forEach((col, c) => col.forEach((id, r) => {
    pos[id] = [c * colW + 10, ((r + 1) * height) / (col.length + 1)];
  }));
  const ns = "http://www.w3.org/2000/svg";
  for (const [a, b] of edges) {
    const line = document.createElementNS(ns, "line");
    const [x1, y1] = pos[a], [x2, y2] = pos[b];
    Object.entries({ x1: x1 + 6, y1, x2, y2, stroke: "#9fb3c8" })
      .forEach(([k, v]) => line.setAttribute(k, v));
    svg.append(line);
  }
  for (const [id, [x, y]] of Object.entries(pos)) {
    const dot = document.createElementNS(ns, "circle");
    Object.entries({ cx: x, cy: y, r: 5, fill: id.startsWith("p:") ? "#2a6f4e" : "#1d3557" })
      .forEach(([k, v]) => dot.setAttribute(k, v));
    const text = document.createElementNS(ns, "text");
    text.setAttribute("x", x + 9);
    text.setAttribute("y", y + 4);
    text.textContent = label[id].length > 34 ? label[id].slice(0, 33) + "…" : label[id];
    svg.append(dot, text);
  }
}

async function ask(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question) return;
  const body = { question, k: Number($("k").value) || 5 };
  if ($("mode").value) body.mode = $("mode").value;
  $("status").className = "muted";
  $("status").textContent = "asking…";
  $("go").disabled = true;
  try {
    const response = await fetch("/v1/query", { method: "POST", headers: headers(),
                                                body: JSON.stringify(body) });
    const data = await response.json().catch(() => ({}));
    if (response.status === 401) {
      $("keybox").open = true;
      throw new Error("this service needs an API key: enter it above");
    }
    if (!response.ok) {
      const detail = typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail);
      throw new Error(`${response.status}: ${detail || response.statusText}`);
    }
    const result = data.results[0];
    $("status").textContent = `${result.passages.length} passages, ${result.mode} mode, ` +
      `index version ${data.index_version}`;
    showSeeds(result);
    showGraph(result);
    showPassages(result);
  } catch (err) {
    $("status").className = "error";
    $("status").textContent = String(err.message || err);
  } finally {
    $("go").disabled = false;
  }
}

$("ask").addEventListener("submit", ask);
const fromUrl = new URLSearchParams(location.search).get("q");
if (fromUrl) { $("question").value = fromUrl; $("ask").requestSubmit(); }
