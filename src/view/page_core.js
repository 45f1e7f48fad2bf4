// memtrack view: draws the tiles the server cuts for the window shown (src/view/index.rs),
// asks for details on hover and click (src/view/details.rs). No library, no build step.
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token") || "";
const KIND = document.body.dataset.kind;
const $ = (id) => document.getElementById(id);
const chart = $("chart");
const tip = $("tip");
const PAD_L = 56, PAD_R = 8, PAD_T = 8, PAD_B = 4;

const state = {
  overview: null, full: [0, 1], view: [0, 1], tile: null, layout: null,
  requests: 0, pending: null, moment: null, hits: null, query: "", detailCache: new Map(),
};

function api(path, params) {
  const q = new URLSearchParams(params || {});
  q.set("token", TOKEN);
  state.requests++;
  return fetch(path + "?" + q.toString()).then((r) => {
    if (!r.ok) return r.text().then((t) => { throw new Error(path + ": " + r.status + " " + t); });
    return r.json();
  });
}

function fmtBytes(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Math.abs(b), u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  const s = u === 0 ? String(v) : v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2);
  return (b < 0 ? "-" : "") + s + " " + units[u];
}

function fmtX(x) {
  if (x === null || x === undefined) return "?";
  const timed = state.overview && state.overview.timeline && state.overview.timeline.x_is_time;
  if (KIND === "stats") return "op " + Math.round(x);
  if (!timed) return "event " + Math.round(x);
  if (Math.abs(x) < 1e-3) return (x * 1e6).toFixed(0) + " µs";
  if (Math.abs(x) < 1) return (x * 1e3).toFixed(2) + " ms";
  return x.toFixed(3) + " s";
}

function fmtSpan(d) {
  if (KIND === "stats") return Math.round(d) + " ops";
  const timed = state.overview.timeline.x_is_time;
  if (!timed) return Math.round(d) + " events";
  return fmtX(d);
}

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function hue(n) { return (n * 137.508) % 360; }
function allocColor(id, site) { return "hsl(" + hue(site * 7 + id) + ", 62%, " + (52 + (id % 3) * 6) + "%)"; }
function bandColor(site) { return site === null ? "#b8bec8" : "hsla(" + hue(site * 7) + ", 45%, 72%, 1)"; }

// ---- geometry ----
function size() {
  const dpr = window.devicePixelRatio || 1;
  const w = chart.clientWidth, h = chart.clientHeight;
  if (chart.width !== Math.round(w * dpr) || chart.height !== Math.round(h * dpr)) {
    chart.width = Math.round(w * dpr); chart.height = Math.round(h * dpr);
  }
  return { w, h, dpr };
}
function plotWidth() { return Math.max(1, chart.clientWidth - PAD_L - PAD_R); }
function xToPx(x) { const [a, b] = state.view; return PAD_L + (x - a) / (b - a) * plotWidth(); }
function pxToX(px) { const [a, b] = state.view; return a + (px - PAD_L) / plotWidth() * (b - a); }

// ---- loading ----
function load() {
  api("/api/overview").then((ov) => {
    state.overview = ov;
    if (KIND === "stats") {
      state.full = [0, Math.max(1, ov.series.ops - 1)];
      $("facts").textContent = ov.series.ops.toLocaleString() + " ops" +
        (ov.series.peak ? " · peak " + fmtBytes(ov.series.peak[1]) + " at op " + ov.series.peak[0] : "");
      $("state").style.display = "none";
      $("moment").style.display = "none";
      $("detail").querySelector("div").textContent = "Hover the lines for the op and its bytes.";
    } else {
      const t = ov.timeline;
      let [a, b] = t.x_range;
      if (!(b > a)) b = a + 1;
      state.full = [a, b];
      $("facts").textContent = t.device_label + " · " + t.events.toLocaleString() + " events · " +
        t.allocations.toLocaleString() + " allocations" + (t.peak ? " · peak " + fmtBytes(t.peak.bytes) : "") +
        (ov.devices.length > 1 ? " · devices " + ov.devices.join(", ") + " (--device N)" : "");
      if (KIND === "profile") {
        // a profiler trace has the allocator's totals, not its segments
        $("state").style.display = "none";
        $("search").placeholder = "search op (aten::mm, autograd::…)";
        $("hint").textContent = "Wheel: zoom · drag: pan · hover: an allocation and its op · click: the op, annotations and Python functions then, and what is live";
        $("detail").querySelector("div").textContent = "Click an allocation for the op it was made in.";
      }
    }
    state.view = state.full.slice();
    refresh();
  }).catch(fail);
}

function fail(e) { $("status").textContent = String(e.message || e); console.warn(e); }

function refresh() {
  const view = state.view.slice();
  const width = Math.max(1, Math.floor(plotWidth()));
  const height = Math.max(1, chart.clientHeight - PAD_T - PAD_B);
  const params = { x0: view[0], x1: view[1], width, height };
  const path = KIND === "stats" ? "/api/series" : "/api/tile";
  const started = performance.now();
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
    return tile;
  });
  state.pending = req;
  req.catch(fail);
  return req;
}

// ---- stacking: drawn allocations bottom first in allocation order, then bands, then the rest ----
function layout(tile) {
  const n = tile.samples.x.length;
  const cum = new Float64Array(n);
  const drawn = tile.drawn.map((d) => {
    const bottom = new Float64Array(d.j1 - d.j0);
    for (let j = d.j0; j < d.j1; j++) { bottom[j - d.j0] = cum[j]; cum[j] += d.size; }
    return { d, bottom };
  });
  const bands = tile.bands.map((b) => {
    const bottom = new Float64Array(n);
    for (let j = 0; j < n; j++) { bottom[j] = cum[j]; cum[j] += b.bytes[j]; }
    return { b, bottom };
  });
  const untrackedBottom = new Float64Array(n);
  for (let j = 0; j < n; j++) { untrackedBottom[j] = cum[j]; cum[j] += tile.untracked[j]; }
  let top = 1;
  for (let j = 0; j < n; j++) top = Math.max(top, tile.samples.total[j], cum[j]);
  // screen x of each sample's column and the next
  const px = new Float64Array(n + 1);
  for (let j = 0; j < n; j++) px[j] = Math.max(PAD_L, xToPx(tile.samples.x[j]));
  const end = Math.min(state.full[1], state.view[1]);
  px[n] = Math.max(n ? px[n - 1] + 1 : PAD_L, xToPx(end));
  return { n, drawn, bands, untrackedBottom, top: top * 1.04, px };
}

function yToPx(v, top) { const h = chart.clientHeight - PAD_T - PAD_B; return PAD_T + h - v / top * h; }
function pxToY(py, top) { const h = chart.clientHeight - PAD_T - PAD_B; return (PAD_T + h - py) / h * top; }

function matches(site, stack) {
  if (!state.hits) return true;
  if (stack !== undefined && state.hits.stacks.has(stack)) return true;
  return site !== null && state.tile.sites[site] !== undefined &&
    state.tile.sites[site].toLowerCase().includes(state.query);
}

function draw() {
  const { w, h, dpr } = size();
  const ctx = chart.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  if (KIND === "stats") return drawSeries(ctx, w, h);
  const L = state.layout, tile = state.tile;
  if (!L) return;
  const top = L.top;
  // whole pixels: columns that meet leave no hairline seams between them
  const column = (j) => { const x = Math.floor(L.px[j]); return [x, Math.max(1, Math.ceil(L.px[j + 1]) - x)]; };
  const fill = (j, bottom, amount) => {
    if (amount <= 0) return;
    const [x, cw] = column(j);
    const y0 = yToPx(bottom, top), y1 = yToPx(bottom + amount, top);
    ctx.fillRect(x, y1, cw, Math.max(0.5, y0 - y1));
  };
  for (const { d, bottom } of L.drawn) {
    ctx.globalAlpha = matches(d.site, d.stack) ? 1 : 0.15;
    ctx.fillStyle = allocColor(d.id, d.site);
    // one rectangle per run of samples where it sits at the same height
    for (let j = d.j0; j < d.j1;) {
      let k = j + 1;
      while (k < d.j1 && bottom[k - d.j0] === bottom[j - d.j0]) k++;
      const x = Math.floor(L.px[j]), y0 = yToPx(bottom[j - d.j0], top), y1 = yToPx(bottom[j - d.j0] + d.size, top);
      ctx.fillRect(x, y1, Math.max(1, Math.ceil(L.px[k]) - x), Math.max(0.5, y0 - y1));
      j = k;
    }
  }
  for (const { b, bottom } of L.bands) {
    ctx.globalAlpha = matches(b.site) ? 0.9 : 0.15;
    ctx.fillStyle = bandColor(b.site);
    for (let j = 0; j < L.n; j++) fill(j, bottom[j], b.bytes[j]);
  }
  ctx.globalAlpha = 1;
  ctx.fillStyle = "#e4e7ec";
  for (let j = 0; j < L.n; j++) fill(j, L.untrackedBottom[j], tile.untracked[j]);
  // the top edge: allocated bytes
  ctx.strokeStyle = "#1d2330"; ctx.lineWidth = 1; ctx.beginPath();
  for (let j = 0; j < L.n; j++) {
    const y = yToPx(tile.samples.total[j], top);
    if (j === 0) ctx.moveTo(L.px[j], y); else ctx.lineTo(L.px[j], y);
    ctx.lineTo(L.px[j + 1], y);
  }
  ctx.stroke();
  drawMarks(ctx, h, top);
  drawYAxis(ctx, h, top);
  drawXAxis();
}

function drawMarks(ctx, h, top) {
  const t = state.overview.timeline;
  ctx.lineWidth = 1;
  for (const o of t.ooms) {
    const x = xToPx(o.x);
    if (x < PAD_L || x > chart.clientWidth - PAD_R) continue;
    ctx.strokeStyle = "#d92d20"; ctx.beginPath(); ctx.moveTo(x, PAD_T); ctx.lineTo(x, h - PAD_B); ctx.stroke();
    ctx.fillStyle = "#d92d20"; ctx.fillText("OOM", x + 2, PAD_T + 10);
  }
  if (t.peak) {
    const x = xToPx(t.peak.x);
    if (x >= PAD_L && x <= chart.clientWidth - PAD_R) {
      ctx.fillStyle = "#1d2330"; ctx.beginPath(); ctx.arc(x, yToPx(t.peak.bytes, top), 3, 0, 7); ctx.fill();
    }
  }
  if (state.moment !== null) {
    const x = xToPx(state.moment.x);
    ctx.strokeStyle = "#175cd3"; ctx.setLineDash([4, 3]); ctx.beginPath();
    ctx.moveTo(x, PAD_T); ctx.lineTo(x, h - PAD_B); ctx.stroke(); ctx.setLineDash([]);
  }
}

function drawYAxis(ctx, h, top) {
  ctx.fillStyle = "#667085"; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "right";
  ctx.strokeStyle = "#eaecf0";
  for (let k = 0; k <= 4; k++) {
    const v = top / 1.04 * k / 4, y = yToPx(v, top);
    ctx.fillText(fmtBytes(Math.round(v)), PAD_L - 4, y + 4);
    ctx.beginPath(); ctx.moveTo(PAD_L, y); ctx.lineTo(chart.clientWidth - PAD_R, y); ctx.stroke();
  }
  ctx.textAlign = "left";
}

function drawXAxis() {
  const [a, b] = state.view;
  $("axis-left").textContent = fmtX(a);
  $("axis-mid").textContent = fmtSpan(b - a) + " shown";
  $("axis-right").textContent = fmtX(b);
}

// ---- stats files: lines ----
function drawSeries(ctx, w, h) {
  const tile = state.tile;
  if (!tile) return;
  let top = 1;
  for (const l of tile.lines) for (const v of l.bytes) top = Math.max(top, v);
  top *= 1.04;
  const colors = { allocated: "#175cd3", active: "#039855", reserved: "#dc6803" };
  for (const l of tile.lines) {
    ctx.strokeStyle = colors[l.name] || "#444"; ctx.lineWidth = 1.2; ctx.beginPath();
    l.op.forEach((op, k) => {
      const x = xToPx(op), y = yToPx(l.bytes[k], top);
      if (k === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
  ctx.font = "11px system-ui, sans-serif";
  tile.lines.forEach((l, k) => { ctx.fillStyle = colors[l.name]; ctx.fillText(l.name, PAD_L + 8 + k * 80, PAD_T + 12); });
  for (const [name, op] of state.overview.series.markers.slice(0, 500)) {
    const x = xToPx(op);
    if (x < PAD_L || x > w - PAD_R) continue;
    ctx.strokeStyle = "#98a2b3"; ctx.setLineDash([2, 3]); ctx.beginPath(); ctx.moveTo(x, PAD_T); ctx.lineTo(x, h - PAD_B); ctx.stroke();
    ctx.setLineDash([]);
  }
  state.seriesTop = top;
  drawYAxis(ctx, h, top);
  drawXAxis();
}

// ---- hit testing ----
function sampleAt(px) {
  const L = state.layout;
  if (!L || L.n === 0) return -1;
  let lo = 0, hi = L.n - 1;
  if (px < L.px[0] || px > L.px[L.n]) return -1;
  while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (L.px[mid] <= px) lo = mid; else hi = mid - 1; }
  return lo;
}

function hit(px, py) {
  const L = state.layout;
  const j = sampleAt(px);
  if (j < 0) return null;
  const v = pxToY(py, L.top);
  for (const { d, bottom } of L.drawn) {
    if (j >= d.j0 && j < d.j1) { const b = bottom[j - d.j0]; if (v >= b && v < b + d.size) return { kind: "alloc", j, d }; }
  }
  for (const { b, bottom } of L.bands) {
    if (v >= bottom[j] && v < bottom[j] + b.bytes[j]) return { kind: "band", j, b };
  }
  const u = state.tile.untracked[j];
  if (v >= L.untrackedBottom[j] && v < L.untrackedBottom[j] + u) return { kind: "untracked", j, bytes: u };
  return { kind: "none", j };
}

function showTip(lines, cx, cy) {
  tip.innerHTML = lines.slice(0, 8).map((l) => "<div class=\"" + (l[1] || "") + "\">" + esc(l[0]) + "</div>").join("");
  tip.style.display = "block";
  const r = tip.getBoundingClientRect();
  let x = cx + 14, y = cy + 14;
  if (x + r.width > window.innerWidth - 4) x = Math.max(4, cx - r.width - 14);
  if (y + r.height > window.innerHeight - 4) y = Math.max(4, cy - r.height - 14);
  tip.style.left = x + "px"; tip.style.top = y + "px";
}
function hideTip() { tip.style.display = "none"; }

function lifetime(d) {
  const a = d.t0 === null ? "before the trace" : fmtX(d.t0);
  const b = d.t1 === null ? "still live at the end" : fmtX(d.t1);
  const span = d.t0 !== null && d.t1 !== null ? " (" + fmtSpan(d.t1 - d.t0) + ")" : "";
  return "live " + a + " → " + b + span;
}

function detail(id) {
  if (!state.detailCache.has(id)) state.detailCache.set(id, api("/api/alloc", { id }));
  return state.detailCache.get(id);
}

let hoverSeq = 0;
function onHover(ev) {
  const rect = chart.getBoundingClientRect();
  const px = ev.clientX - rect.left, py = ev.clientY - rect.top;
  if (KIND === "stats") return hoverSeries(px, ev);
  const h = state.layout && hit(px, py);
  if (!h || h.kind === "none") return hideTip();
  const total = state.tile.samples.total[h.j];
  const at = "at " + fmtX(state.tile.samples.x[h.j]) + ": " + fmtBytes(total) + " allocated";
  if (h.kind === "alloc") {
    const d = h.d;
    const lines = [[fmtBytes(d.size) + " · allocation #" + d.id, "big"], [state.tile.sites[d.site]], [lifetime(d)]];
    showTip(lines.concat([["click: whole stack and what is live then", "frame"]]), ev.clientX, ev.clientY);
    const seq = ++hoverSeq;
    detail(d.id).then((det) => {
      if (seq !== hoverSeq || tip.style.display === "none") return;
      if (KIND === "profile") {
        const ctx = [];
        if (det.annotations.length) ctx.push([det.annotations.join(" › "), "frame"]);
        for (const f of det.python.slice(0, 2)) ctx.push([f, "frame"]);
        const op = det.op ? "in " + det.op : det.start_event === null ? "allocated before the trace" : "outside any op";
        showTip(lines.slice(0, 1).concat([[op]], lines.slice(2), ctx, det.freed_in ? [["freed in " + det.freed_in, "frame"]] : []), ev.clientX, ev.clientY);
        return;
      }
      const frames = det.python.slice(0, 3).map((f) => [f, "frame"]);
      const more = det.python.length > 3 || det.native.length ? [["+" + Math.max(0, det.python.length - 3) + " Python, " + det.native.length + " C++ frames (click)", "frame"]] : [];
      showTip(lines.concat([[det.category]], frames, more), ev.clientX, ev.clientY);
    }).catch(() => {});
  } else if (h.kind === "band") {
    const b = h.b;
    const name = b.site === null ? "other small allocations (" + b.allocations.toLocaleString() + " in view)" : state.tile.sites[b.site];
    showTip([[fmtBytes(b.bytes[h.j]) + " in allocations under " + fmtBytes(state.tile.min_bytes), "big"], [name],
      [b.allocations.toLocaleString() + " allocations summed in this band"], [at], ["zoom in to see them one by one", "frame"]], ev.clientX, ev.clientY);
  } else {
    showTip([[fmtBytes(h.bytes) + " allocated before the trace", "big"], ["never freed within it: no stack recorded"], [at]], ev.clientX, ev.clientY);
  }
}

let opSeq = 0;
function hoverSeries(px, ev) {
  const tile = state.tile;
  if (!tile || !tile.lines.length) return hideTip();
  const x = pxToX(px);
  const l = tile.lines[0];
  let best = -1, dist = Infinity;
  l.op.forEach((op, k) => { const dd = Math.abs(op - x); if (dd < dist) { dist = dd; best = k; } });
  if (best < 0) return hideTip();
  const op = l.op[best];
  const seq = ++opSeq;
  api("/api/op", { i: op }).then((o) => {
    if (seq !== opSeq) return;
    const lines = [["op " + o.op, "big"], [o.name, "frame"]];
    for (const k of ["allocated", "active", "reserved"]) if (o[k] !== null && !Number.isNaN(o[k])) lines.push([k + " " + fmtBytes(o[k])]);
    showTip(lines, ev.clientX, ev.clientY);
  }).catch(() => {});
}

// ---- click: the allocation's stack, and the moment ----
function onClick(ev) {
  if (KIND === "stats" || !state.layout) return;
  const rect = chart.getBoundingClientRect();
  const h = hit(ev.clientX - rect.left, ev.clientY - rect.top);
  if (!h) return;
  if (h.kind === "alloc") showDetail(h.d.id);
  setMoment(state.tile.samples.event[h.j], state.tile.samples.x[h.j]);
}

function showDetail(id) {
  const sec = $("detail");
  sec.innerHTML = "<h2>Allocation #" + id + "</h2><div class=\"muted\">loading…</div>";
  return detail(id).then((d) => {
    if (KIND === "profile") return showProfileDetail(sec, d);
    const py = d.python.map((f) => "<li>" + esc(f) + "</li>").join("") || "<li class=\"muted\">no Python frame</li>";
    const cpp = d.native.map((f) => "<li>" + esc(f) + "</li>").join("");
    const freed = d.freed_by.slice(0, 4).map((f) => "<li>" + esc(f) + "</li>").join("");
    sec.innerHTML = "<h2>Allocation #" + d.id + ": " + fmtBytes(d.size) + "</h2>" +
      "<div>" + esc(d.site) + "</div>" +
      "<div class=\"muted\">" + esc(lifetime({ t0: d.start_x, t1: d.end_x })) +
      (d.start_event !== null ? " · event " + d.start_event : "") + (d.end_event !== null ? " → " + d.end_event : "") + "</div>" +
      "<div>category: <b>" + esc(d.category) + "</b>" +
      (d.annotations.length ? " · annotations: " + esc(d.annotations.join(" › ")) : "") + "</div>" +
      "<h2 style=\"margin-top:8px\">Python stack (innermost first)</h2><ol class=\"stack\" id=\"python-stack\">" + py + "</ol>" +
      (cpp ? "<details><summary>" + d.native.length + " C++ frames</summary><ol class=\"stack\">" + cpp + "</ol></details>" : "") +
      (freed ? "<details><summary>freed at</summary><ol class=\"stack\">" + freed + "</ol></details>" : "");
    return d;
  }).catch(fail);
}

// a profiler trace's allocation: the op it was made in and what else was open on its thread
function showProfileDetail(sec, d) {
  const py = d.python.map((f) => "<li>" + esc(f) + "</li>").join("") || "<li class=\"muted\">none recorded (profile with with_stack=True)</li>";
  const op = d.op ? d.op : d.start_event === null ? "(allocated before the trace)" : "(outside any op)";
  sec.innerHTML = "<h2>Allocation #" + d.id + ": " + fmtBytes(d.size) + "</h2>" +
    "<div>op: <b id=\"alloc-op\">" + esc(op) + "</b></div>" +
    "<div class=\"muted\">" + esc(lifetime({ t0: d.start_x, t1: d.end_x })) +
    (d.start_event !== null ? " · event " + d.start_event : "") + (d.end_event !== null ? " → " + d.end_event : "") +
    (d.thread ? " · thread " + esc(d.thread) : "") + "</div>" +
    (d.total_allocated !== null ? "<div class=\"muted\">then: " + fmtBytes(d.total_allocated) + " allocated, " + fmtBytes(d.total_reserved) + " reserved</div>" : "") +
    (d.annotations.length ? "<div>annotations: " + esc(d.annotations.join(" › ")) + "</div>" : "") +
    (d.freed_in ? "<div>freed in: " + esc(d.freed_in) + "</div>" : "") +
    "<h2 style=\"margin-top:8px\">Python functions open (innermost first)</h2><ol class=\"stack\" id=\"python-stack\">" + py + "</ol>";
  return d;
}

function setMoment(event, x) {
  state.moment = { event, x };
  draw();
  const sec = $("moment");
  sec.innerHTML = "<h2>Live after event " + event + " (" + esc(fmtX(x)) + ")</h2><div class=\"muted\">loading…</div>";
  const live = api("/api/live", { event }).then((r) => {
    const rows = r.rows.map((row) => "<tr><td title=\"" + esc(row.location || row.group) + "\">" + esc(row.group) +
      "</td><td class=\"n\">" + fmtBytes(row.at_bytes || 0) + "</td><td class=\"n\">" + (row.at_count || 0).toLocaleString() +
      "</td><td class=\"n\">" + fmtBytes(row.end_bytes) + "</td></tr>").join("");
    sec.innerHTML = "<h2>Live after event " + event + " (" + esc(fmtX(x)) + "): <span id=\"live-total\" data-bytes=\"" + r.at_bytes + "\">" +
      fmtBytes(r.at_bytes || 0) + "</span> in " + (r.at_count || 0).toLocaleString() + " allocations</h2>" +
      "<table><thead><tr><th>" + (KIND === "profile" ? "op" : "site") + "</th><th class=\"n\">live then</th><th class=\"n\">count</th><th class=\"n\">at the end</th></tr></thead><tbody>" +
      rows + "</tbody></table>" + (r.groups > r.rows.length ? "<div class=\"muted\">" + (r.groups - r.rows.length) + " more sites</div>" : "");
    return r;
  }).catch(fail);
  if (KIND === "profile") return live;
  const seg = api("/api/segments", { event }).then((s) => { state.segments = s; drawSegments(); return s; }).catch(fail);
  return Promise.all([live, seg]);
}

// ---- allocator state: one row per segment, blocks coloured by state ----
function drawSegments() {
  const s = state.segments, cv = $("segments");
  if (!s) return;
  const rows = s.segments.length;
  const rowH = Math.max(3, Math.min(14, Math.floor(600 / Math.max(1, rows))));
  cv.style.height = Math.min(640, rows * rowH + 4) + "px";
  const dpr = window.devicePixelRatio || 1, w = cv.clientWidth, h = cv.clientHeight;
  cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
  const ctx = cv.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  let biggest = 1;
  for (const g of s.segments) biggest = Math.max(biggest, g.total_size);
  const colors = { active_allocated: "#2e90fa", active_pending_free: "#f79009", inactive: "#eaecf0" };
  state.segmentRows = [];
  s.segments.forEach((g, r) => {
    const y = 2 + r * rowH, scale = (w - 4) / biggest;
    for (const b of g.blocks) {
      ctx.fillStyle = colors[b.state] || "#98a2b3";
      ctx.fillRect(2 + b.offset * scale, y, Math.max(0.5, b.size * scale - 0.3), rowH - 1);
    }
    state.segmentRows.push({ y, g, scale });
  });
  $("legend").innerHTML = "<span><i style=\"background:#2e90fa\"></i>allocated</span><span><i style=\"background:#f79009\"></i>awaiting free</span><span><i style=\"background:#eaecf0\"></i>free (cached)</span>";
  $("state-note").textContent = rows + " segments after event " + s.event + ": " + fmtBytes(s.reserved) + " reserved, " +
    fmtBytes(s.allocated) + " in allocated blocks" + (s.blocks_left_out ? " (" + s.blocks_left_out + " blocks not drawn)" : "") +
    "; widths scaled to the largest segment";
}

function onSegmentsHover(ev) {
  const cv = $("segments"), rect = cv.getBoundingClientRect();
  const px = ev.clientX - rect.left, py = ev.clientY - rect.top;
  const row = (state.segmentRows || []).find((r) => py >= r.y && py < r.y + Math.max(3, 14));
  if (!row) return hideTip();
  const off = (px - 2) / row.scale;
  const b = row.g.blocks.find((b) => off >= b.offset && off < b.offset + b.size);
  const lines = [["segment 0x" + row.g.address.toString(16) + " · " + fmtBytes(row.g.total_size) + " · " + row.g.pool + " pool · stream " + row.g.stream, "big"]];
  if (b) {
    lines.push([b.state.replace(/_/g, " ") + " block of " + fmtBytes(b.size) + " at +" + b.offset]);
    if (b.requested !== null) lines.push(["requested " + fmtBytes(b.requested)]);
    if (b.site) lines.push([b.site]);
  }
  showTip(lines, ev.clientX, ev.clientY);
}

// ---- zoom, pan, reset, search ----
function zoomAt(px, factor) {
  const [a, b] = state.view, x = pxToX(px);
  const minSpan = KIND === "stats" ? 4 : (state.overview.timeline.x_is_time ? 1e-6 : 4);
  let span = Math.max(minSpan, (b - a) * factor);
  span = Math.min(span, state.full[1] - state.full[0]);
  let na = x - (x - a) / (b - a) * span;
  na = Math.max(state.full[0], Math.min(na, state.full[1] - span));
  state.view = [na, na + span];
  draw();
  return refresh();
}

let drag = null;
chart.addEventListener("wheel", (ev) => {
  ev.preventDefault();
  const rect = chart.getBoundingClientRect();
  zoomAt(ev.clientX - rect.left, Math.exp(ev.deltaY * 0.0015));
}, { passive: false });
chart.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, view: state.view.slice(), moved: false }; });
window.addEventListener("mouseup", () => {
  if (drag && drag.moved) refresh();
  setTimeout(() => { drag = null; }, 0);
});
chart.addEventListener("mousemove", (ev) => {
  if (drag && ev.buttons === 1) {
    const dx = ev.clientX - drag.x;
    if (Math.abs(dx) > 3) drag.moved = true;
    if (!drag.moved) return;
    const [a, b] = drag.view, span = b - a;
    let na = a - dx / plotWidth() * span;
    na = Math.max(state.full[0], Math.min(na, state.full[1] - span));
    state.view = [na, na + span];
    hideTip();
    if (state.layout) state.layout = layout(state.tile);
    draw();
    return;
  }
  onHover(ev);
});
chart.addEventListener("mouseleave", hideTip);
chart.addEventListener("click", (ev) => { if (!(drag && drag.moved)) onClick(ev); });
chart.addEventListener("dblclick", (ev) => ev.preventDefault());
$("segments").addEventListener("mousemove", onSegmentsHover);
$("segments").addEventListener("mouseleave", hideTip);
$("reset").addEventListener("click", () => { state.view = state.full.slice(); refresh(); });
window.addEventListener("resize", () => { if (state.tile) { refresh(); drawSegments(); } });

let searchTimer = null;
$("search").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(runSearch, 250);
});
function runSearch() {
  const q = $("search").value.trim();
  if (!q || KIND === "stats") { state.hits = null; state.query = ""; draw(); return Promise.resolve(null); }
  return api("/api/search", { q }).then((r) => {
    state.hits = { stacks: new Set(r.stacks) };
    state.query = q.toLowerCase();
    $("status").textContent = "\"" + q + "\": " + r.allocations.toLocaleString() + " allocations, " + fmtBytes(r.bytes) + " in all";
    draw();
    return r;
  }).catch(fail);
}

// ---- #selftest: the test drives a zoom and a click, and writes what it saw into the page ----
function selftest() {
  const out = {};
  const report = () => {
    const pre = document.createElement("pre");
    pre.id = "selftest";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  };
  const waitTile = () => state.pending;
  const start = () => new Promise((resolve) => {
    const tick = () => (state.tile ? resolve() : setTimeout(tick, 20));
    tick();
  });
  start().then(() => {
    const t = state.tile;
    out.first = { events: t.events, drawn: t.drawn.length, span: t.x1 - t.x0, step: (t.x1 - t.x0) / t.samples.x.length };
    const before = state.requests;
    const rect = chart.getBoundingClientRect();
    chart.dispatchEvent(new WheelEvent("wheel", { deltaY: -1500, clientX: rect.left + rect.width / 2, clientY: rect.top + 100, bubbles: true, cancelable: true }));
    out.requests_for_zoom = state.requests - before;
    return waitTile();
  }).then(() => {
    const t = state.tile;
    out.zoomed = { events: t.events, drawn: t.drawn.length, span: t.x1 - t.x0, step: (t.x1 - t.x0) / t.samples.x.length };
    // click the middle of the tallest drawn allocation, through the page's own hit testing
    const L = state.layout;
    let best = null;
    for (const it of L.drawn) if (!best || it.d.size > best.d.size) best = it;
    if (!best) { out.click = "no drawn allocation"; return null; }
    const j = best.d.j0 + ((best.d.j1 - best.d.j0) >> 1);
    const px = (L.px[j] + L.px[j + 1]) / 2, py = yToPx(best.bottom[j - best.d.j0] + best.d.size / 2, L.top);
    const rect = chart.getBoundingClientRect();
    const opts = { clientX: rect.left + px, clientY: rect.top + py, bubbles: true };
    chart.dispatchEvent(new MouseEvent("mousemove", opts));
    out.tip = tip.textContent;
    out.clicked = best.d.id;
    chart.dispatchEvent(new MouseEvent("click", opts));
    return Promise.all([showDetail(best.d.id), setMoment(state.tile.samples.event[j], state.tile.samples.x[j])]);
  }).then(() => {
    const stack = $("python-stack");
    out.stack = stack ? stack.textContent : "";
    const op = $("alloc-op");
    out.op = op ? op.textContent : null;
    const total = $("live-total");
    out.live_bytes = total ? Number(total.dataset.bytes) : null;
    out.moment_event = state.moment ? state.moment.event : null;
    out.segments = state.segments ? state.segments.segments.length : null;
    $("search").value = KIND === "profile" ? "aten" : "py";
    return runSearch();
  }).then((r) => {
    out.search_allocations = r ? r.allocations : null;
    report();
  }).catch((e) => { out.error = String(e && e.message || e); report(); });
}

load();
if (location.hash === "#selftest") selftest();
