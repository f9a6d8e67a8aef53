// gpufleet dashboard: draws /api/fleet (shape in gpufleet/web/view.py). Every name from the
// cluster is written with textContent, never as HTML: pods, queues and labels come from tenants.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { doc: null, filters: { pool: "", model: "", queue: "", namespace: "" }, node: null,
                frame: -1, frames: 1, playing: null, tiles: null };
// What tests and bench/dashboard.py read: when the first view and the last update were drawn.
const probe = window.gpufleetDashboard = { renders: 0, firstViewMs: null, lastRenderMs: null, updateMs: null,
                                           version: null, frame: null, received: null };

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells, numeric) {
  const tr = document.createElement("tr");
  cells.forEach((c, i) => {
    const td = c instanceof Node ? wrap(c) : el("td", c);
    if (numeric && numeric.includes(i)) td.classList.add("n");
    tr.appendChild(td);
  });
  return tr;
}

function wrap(node) { const td = document.createElement("td"); td.appendChild(node); return td; }

function fmt(x) { return Number.isInteger(x) ? String(x) : x.toFixed(x < 10 ? 2 : 1).replace(/\.?0+$/, ""); }

function when(doc, t) {
  if (doc.simulated) {
    const h = Math.floor(t / 3600), m = Math.floor((t % 3600) / 60), s = Math.floor(t % 60);
    return `t = ${h}h ${String(m).padStart(2, "0")}m ${String(s).padStart(2, "0")}s (simulated)`;
  }
  return new Date(t * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

// ---- filters -------------------------------------------------------------------------------
function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  for (const k of Object.keys(state.filters)) state.filters[k] = params.get(k) || "";
  state.node = params.get("node") || null;
}

function writeHash() {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(state.filters)) if (v) params.set(k, v);
  if (state.node) params.set("node", state.node);
  const text = params.toString();
  history.replaceState(null, "", text ? "#" + text : location.pathname + location.search);
}

function fillSelect(select, values) {
  const want = state.filters[select.dataset.key];
  const have = Array.from(select.options).slice(1).map((o) => o.value);
  const sorted = [...values].sort();
  if (want && !sorted.includes(want)) sorted.push(want);
  if (have.join("\n") !== sorted.join("\n")) {
    select.length = 1;
    for (const v of sorted) select.appendChild(new Option(v, v));
  }
  select.value = want;
}

// ---- derived rows under the filters ---------------------------------------------------------
function nodeMatches(doc, n) {
  const f = state.filters;
  return (!f.pool || doc.pools[n[1]] === f.pool) && (!f.model || doc.models[n[2]] === f.model);
}

function podMatches(doc, i) {
  const f = state.filters, p = doc.pods[i];
  return (!f.namespace || doc.namespaces[p[1]] === f.namespace) && (!f.queue || doc.queueNames[p[2]] === f.queue);
}

function podFilter() { return state.filters.namespace || state.filters.queue; }

function summarise(doc) {
  const s = { nodes: 0, readyNodes: 0, gpus: 0, nonMig: 0, gpusAllocated: 0, gpusFree: 0, gpusUnhealthy: 0, migSlices: 0,
              migSlicesUsed: 0, running: 0, pending: 0 };
  const byPods = podFilter();
  const running = new Set();
  const groups = new Map();
  for (const n of doc.nodes) {
    if (!nodeMatches(doc, n)) continue;
    s.nodes++; s.readyNodes += n[3];
    const key = doc.pools[n[1]] + "\u0000" + doc.models[n[2]];
    let g = groups.get(key);
    if (!g) groups.set(key, g = { pool: doc.pools[n[1]], model: doc.models[n[2]], nodes: 0, gpus: 0, allocated: 0,
                                   free: 0, part: 0, sick: 0 });
    g.nodes++;
    for (const [used, healthy, holders, mig] of n[4]) {
      s.gpus++; g.gpus++;
      if (!healthy) { s.gpusUnhealthy++; g.sick++; }
      const mine = holders.filter((h) => !byPods || podMatches(doc, h));
      mine.forEach((h) => running.add(h));
      if (mig.length) {
        s.migSlices += mig.length;
        for (const [, h] of mig) if (h >= 0 && (!byPods || podMatches(doc, h))) { s.migSlicesUsed++; running.add(h); }
        continue;
      }
      s.nonMig++;
      const share = byPods ? (holders.length ? used * mine.length / holders.length : 0) : used;
      s.gpusAllocated += share / 1000; g.allocated += share / 1000;
      if (used === 0 && healthy && n[3]) { s.gpusFree++; g.free++; }
      if (used > 0 && used < 1000) g.part++;
    }
  }
  s.running = byPods ? running.size : countRunning(doc);
  s.pending = pendingRows(doc).length;
  return { s, groups: [...groups.values()].sort((a, b) => (a.pool + a.model).localeCompare(b.pool + b.model)) };
}

function countRunning(doc) {
  if (!state.filters.pool && !state.filters.model) return doc.summary.running;
  const seen = new Set();
  for (const n of doc.nodes) {
    if (!nodeMatches(doc, n)) continue;
    for (const [, , holders, mig] of n[4]) { holders.forEach((h) => seen.add(h)); mig.forEach(([, h]) => h >= 0 && seen.add(h)); }
  }
  return seen.size;
}

function pendingRows(doc) {
  const f = state.filters;
  return doc.pending.filter((p) => (!f.namespace || doc.namespaces[p[1]] === f.namespace)
                                && (!f.queue || doc.queueNames[p[2]] === f.queue));
}

// ---- drawing --------------------------------------------------------------------------------
function render() {
  const doc = state.doc;
  if (!doc) return;
  const started = performance.now();
  $("source").textContent = `${doc.source} · ${when(doc, doc.time)}`;
  fillSelect($("f-pool"), doc.pools);
  fillSelect($("f-model"), doc.models);
  fillSelect($("f-queue"), doc.queueNames);
  fillSelect($("f-namespace"), doc.namespaces);
  const { s, groups } = summarise(doc);
  $("sum-nodes").textContent = s.nodes; $("sum-ready").textContent = s.readyNodes;
  $("sum-gpus").textContent = s.gpus; $("sum-allocated").textContent = fmt(Math.round(s.gpusAllocated * 1000) / 1000);
  $("sum-allocated-pct").textContent = s.nonMig ? `(${Math.round(100 * s.gpusAllocated / s.nonMig)} %)` : "";
  $("sum-free").textContent = s.gpusFree; $("sum-unhealthy").textContent = s.gpusUnhealthy;
  $("sum-mig").textContent = s.migSlices; $("sum-mig-used").textContent = s.migSlicesUsed;
  $("sum-running").textContent = s.running; $("sum-pending").textContent = s.pending;
  const body = $("pools").tBodies[0];
  body.replaceChildren(...groups.map((g) => row([g.pool, g.model, g.nodes, g.gpus, fmt(Math.round(g.allocated * 1000) / 1000),
                                                 g.free, g.part, g.sick], [2, 3, 4, 5, 6, 7])));
  drawMap(doc);
  drawNode(doc);
  drawQueues(doc);
  drawPending(doc);
  drawEvents(doc);
  const names = $("node-names");
  if (names.childElementCount !== doc.nodes.length) {
    names.replaceChildren(...doc.nodes.map((n) => new Option(n[0])));
  }
  probe.renders++;
  probe.version = doc.version; probe.frame = doc.frame;
  probe.lastRenderMs = performance.now() - started;
  if (probe.firstViewMs === null) {
    probe.firstViewMs = performance.now();
    document.body.dataset.ready = "1";
  }
  document.body.dataset.renders = String(probe.renders);
}

const COLORS = {};
function color(name) {
  return COLORS[name] || (COLORS[name] = getComputedStyle(document.documentElement).getPropertyValue("--" + name).trim());
}

function drawMap(doc) {
  const canvas = $("map");
  const nodes = doc.nodes.filter((n) => nodeMatches(doc, n));
  const most = nodes.reduce((m, n) => Math.max(m, n[4].length), 1);
  const cell = nodes.length > 1500 ? 5 : nodes.length > 300 ? 7 : 11;
  const cols = Math.min(most, 4), rows = Math.ceil(most / cols);
  const tw = cols * cell + 4, th = rows * cell + 4;
  const width = Math.min(Math.max(canvas.parentElement.clientWidth - 4, 320), 1600);
  const perRow = Math.max(1, Math.floor(width / tw));
  const height = Math.max(th, Math.ceil(nodes.length / perRow) * th);
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio; canvas.height = height * ratio;
  canvas.style.width = width + "px"; canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const byPods = podFilter();
  state.tiles = { nodes, perRow, tw, th };
  nodes.forEach((n, k) => {
    const x0 = (k % perRow) * tw + 2, y0 = Math.floor(k / perRow) * th + 2;
    if (!n[3]) { ctx.fillStyle = color("down"); ctx.fillRect(x0 - 2, y0 - 2, tw - 1, th - 1); }
    if (n[0] === state.node) { ctx.strokeStyle = color("focus"); ctx.lineWidth = 2; ctx.strokeRect(x0 - 1, y0 - 1, tw - 3, th - 3); }
    n[4].forEach(([used, healthy, holders, mig], j) => {
      const x = x0 + (j % cols) * cell, y = y0 + Math.floor(j / cols) * cell, w = cell - 1;
      const dim = byPods && !holders.some((h) => podMatches(doc, h)) && !mig.some(([, h]) => h >= 0 && podMatches(doc, h));
      ctx.globalAlpha = dim ? 0.35 : 1;
      ctx.fillStyle = color("free"); ctx.fillRect(x, y, w, w);
      if (!healthy) { ctx.fillStyle = color("sick"); ctx.fillRect(x, y, w, w); }
      else if (mig.length) {
        const usedSlices = mig.filter(([, h]) => h >= 0).length;
        ctx.fillStyle = color("mig"); ctx.fillRect(x, y + w * (1 - usedSlices / mig.length), w, w * usedSlices / mig.length);
      } else if (used >= 1000) { ctx.fillStyle = color("full"); ctx.fillRect(x, y, w, w); }
      else if (used > 0) { ctx.fillStyle = color("part"); ctx.fillRect(x, y + w * (1 - used / 1000), w, w * used / 1000); }
      ctx.globalAlpha = 1;
    });
  });
}

function tileAt(event) {
  const t = state.tiles;
  if (!t) return null;
  const r = $("map").getBoundingClientRect();
  const col = Math.floor((event.clientX - r.left) / t.tw), rowi = Math.floor((event.clientY - r.top) / t.th);
  if (col >= t.perRow) return null;
  return t.nodes[rowi * t.perRow + col] || null;
}

function drawNode(doc) {
  const box = $("node");
  const n = state.node && doc.nodes.find((x) => x[0] === state.node);
  if (!n) { box.hidden = true; return; }
  box.hidden = false;
  $("node-title").textContent = `${n[0]} · pool ${doc.pools[n[1]]} · ${doc.models[n[2]]}${n[3] ? "" : " · NOT READY"}`;
  box.querySelector("tbody").replaceChildren(...n[4].map(([used, healthy, holders, mig], j) => {
    const bar = el("span", null, "bar"); const fill = el("i"); fill.style.width = `${used / 10}%`; bar.appendChild(fill);
    const label = el("span", mig.length ? "MIG" : ` ${used}m`); const cell = el("span"); cell.append(bar, label);
    return row([j, cell, healthy ? "healthy" : "unhealthy", holders.map((h) => doc.pods[h][0]).join(", ") || "–",
                mig.map(([p, h]) => `${p}: ${h >= 0 ? doc.pods[h][0] : "free"}`).join("; ") || "–"]);
  }));
}

function drawQueues(doc) {
  const q = state.filters.queue;
  $("queues").tBodies[0].replaceChildren(...doc.queues.filter((r) => !q || r.name === q).map((r) => {
    const bar = el("span", null, "bar"); const fill = el("i");
    const ratio = r.fairShare > 0 ? r.allocated / r.fairShare : (r.allocated > 0 ? 2 : 0);
    fill.style.width = `${Math.min(100, ratio * 100)}%`; bar.appendChild(fill);
    if (ratio > 1.0001) bar.classList.add("over");
    bar.title = `${fmt(r.allocated)} of a fair share of ${fmt(r.fairShare)} GPUs`;
    return row([r.name, r.parent || "–", fmt(r.allocated), fmt(r.fairShare), r.guaranteed === null ? "–" : fmt(r.guaranteed),
                r.limit === null ? "–" : fmt(r.limit), r.pending, bar], [2, 3, 4, 5, 6]);
  }));
}

function drawPending(doc) {
  const rows = pendingRows(doc);
  const groups = new Map();
  for (const p of rows) {
    const key = p[5] >= 0 ? doc.reasons[p[5]][0] : p[4];
    let g = groups.get(key);
    if (!g) groups.set(key, g = { key, reason: p[4], example: p[5] >= 0 ? doc.reasons[p[5]][1] : "", pods: [] });
    g.pods.push(p);
  }
  const open = new Set(Array.from($("pending").querySelectorAll("details[open]")).map((d) => d.dataset.key));
  const list = [...groups.values()].sort((a, b) => b.pods.length - a.pods.length);
  $("pending").replaceChildren(...(list.length ? list.map((g) => {
    const d = el("details"); d.dataset.key = g.key; d.open = open.has(g.key);
    const s = el("summary"); s.append(el("span", g.pods.length, "count"), ` × ${g.reason}: ${g.key}`);
    d.appendChild(s);
    if (g.example && g.example !== g.key) d.appendChild(el("p", `e.g. ${g.example}`));
    const ul = el("ul", null, "pods");
    g.pods.slice(0, 200).forEach((p) => ul.appendChild(el("li", `${p[0]} (${p[3]}, queue ${doc.queueNames[p[2]]})`)));
    if (g.pods.length > 200) ul.appendChild(el("li", `… and ${g.pods.length - 200} more`));
    d.appendChild(ul);
    return d;
  }) : [el("p", "No pod is pending.")]));
}

function drawEvents(doc) {
  const ns = state.filters.namespace;
  const rows = doc.events.filter((e) => !ns || e[2].startsWith(ns + "/")).slice().reverse();
  $("events").tBodies[0].replaceChildren(...(rows.length ? rows.map((e) => row([when(doc, e[0]), e[1], e[2], e[3]]))
                                                          : [row(["–", "none", "", ""])]));
}

// ---- data -----------------------------------------------------------------------------------
function accept(doc) {
  probe.received = performance.now();
  state.doc = doc; state.frames = doc.frames;
  const slider = $("frame");
  if (doc.frames > 1) {
    $("replay").hidden = false; slider.max = String(doc.frames - 1); slider.value = String(doc.frame);
    $("frame-time").textContent = when(doc, doc.time);
  }
  render();
}

async function load(frame) {
  const r = await fetch(frame === undefined ? "api/fleet" : `api/fleet?frame=${frame}`, { cache: "no-store" });
  if (!r.ok) throw new Error(`api/fleet: HTTP ${r.status}`);
  return r.json();
}

function live() {
  const source = new EventSource("api/stream");
  source.addEventListener("fleet", (e) => {
    const started = performance.now();
    accept(JSON.parse(e.data));
    probe.updateMs = performance.now() - started;  // parse and draw of one pushed document
    $("status").textContent = "live"; $("status").className = "";
  });
  source.onerror = () => { $("status").textContent = "connection lost, retrying…"; $("status").className = "stale"; };
}

async function replay() {
  const frames = await (await fetch("api/frames", { cache: "no-store" })).json();
  accept(await load(frames.count - 1));
  $("status").textContent = `replay: ${frames.count} frames`;
  const slider = $("frame");
  slider.addEventListener("input", async () => accept(await load(Number(slider.value))));
  $("play").addEventListener("click", () => {
    const btn = $("play");
    if (state.playing) { clearInterval(state.playing); state.playing = null; btn.textContent = "Play"; btn.setAttribute("aria-pressed", "false"); return; }
    if (Number(slider.value) >= state.frames - 1) slider.value = "0";
    btn.textContent = "Pause"; btn.setAttribute("aria-pressed", "true");
    state.playing = setInterval(async () => {
      const next = Number(slider.value) + 1;
      if (next >= state.frames) { btn.click(); return; }
      slider.value = String(next); accept(await load(next));
    }, 500);
  });
}

async function main() {
  readHash();
  document.querySelectorAll("#filters select").forEach((s) => s.addEventListener("change", () => {
    state.filters[s.dataset.key] = s.value; writeHash(); render();
  }));
  $("find").addEventListener("submit", (e) => {
    e.preventDefault();
    const name = $("node-name").value.trim();
    state.node = name || null; writeHash(); render();
    $("status").textContent = state.node && !state.doc.nodes.some((n) => n[0] === name) ? `no node named ${name}` : $("status").textContent;
  });
  $("map").addEventListener("click", (e) => { const n = tileAt(e); if (n) { state.node = n[0]; $("node-name").value = n[0]; writeHash(); render(); } });
  $("map").addEventListener("mousemove", (e) => { const n = tileAt(e); $("map").title = n ? n[0] : ""; });
  window.addEventListener("hashchange", () => { readHash(); render(); });
  const frames = await (await fetch("api/frames", { cache: "no-store" })).json();
  if (frames.count > 1) await replay(); else live();
}

main().catch((e) => { $("status").textContent = String(e); $("status").className = "stale"; });
