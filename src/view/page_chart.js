// memtrack view, the timeline: stacking a tile (src/view/index.rs), colours by category or
// site, the annotation ranges, the peak and OOM marks, round axes, and the legend of what each
// colour holds at the moment under the cursor.

// the categories' colours (`top --group-by category`'s rules): hue, saturation
const CATEGORY_HUE = {
  "parameter": [215, 70], "optimizer state": [265, 60], "gradient": [30, 85], "activation": [145, 55],
  "temporary": [0, 70], "input": [190, 70], "other": [220, 8],
};
const UNTRACKED = "#e4e7ec", OTHER_BAND = "#b8bec8";

function textHue(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
  return (h >>> 0) % 360;
}
function categoryName(c) { return c === null || c === undefined ? null : state.overview.timeline.categories[c]; }
function hueOf(site, category) {
  if (state.colour === "category") return CATEGORY_HUE[categoryName(category)] || [220, 8];
  return [textHue(state.tile.sites[site] || ""), 60];
}
// neighbouring allocations of one colour differ a little in lightness, so their edges show
function allocColor(d) { const [h, s] = hueOf(d.site, d.category); return "hsl(" + h + ", " + s + "%, " + (46 + (d.id % 3) * 6) + "%)"; }
function bandColor(b) {
  if (state.colour === "category") {
    if (b.category === null) return OTHER_BAND;
    const [h, s] = hueOf(null, b.category); return "hsl(" + h + ", " + Math.round(s * 0.7) + "%, 74%)";
  }
  if (b.site === null) return OTHER_BAND;
  return "hsl(" + textHue(state.tile.sites[b.site] || "") + ", 45%, 74%)";
}
function legendColor(key) {
  if (key === BEFORE) return UNTRACKED;
  if (key === SMALL) return OTHER_BAND;
  if (state.colour === "category") { const [h, s] = CATEGORY_HUE[key] || [220, 8]; return "hsl(" + h + ", " + s + "%, 52%)"; }
  return "hsl(" + textHue(key) + ", 60%, 52%)";
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
  const last = timed() ? state.overview.timeline.x_range[1] : state.overview.timeline.events - 1;
  px[n] = Math.min(chart.clientWidth - PAD_R, Math.max(n ? px[n - 1] + 1 : PAD_L, xToPx(Math.min(last + (timed() ? 0 : 1), state.view[1]))));
  return { n, drawn, bands, untrackedBottom, top: top * 1.04, px };
}

function matches(site, stack) {
  if (!state.hits) return true;
  if (stack !== undefined && state.hits.stacks.has(stack)) return true;
  return site !== null && site !== undefined && state.tile.sites[site] !== undefined &&
    state.tile.sites[site].toLowerCase().includes(state.query);
}

function drawTimeline() {
  const { w, h, dpr } = size();
  const ctx = chart.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const L = state.layout, tile = state.tile;
  if (!L) return;
  state.drawn = { ranges: [], marks: [], xticks: [], yticks: [] };
  const top = L.top;
  drawYAxis(ctx, top);
  ctx.save();
  ctx.beginPath(); ctx.rect(PAD_L, padTop(), plotWidth(), plotHeight()); ctx.clip();
  drawRangeShades(ctx);
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
    ctx.fillStyle = allocColor(d);
    // one rectangle per run of samples where it sits at the same height
    for (let j = d.j0; j < d.j1;) {
      let k = j + 1;
      while (k < d.j1 && bottom[k - d.j0] === bottom[j - d.j0]) k++;
      const x = Math.floor(L.px[j]), y0 = yToPx(bottom[j - d.j0], top), y1 = yToPx(bottom[j - d.j0] + d.size, top);
      ctx.fillRect(x, y1, Math.max(1, Math.ceil(L.px[k]) - x), Math.max(0.5, y0 - y1));
      j = k;
    }
    if (state.selected === d.id) {
      ctx.globalAlpha = 1; ctx.strokeStyle = "#101828"; ctx.lineWidth = 1.5;
      for (let j = d.j0; j < d.j1; j++) {
        const y0 = yToPx(bottom[j - d.j0], top), y1 = yToPx(bottom[j - d.j0] + d.size, top);
        ctx.strokeRect(L.px[j], y1, Math.max(1, L.px[j + 1] - L.px[j]), y0 - y1);
      }
    }
  }
  for (const { b, bottom } of L.bands) {
    ctx.globalAlpha = (state.colour === "category" ? !state.hits : matches(b.site)) ? 0.95 : 0.15;
    ctx.fillStyle = bandColor(b);
    for (let j = 0; j < L.n; j++) fill(j, bottom[j], b.bytes[j]);
  }
  ctx.globalAlpha = 1;
  ctx.fillStyle = UNTRACKED;
  for (let j = 0; j < L.n; j++) fill(j, L.untrackedBottom[j], tile.untracked[j]);
  // the top edge: allocated bytes
  ctx.strokeStyle = "#1d2330"; ctx.lineWidth = 1; ctx.beginPath();
  for (let j = 0; j < L.n; j++) {
    const y = yToPx(tile.samples.total[j], top);
    if (j === 0) ctx.moveTo(L.px[j], y); else ctx.lineTo(L.px[j], y);
    ctx.lineTo(L.px[j + 1], y);
  }
  ctx.stroke();
  ctx.restore();
  drawRangeLabels(ctx);
  drawMarks(ctx, top);
  drawXAxis(ctx);
  drawLegend();
}

// ---- annotation ranges: a labelled bar over the plot and a faint shade through it ----
function rangeSpan(r) { return timed() ? [r.x0, r.x1] : [r.event0, r.event1]; }
function visibleRanges() {
  const [a, b] = state.view;
  return state.overview.timeline.ranges.filter((r) => { const [x0, x1] = rangeSpan(r); return x1 >= a && x0 <= b && r.depth < RANGE_ROWS; });
}
function rangeHue(name) { return textHue(name.replace(/#\d+$/, "")); }
function drawRangeShades(ctx) {
  for (const r of visibleRanges()) {
    if (r.depth) continue;
    const [x0, x1] = rangeSpan(r);
    ctx.fillStyle = "hsla(" + rangeHue(r.name) + ", 60%, 60%, 0.07)";
    ctx.fillRect(xToPx(x0), padTop(), Math.max(1, xToPx(x1) - xToPx(x0)), plotHeight());
  }
}
function drawRangeLabels(ctx) {
  const left = PAD_L, right = chart.clientWidth - PAD_R;
  ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
  for (const r of visibleRanges()) {
    const [x0, x1] = rangeSpan(r);
    const a = Math.max(left, xToPx(x0)), b = Math.min(right, Math.max(xToPx(x1), xToPx(x0) + 1));
    const y = 4 + r.depth * RANGE_ROW;
    ctx.fillStyle = "hsl(" + rangeHue(r.name) + ", 55%, 80%)";
    ctx.fillRect(a, y, Math.max(1, b - a), RANGE_ROW - 3);
    // the label if it fits, cut to the bar (never past the chart)
    // the name, else its shorter forms (`Optimizer.step#AdamW.step` → `AdamW.step` → `step`)
    const room = b - a - 6;
    const forms = [r.name, r.name.split("#").pop(), r.name.split("#").pop().split(".").pop()];
    let shown = forms.find((f) => f && ctx.measureText(f).width <= room) || "";
    if (!shown && room > 30) {
      let cut = forms[1];
      while (cut && ctx.measureText(cut + "…").width > room) cut = cut.slice(0, -1);
      shown = cut ? cut + "…" : "";
    }
    if (shown) { ctx.fillStyle = "#1d2330"; ctx.fillText(shown, a + 3, y + (RANGE_ROW - 3) / 2); }
    state.drawn.ranges.push({ name: r.name, x0: a, x1: b, label: shown, depth: r.depth });
  }
  ctx.textBaseline = "alphabetic";
}

// ---- the peak, the OOMs and the moment: marks and labels kept inside the plot ----
// what is drawn so far in this draw, [x0, y0, x1, y1]: labels and the marks themselves (an OOM's
// line, the peak's dot); a new label goes right of its mark, else left, else lower, clear of all
let placed = [];
function markLabel(ctx, text, x, y, color) {
  const left = PAD_L + 2, right = chart.clientWidth - PAD_R - 2, bottom = padTop() + plotHeight();
  const w = ctx.measureText(text).width;
  const clash = (lx, yy) => placed.some(([a, b, c, d]) => lx < c + 2 && lx + w > a - 2 && yy - 10 < d && yy + 3 > b);
  const sides = [x + 5, x - 5 - w].map((lx) => Math.max(left, Math.min(lx, right - w)));
  let at = null;
  for (let k = 0; k < 16 && !at && y + k * 14 < bottom; k++) {
    const lx = sides.find((lx) => !clash(lx, y + k * 14));
    if (lx !== undefined) at = [lx, y + k * 14];
  }
  const [lx, ly] = at || [sides[0], y];
  placed.push([lx, ly - 10, lx + w, ly + 3]);
  ctx.fillStyle = "rgba(255,255,255,0.85)"; ctx.fillRect(lx - 2, ly - 10, w + 4, 13);
  ctx.fillStyle = color; ctx.fillText(text, lx, ly);
  return [lx, lx + w, ly];
}
function markX(x) { return Math.max(PAD_L + 1, Math.min(chart.clientWidth - PAD_R - 1, xToPx(x))); }
function inView(x) { return x >= state.view[0] && x <= state.view[1]; }
function drawMarks(ctx, top) {
  const t = state.overview.timeline;
  const bottom = padTop() + plotHeight();
  placed = [];
  // the marks first (each an obstacle for every label), then their labels
  const ooms = [];
  t.ooms.forEach((o, k) => {
    const at = timed() ? o.x : o.index;
    if (!inView(at)) return;
    // two whole pixels wide: red on screen, never a blend of red and what is under it
    const x = Math.round(markX(at));
    ctx.fillStyle = "#d92d20"; ctx.fillRect(x - 1, padTop(), 2, bottom - padTop());
    placed.push([x - 1, padTop(), x + 1, bottom]);
    ooms.push({ o, k, x });
  });
  let peak = null;
  if (t.peak) {
    const at = timed() ? t.peak.x : t.peak.index;
    if (inView(at)) {
      const x = markX(at), y = Math.max(padTop() + 4, yToPx(t.peak.bytes, top));
      ctx.fillStyle = "#1d2330"; ctx.beginPath(); ctx.arc(x, y, 3.5, 0, 7); ctx.fill();
      placed.push([x - 4, y - 4, x + 4, y + 4]);
      peak = { x, y };
    }
  }
  ctx.lineWidth = 1.5; ctx.font = "bold 11px system-ui, sans-serif";
  for (const { o, k, x } of ooms) {
    const text = "OOM" + (t.ooms.length > 1 ? " " + (k + 1) : "") + ": " + fmtBytes(o.requested_bytes) + " asked";
    const [l0, l1, ly] = markLabel(ctx, text, x, padTop() + 12, "#d92d20");
    state.drawn.marks.push({ kind: "oom", x, label: text, l0, l1, ly });
  }
  ctx.font = "11px system-ui, sans-serif";
  if (peak) {
    const text = "peak " + fmtBytes(t.peak.bytes);
    const [l0, l1, ly] = markLabel(ctx, text, peak.x, Math.max(padTop() + 12, peak.y - 6), "#1d2330");
    state.drawn.marks.push({ kind: "peak", x: peak.x, y: peak.y, label: text, l0, l1, ly });
  }
  if (state.moment !== null && inView(state.moment.x)) {
    const x = markX(state.moment.x);
    ctx.strokeStyle = "#175cd3"; ctx.lineWidth = 1; ctx.setLineDash([4, 3]); ctx.beginPath();
    ctx.moveTo(x, padTop()); ctx.lineTo(x, bottom); ctx.stroke(); ctx.setLineDash([]);
    state.drawn.marks.push({ kind: "moment", x });
  }
}

// ---- axes: ticks at round values ----
function drawYAxis(ctx, top) {
  ctx.fillStyle = "#667085"; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "right";
  ctx.strokeStyle = "#eaecf0"; ctx.lineWidth = 1;
  for (const v of yTicks(top / 1.04)) {
    const y = Math.round(yToPx(v, top)) + 0.5;
    ctx.fillText(fmtTick(v), PAD_L - 5, y + 4);
    ctx.beginPath(); ctx.moveTo(PAD_L, y); ctx.lineTo(chart.clientWidth - PAD_R, y); ctx.stroke();
    if (state.drawn) state.drawn.yticks.push({ v, y, label: fmtTick(v) });
  }
  ctx.textAlign = "left";
}

function drawXAxis(ctx) {
  const [a, b] = state.view;
  const y = padTop() + plotHeight();
  ctx.strokeStyle = "#98a2b3"; ctx.lineWidth = 1; ctx.beginPath(); ctx.moveTo(PAD_L, y + 0.5); ctx.lineTo(chart.clientWidth - PAD_R, y + 0.5); ctx.stroke();
  ctx.fillStyle = "#667085"; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "center";
  const count = Math.max(2, Math.floor(plotWidth() / 110));
  const discrete = !timed();
  const { step, values } = ticks(a, b, count, 10);
  let lastRight = -Infinity;
  for (const v of values) {
    if (discrete && step < 1) continue;
    const x = Math.round(xToPx(v)) + 0.5;
    const label = discrete ? Math.round(v).toLocaleString() : fmtSeconds(v, step);
    const w = ctx.measureText(label).width;
    const lx = Math.max(PAD_L + w / 2, Math.min(chart.clientWidth - PAD_R - w / 2, x));
    if (lx - w / 2 < lastRight + 6) continue;
    ctx.beginPath(); ctx.moveTo(x, y); ctx.lineTo(x, y + 4); ctx.stroke();
    ctx.fillText(label, lx, y + 15);
    lastRight = lx + w / 2;
    if (state.drawn) state.drawn.xticks.push({ v, x, label });
  }
  ctx.textAlign = "left";
  $("xlabel").textContent = (KIND === "stats" ? "op index" : timed() ? "time since the first event" : "event index") +
    " · " + fmtSpan(b - a) + " shown";
}

// ---- the legend: a fixed key of every colour in the window, with what each holds at one
// sample (under the cursor, else the moment clicked when it is in the window, else the
// window's peak) ----
function momentInWindow() {
  const ev = state.tile && state.tile.samples.event;
  return state.moment !== null && ev && ev.length > 0 && inView(state.moment.x) &&
    state.moment.event >= ev[0] && state.moment.event <= ev[ev.length - 1] + 1;
}
function legendSample() {
  const L = state.layout;
  if (!L || !L.n) return -1;
  if (state.cursor !== null && state.cursor < L.n) return state.cursor;
  if (momentInWindow()) { const j = sampleOfEvent(state.moment.event); if (j >= 0) return j; }
  let best = 0;
  for (let j = 1; j < L.n; j++) if (state.tile.samples.total[j] > state.tile.samples.total[best]) best = j;
  return best;
}
function sampleOfEvent(event) {
  const ev = state.tile.samples.event;
  let lo = 0, hi = ev.length - 1;
  if (hi < 0 || event < ev[0]) return -1;
  while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (ev[mid] <= event) lo = mid; else hi = mid - 1; }
  return lo;
}
const BEFORE = "(before the trace)", SMALL = "(other small allocations)";
// the colour key of an allocation drawn, and of a band
function drawnKey(d) { return state.colour === "category" ? categoryName(d.category) || "other" : state.tile.sites[d.site]; }
function bandKey(b) {
  const k = state.colour === "category" ? categoryName(b.category) : b.site === null ? null : state.tile.sites[b.site];
  return k === null || k === undefined ? SMALL : k;
}
// bytes by colour at sample j
function holdings(j) {
  const tile = state.tile, by = new Map();
  const add = (k, v) => { if (v > 0) by.set(k, (by.get(k) || 0) + v); };
  for (const d of tile.drawn) if (d.j0 <= j && j < d.j1) add(drawnKey(d), d.size);
  for (const b of tile.bands) add(bandKey(b), b.bytes[j]);
  add(BEFORE, tile.untracked[j]);
  return by;
}
// every colour the window shows, in a fixed order: the categories in theirs, sites by the most
// they hold anywhere in the window (the first 8; the rest are summed)
function legendKeys() {
  const tile = state.tile, most = new Map();
  const note = (k, v) => { if (v > 0 && v > (most.get(k) || 0)) most.set(k, v); };
  for (const d of tile.drawn) note(drawnKey(d), d.size);
  for (const b of tile.bands) { const k = bandKey(b); for (const v of b.bytes) note(k, v); }
  for (const v of tile.untracked) note(BEFORE, v);
  const tail = [SMALL, BEFORE].filter((k) => most.has(k));
  if (state.colour === "category") {
    return state.overview.timeline.categories.filter((c) => most.has(c)).concat(tail);
  }
  const sites = [...most.keys()].filter((k) => k !== SMALL && k !== BEFORE).sort((a, b) => most.get(b) - most.get(a));
  return sites.slice(0, 8).concat(tail);
}
function drawLegend() {
  const j = legendSample(), key = $("key");
  if (j < 0) { key.innerHTML = ""; return; }
  const tile = state.tile, at = holdings(j), keys = legendKeys();
  const shown = new Set(keys);
  const rest = [...at.entries()].filter(([k]) => !shown.has(k));
  const why = state.cursor !== null ? "under the cursor" : momentInWindow() ? "at the moment clicked" :
    "at the window's peak" + (state.moment !== null ? "; the moment clicked, event " + state.moment.event.toLocaleString() + ", is outside the window" : "");
  key.innerHTML = "<b>" + esc(fmtX(tile.samples.x[j])) + "</b> (" + esc(why) + "): " + fmtBytes(tile.samples.total[j]) + " allocated · " +
    keys.map((k) => {
      const v = at.get(k) || 0;
      return "<span class=\"entry" + (v ? "" : " muted") + "\" data-key=\"" + esc(k) + "\" data-bytes=\"" + v + "\"><i style=\"background:" + legendColor(k) + "\"></i>" +
        esc(k) + " <b>" + fmtBytes(v) + "</b></span>";
    }).join("") +
    (rest.length ? "<span class=\"muted\" data-rest=\"" + rest.reduce((s, r) => s + r[1], 0) + "\">+" + rest.length + " more sites, " + fmtBytes(rest.reduce((s, r) => s + r[1], 0)) + "</span>" : "");
}
