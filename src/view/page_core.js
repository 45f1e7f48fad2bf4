// memtrack view, the core: state, the server's routes, formats, scales, the URL fragment and
// loading. The other modules (chart.js, stats.js, interact.js, probe.js) are served in the
// same script after this one (src/view/page.rs). No library, no build step.
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token") || "";
const KIND = document.body.dataset.kind;
// a saved view (page_save.js): the answers it was drawn from, in the file; no server
const SAVED = (() => { const el = document.getElementById("memtrack-saved"); return el ? JSON.parse(el.textContent) : null; })();
const $ = (id) => document.getElementById(id);
const chart = $("chart");
const tip = $("tip");
const PAD_L = 64, PAD_R = 12, PAD_B = 22;
// rows of annotation ranges drawn above the plot, each this tall
const RANGE_ROW = 15, RANGE_ROWS = 2;

const state = {
  overview: null, full: [0, 1], view: [0, 1], tile: null, layout: null,
  requests: 0, pending: null, moment: null, hits: null, query: "", detailCache: new Map(),
  // what the URL fragment holds
  axis: "event", colour: "category", yscale: KIND === "profile" ? "sqrt" : "linear", selected: null, segtl: false,
  // the sample under the cursor (the legend's moment); null: none
  cursor: null,
  // what the last draw put where, read back by tests (probe.js) and the legend
  drawn: null,
};

function api(path, params) {
  const key = answerKey(path, params);
  state.requests++;
  if (SAVED) {
    return key in SAVED.answers ? Promise.resolve(SAVED.answers[key])
      : Promise.reject(new Error("this saved view holds what it showed (not " + key.split("|")[0] + "): open the capture with memtrack view to zoom, search or click further"));
  }
  if (capturing && recent.has(key)) { remember(key, recent.get(key)); return Promise.resolve(recent.get(key)); }
  const q = new URLSearchParams(params || {});
  q.set("token", TOKEN);
  return fetch(path + "?" + q.toString()).then((r) => {
    if (!r.ok) return r.text().then((t) => { throw new Error(path + ": " + r.status + " " + t); });
    return r.json();
  }).then((answer) => { remember(key, answer); return answer; });
}

function fmtBytes(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Math.abs(b), u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  const s = u === 0 ? String(v) : v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2);
  return (b < 0 ? "-" : "") + s + " " + units[u];
}

// whether the page's x is seconds (the time axis of a capture with times)
function timed() {
  return KIND !== "stats" && state.axis === "time" && state.overview && state.overview.timeline.x_is_time;
}

function fmtSeconds(x, step) {
  const a = Math.abs(step || x);
  if (a < 1e-3) return (x * 1e6).toFixed(step && step < 1e-6 ? 2 : 0) + " µs";
  if (a < 1) return (x * 1e3).toFixed(step && step < 1e-3 ? 2 : step && step < 1e-2 ? 1 : 0) + " ms";
  return x.toFixed(step && step < 0.1 ? 2 : step && step < 1 ? 1 : 0) + " s";
}

function fmtX(x) {
  if (x === null || x === undefined) return "?";
  if (KIND === "stats") return "op " + Math.round(x).toLocaleString();
  if (!timed()) return "event " + Math.round(x).toLocaleString();
  return fmtSeconds(x, 1e-6);
}

function fmtSpan(d) {
  if (KIND === "stats") return Math.round(d).toLocaleString() + " ops";
  if (!timed()) return Math.round(d).toLocaleString() + " events";
  return fmtSeconds(d, d / 100);
}

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// ---- geometry ----
function size() {
  const dpr = window.devicePixelRatio || 1;
  const w = chart.clientWidth, h = chart.clientHeight;
  if (chart.width !== Math.round(w * dpr) || chart.height !== Math.round(h * dpr)) {
    chart.width = Math.round(w * dpr); chart.height = Math.round(h * dpr);
  }
  return { w, h, dpr };
}
// the annotation strip above the plot: as many rows as the ranges nest (at most RANGE_ROWS)
function rangeRows() {
  if (KIND === "stats" || !state.overview) return 0;
  const rs = state.overview.timeline.ranges;
  if (!rs.length) return 0;
  return Math.min(RANGE_ROWS, 1 + Math.max(...rs.map((r) => r.depth)));
}
function padTop() { return 8 + rangeRows() * RANGE_ROW; }
function plotWidth() { return Math.max(1, chart.clientWidth - PAD_L - PAD_R); }
function plotHeight() { return Math.max(1, chart.clientHeight - padTop() - PAD_B); }
function xToPx(x) { const [a, b] = state.view; return PAD_L + (x - a) / (b - a) * plotWidth(); }
function pxToX(px) { const [a, b] = state.view; return a + (px - PAD_L) / plotWidth() * (b - a); }

// y: linear, or the square root of the bytes (a profiler trace's one large tensor leaves the
// small ones visible); `top` is the scale's top in bytes
function yFrac(v) { return state.yscale === "sqrt" ? Math.sqrt(Math.max(0, v)) : v; }
function yToPx(v, top) { const h = plotHeight(); return padTop() + h - yFrac(v) / yFrac(top) * h; }
function pxToY(py, top) {
  const h = plotHeight(), f = (padTop() + h - py) / h;
  return state.yscale === "sqrt" ? Math.pow(f * Math.sqrt(top), 2) : f * top;
}

// ---- round ticks ----
// the 1-2-5 step of at least `raw`, in `base` (10, or 1024 for bytes: 1, 2, 5 … 512 KiB, 1 MiB)
function niceStep(raw, base) {
  if (!(raw > 0)) return 1;
  if (base === 1024) {
    // bytes: a power of two (256 MiB, 512 MiB, 1 GiB: the ticks read 0.5, 1, 1.5 GiB)
    let step = 1;
    while (step < raw) step *= 2;
    return step;
  }
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}
// a round byte count as its tick says it: `512 MiB`, `1 GiB`, `1.5 GiB`
function fmtTick(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = b, u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return Number(v.toFixed(2)) + " " + units[u];
}
function ticks(a, b, count, base) {
  const step = niceStep((b - a) / Math.max(1, count), base);
  const out = [];
  for (let v = Math.ceil(a / step) * step; v <= b + step * 1e-9 && out.length < 100; v += step) out.push(v);
  return { step, values: out };
}
// round byte values for the y axis; on the square-root scale, spread as the scale spreads them
function yTicks(top) {
  if (state.yscale !== "sqrt") return ticks(0, top, 6, 1024).values;
  const out = [];
  for (const f of [0.06, 0.25, 0.5, 0.85]) {
    const v = niceStep(f * f * top, 1024);
    if (v < top && !out.includes(v)) out.push(v);
  }
  return [0].concat(out);
}

// ---- the URL fragment: a link reproduces the view ----
// #x=event&v=A,B&q=TEXT&sel=ID&at=EVENT&c=category&y=linear&seg=1
function readFragment() {
  // a saved view opens as it was saved (what the link adds, a probe, goes on top)
  const f = new URLSearchParams(SAVED ? SAVED.hash : "");
  for (const [k, v] of new URLSearchParams(location.hash.replace(/^#/, ""))) f.set(k, v);
  const out = { probe: f.has("probe") ? f.get("probe") : null, selftest: f.has("selftest") };
  if (f.get("x") === "time" || f.get("x") === "event") state.axis = f.get("x");
  if (f.get("c") === "site" || f.get("c") === "category") state.colour = f.get("c");
  if (f.get("y") === "sqrt" || f.get("y") === "linear") state.yscale = f.get("y");
  if (f.get("seg") === "1") state.segtl = true;
  const v = (f.get("v") || "").split(",").map(Number);
  if (v.length === 2 && v.every(Number.isFinite) && v[1] > v[0]) out.view = v;
  if (f.get("q")) out.q = f.get("q");
  if (f.get("sel") !== null && /^\d+$/.test(f.get("sel"))) out.sel = Number(f.get("sel"));
  if (f.get("at") !== null && /^\d+$/.test(f.get("at"))) out.at = Number(f.get("at"));
  return out;
}
let restoring = true;
function writeFragment() {
  if (restoring) return;
  const f = new URLSearchParams();
  if (KIND !== "stats") {
    f.set("x", state.axis);
    if (state.overview.timeline.categories.length) f.set("c", state.colour);
  }
  f.set("y", state.yscale);
  const round = (x) => timed() ? Number(x.toPrecision(9)) : Math.round(x * 100) / 100;
  if (state.view[0] !== state.full[0] || state.view[1] !== state.full[1]) f.set("v", round(state.view[0]) + "," + round(state.view[1]));
  if (state.query) f.set("q", $("search").value.trim());
  if (state.selected !== null) f.set("sel", state.selected);
  if (state.moment !== null) f.set("at", state.moment.event);
  if (state.segtl && KIND === "snapshot") f.set("seg", "1");
  const keep = new URLSearchParams(location.hash.replace(/^#/, ""));
  if (keep.has("probe")) f.set("probe", keep.get("probe"));
  history.replaceState(null, "", location.pathname + location.search + "#" + f.toString());
}

// ---- a capture without a trace: what the allocator held when it was taken ----
function setupNoTrace(ov, wanted) {
  const n = ov.segments.count;
  $("facts").textContent = ov.timeline.device_label + " · no trace recorded · " + n.toLocaleString() + " segments";
  $("notrace").innerHTML = "<b>No trace recorded.</b> This capture holds the allocator's state when it was taken, not the " +
    "allocations over time: it was taken without memory history (or by an older PyTorch). Record one with " +
    "<code>torch.cuda.memory._record_memory_history(max_entries=100000)</code> before the code to look at. " +
    "The segments and blocks at the dump are below.";
  for (const id of ["chart-wrap", "xlabel", "strip-wrap", "key", "hint", "controls", "jumps", "reset", "search", "detail", "moment", "events"]) $(id).style.display = "none";
  $("status").textContent = "no trace recorded";
  $("state").querySelector("h2").textContent = "Allocator state when the snapshot was taken";
  restoring = false;
  return api("/api/segments", { event: "end" }).then((s) => {
    state.segments = s;
    drawSegments();
    if (wanted.probe !== null) runProbe(wanted.probe);
  });
}

// ---- loading ----
function fullRange() {
  if (KIND === "stats") return [0, Math.max(1, state.overview.series.ops - 1)];
  const t = state.overview.timeline;
  let [a, b] = timed() ? t.x_range : [0, Math.max(0, t.events - 1)];
  if (!(b > a)) b = a + 1;
  // room after the last event, so what happens there (an OOM) is not the last pixel
  return [a, b + (b - a) * 0.02];
}

function load() {
  const wanted = readFragment();
  api("/api/overview").then((ov) => {
    state.overview = ov;
    if (SAVED) setupSaved();
    if (KIND === "snapshot" && ov.trace === false) return setupNoTrace(ov, wanted);
    if (KIND === "stats") setupStats(ov); else setupTimeline(ov);
    state.full = fullRange();
    state.view = wanted.view ? clampView(wanted.view) : state.full.slice();
    syncControls();
    const steps = [refresh()];
    if (KIND === "stats") steps.push(showModules());
    if (wanted.q) { $("search").value = wanted.q; steps.push(runSearch()); }
    if (KIND !== "stats" && wanted.sel !== undefined) steps.push(showDetail(wanted.sel));
    if (KIND !== "stats" && wanted.at !== undefined && wanted.at < ov.timeline.events) steps.push(momentAtEvent(wanted.at));
    return Promise.all(steps).then(() => {
      restoring = false;
      writeFragment();
      if (wanted.probe !== null) runProbe(wanted.probe);
      else if (wanted.selftest) selftest();
    });
  }).catch(fail);
}

function clampView(v) {
  const [a, b] = state.full;
  let span = Math.min(v[1] - v[0], b - a);
  let na = Math.max(a, Math.min(v[0], b - span));
  return [na, na + span];
}

// the header: what the capture is, its peak and OOMs, and a button to go to each
function setupTimeline(ov) {
  const t = ov.timeline;
  $("facts").textContent = t.device_label + " · " + t.events.toLocaleString() + " events · " +
    t.allocations.toLocaleString() + " allocations" + (t.peak ? " · peak " + fmtBytes(t.peak.bytes) + " at event " + t.peak.index.toLocaleString() : "") +
    (ov.devices.length > 1 ? " · devices " + ov.devices.join(", ") + " (--device N)" : "");
  if (t.ooms.length) {
    const o = t.ooms[0];
    $("oom-facts").textContent = (t.ooms.length === 1 ? "OOM" : t.ooms.length + " OOMs") + ": " +
      fmtBytes(o.requested_bytes) + " asked at event " + o.index.toLocaleString() +
      (o.device_free_bytes !== null && o.device_free_bytes !== undefined ? " (" + fmtBytes(o.device_free_bytes) + " free on the device)" : "");
  }
  const jumps = $("jumps");
  if (t.peak) addJump(jumps, "Peak", "go to the peak: " + fmtBytes(t.peak.bytes), "go-peak", () => goTo(t.peak.index, t.peak.x));
  t.ooms.slice(0, 8).forEach((o, k) => addJump(jumps, t.ooms.length === 1 ? "OOM" : "OOM " + (k + 1),
    "go to the OOM at event " + o.index + ": " + fmtBytes(o.requested_bytes) + " asked", "go-oom-" + k, () => goTo(o.index, o.x), "oom"));
  if (!t.categories.length) { state.colour = "site"; $("colour-control").style.display = "none"; }
  if (!t.x_is_time) $("axis-control").style.display = "none";
  if (KIND !== "snapshot") $("segtl-control").style.display = "none";
  if (KIND === "profile") {
    // a profiler trace has the allocator's totals, not its segments
    $("state").style.display = "none";
    $("search").placeholder = "search op (aten::mm, autograd::…)";
    $("hint").textContent = "Wheel: zoom · drag: pan · hover: an allocation and its op · click: the op, annotations and Python functions then, and what is live · ←/→: step the moment";
    $("detail").querySelector("div").textContent = "Click an allocation for the op it was made in.";
  }
}

function addJump(parent, label, title, id, go, cls) {
  const b = document.createElement("button");
  b.type = "button"; b.textContent = label; b.title = title; b.id = id;
  if (cls) b.className = cls;
  b.addEventListener("click", go);
  parent.appendChild(b);
}

function syncControls() {
  $("colour").value = state.colour;
  $("xaxis").value = state.axis;
  $("yscale").value = state.yscale;
  $("segtl").checked = state.segtl;
}

function fail(e) { $("status").textContent = String(e.message || e); console.warn(e); }

function refresh() {
  const view = state.view.slice();
  const width = Math.max(1, Math.floor(plotWidth()));
  const height = Math.max(1, Math.floor(plotHeight()));
  const params = { x0: view[0], x1: view[1], width, height };
  if (KIND !== "stats") { params.axis = timed() ? "time" : "event"; params.by = state.colour === "category" ? "category" : "site"; }
  const path = KIND === "stats" ? "/api/series" : "/api/tile";
  const started = performance.now();
  const under = KIND === "stats" ? null : Promise.all([refreshStrip(), refreshSegments()]);
  const req = api(path, params).then((tile) => {
    if (state.pending !== req) return tile;
    state.tile = tile;
    state.layout = KIND === "stats" ? null : layout(tile);
    const ms = Math.round(performance.now() - started);
    $("status").textContent = KIND === "stats"
      ? tile.ops.toLocaleString() + " ops in view · " + ms + " ms"
      : tile.events.toLocaleString() + " events in view · " + tile.drawn.length.toLocaleString() +
        " allocations drawn, " + (tile.live_allocations - tile.drawn.length).toLocaleString() +
        " in bands (< " + fmtBytes(tile.min_bytes) + " or past the cap) · " + ms + " ms";
    draw();
    writeFragment();
    return under ? under.then(() => tile) : tile;
  });
  state.pending = req;
  req.catch(fail);
  return req;
}

// the window around event `event` (x `x` on the time axis), and the moment there
function goTo(event, x) {
  const at = timed() ? x : event;
  const [a, b] = state.full;
  const span = Math.min(b - a, Math.max((b - a) / 12, timed() ? 1e-4 : 60));
  state.view = clampView([at - span / 2, at + span / 2]);
  refresh();
  return setMoment(event, at);
}

function draw() {
  if (KIND === "stats") return drawSeries();
  drawTimeline();
  drawStrip();
  drawSegTimeline();
}
