// memtrack view, under the chart: the overview strip (the whole capture, the window shown on
// it; dragging on it brushes the window) and, for an allocator snapshot, the segment timeline
// (reserved memory by segment over time, a tile of /api/segment_tile cut as the chart's are).

const strip = $("strip"), segChart = $("segchart");
const STRIP_H = 46, SEG_H = 200;
if (KIND === "stats") $("strip-wrap").style.display = "none";

function sizeCanvas(cv, h) {
  const dpr = window.devicePixelRatio || 1, w = cv.clientWidth;
  cv.style.height = h + "px";
  if (cv.width !== Math.round(w * dpr) || cv.height !== Math.round(h * dpr)) { cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr); }
  const ctx = cv.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return ctx;
}

// ---- the overview strip: the whole capture's allocated bytes, the window over it ----
function stripXToPx(x) { const [a, b] = state.full; return PAD_L + (x - a) / (b - a) * plotWidth(); }
function stripPxToX(px) { const [a, b] = state.full; return a + Math.max(0, Math.min(1, (px - PAD_L) / plotWidth())) * (b - a); }

// the whole capture's tile, fetched again when the axis or the width changes
function refreshStrip() {
  if (KIND === "stats" || !state.overview) return Promise.resolve(null);
  const width = Math.max(1, Math.floor(plotWidth()));
  const axis = timed() ? "time" : "event";
  const key = axis + width;
  if (state.whole && state.whole.key === key) { drawStrip(); return Promise.resolve(state.whole); }
  const [x0, x1] = state.full;
  return api("/api/tile", { x0, x1, width, height: STRIP_H, axis, by: "category" }).then((t) => {
    state.whole = { key, x: t.samples.x, total: t.samples.total };
    drawStrip();
    return state.whole;
  }).catch(fail);
}

function drawStrip() {
  if (KIND === "stats" || !state.whole) return;
  const ctx = sizeCanvas(strip, STRIP_H), w = strip.clientWidth;
  const { x, total } = state.whole;
  const top = Math.max(1, ...total), bottom = STRIP_H - 4;
  const y = (v) => bottom - v / top * (STRIP_H - 8);
  ctx.fillStyle = "#d0d5dd";
  ctx.beginPath(); ctx.moveTo(stripXToPx(x[0] || 0), bottom);
  for (let j = 0; j < x.length; j++) { const px = stripXToPx(x[j]), nx = j + 1 < x.length ? stripXToPx(x[j + 1]) : px + 1; ctx.lineTo(px, y(total[j])); ctx.lineTo(nx, y(total[j])); }
  ctx.lineTo(stripXToPx(x[x.length - 1] || 0) + 1, bottom); ctx.closePath(); ctx.fill();
  // the window shown: clear over the rest dimmed, edged in blue
  const a = stripXToPx(state.view[0]), b = Math.max(a + 2, stripXToPx(state.view[1]));
  ctx.fillStyle = "rgba(255,255,255,0.6)";
  ctx.fillRect(PAD_L, 0, Math.max(0, a - PAD_L), STRIP_H); ctx.fillRect(b, 0, Math.max(0, w - PAD_R - b), STRIP_H);
  ctx.fillStyle = "rgba(23,92,211,0.12)"; ctx.fillRect(a, 0, b - a, STRIP_H);
  ctx.strokeStyle = "#175cd3"; ctx.lineWidth = 1.5; ctx.strokeRect(a, 1, b - a, STRIP_H - 2);
  ctx.strokeStyle = "#98a2b3"; ctx.lineWidth = 1; ctx.strokeRect(PAD_L + 0.5, 0.5, plotWidth() - 1, STRIP_H - 1);
  ctx.fillStyle = "#667085"; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "right";
  ctx.fillText("whole", PAD_L - 5, STRIP_H / 2 + 4); ctx.textAlign = "left";
  state.stripDrawn = { x0: a, x1: b };
}

// drag on the strip: the window is what was brushed; a click centres the window there
let brush = null;
strip.addEventListener("mousedown", (ev) => {
  const r = strip.getBoundingClientRect();
  brush = { from: ev.clientX - r.left, moved: false };
  ev.preventDefault();
});
window.addEventListener("mousemove", (ev) => {
  if (!brush || ev.buttons !== 1) return;
  const r = strip.getBoundingClientRect(), px = ev.clientX - r.left;
  if (Math.abs(px - brush.from) < 3 && !brush.moved) return;
  brush.moved = true;
  brushTo(brush.from, px, false);
});
window.addEventListener("mouseup", (ev) => {
  if (!brush) return;
  const r = strip.getBoundingClientRect(), px = ev.clientX - r.left, b = brush;
  brush = null;
  if (b.moved) return brushTo(b.from, px, true);
  const span = state.view[1] - state.view[0], x = stripPxToX(px);
  state.view = clampView([x - span / 2, x + span / 2]);
  refresh();
});
// the window from strip pixel `p` to `q`; `done`: ask for the tiles
function brushTo(p, q, done) {
  let x0 = stripPxToX(Math.min(p, q)), x1 = stripPxToX(Math.max(p, q));
  const minSpan = timed() ? 1e-6 : 4;
  if (x1 - x0 < minSpan) x1 = x0 + minSpan;
  state.view = clampView([x0, x1]);
  if (state.layout) state.layout = layout(state.tile);
  draw();
  return done ? refresh() : null;
}

// ---- the segment timeline: one band per segment, from cudaMalloc (or map) to its free ----
function segShown() { return KIND === "snapshot" && state.segtl; }

function refreshSegments() {
  $("segtl-wrap").style.display = segShown() ? "" : "none";
  if (!segShown()) { state.segTile = null; return Promise.resolve(null); }
  const view = state.view.slice();
  const params = { x0: view[0], x1: view[1], width: Math.max(1, Math.floor(plotWidth())), height: SEG_H - 30, axis: timed() ? "time" : "event" };
  const req = api("/api/segment_tile", params).then((t) => {
    if (state.segPending !== req) return t;
    state.segTile = t;
    drawSegTimeline();
    return t;
  });
  state.segPending = req;
  req.catch(fail);
  return req;
}

function segColor(d, k) {
  const f = state.segTile.facts[k];
  // a hue per stream, lightness alternating so neighbouring segments show their edges
  return "hsl(" + (f.stream === 0 ? 200 : textHue(String(f.stream))) + ", " + (d.t0 === null ? 15 : 55) + "%, " + (52 + (d.id % 3) * 8) + "%)";
}

function drawSegTimeline() {
  if (!segShown() || !state.segTile) return;
  const t = state.segTile, ctx = sizeCanvas(segChart, SEG_H);
  const L = layout(t), top = L.top, pt = 6, ph = SEG_H - pt - 20;
  const yPx = (v) => pt + ph - v / top * ph;
  state.segLayout = { L, yPx, pt, ph };
  ctx.save(); ctx.beginPath(); ctx.rect(PAD_L, pt, plotWidth(), ph); ctx.clip();
  L.drawn.forEach(({ d, bottom }, k) => {
    ctx.fillStyle = segColor(d, k);
    for (let j = d.j0; j < d.j1;) {
      let m = j + 1;
      while (m < d.j1 && bottom[m - d.j0] === bottom[j - d.j0]) m++;
      const x = Math.floor(L.px[j]), y0 = yPx(bottom[j - d.j0]), y1 = yPx(bottom[j - d.j0] + d.size);
      ctx.fillRect(x, y1, Math.max(1, Math.ceil(L.px[m]) - x), Math.max(0.5, y0 - y1 - 0.5));
      j = m;
    }
  });
  ctx.fillStyle = OTHER_BAND;
  for (const { b, bottom } of L.bands) for (let j = 0; j < L.n; j++) {
    if (b.bytes[j] <= 0) continue;
    const x = Math.floor(L.px[j]);
    ctx.fillRect(x, yPx(bottom[j] + b.bytes[j]), Math.max(1, Math.ceil(L.px[j + 1]) - x), yPx(bottom[j]) - yPx(bottom[j] + b.bytes[j]));
  }
  // the top edge: reserved bytes
  ctx.strokeStyle = "#1d2330"; ctx.lineWidth = 1; ctx.beginPath();
  for (let j = 0; j < L.n; j++) { const y = yPx(t.samples.total[j]); if (j === 0) ctx.moveTo(L.px[j], y); else ctx.lineTo(L.px[j], y); ctx.lineTo(L.px[j + 1], y); }
  ctx.stroke();
  if (state.moment !== null && inView(state.moment.x)) {
    const x = markX(state.moment.x);
    ctx.strokeStyle = "#175cd3"; ctx.setLineDash([4, 3]); ctx.beginPath(); ctx.moveTo(x, pt); ctx.lineTo(x, pt + ph); ctx.stroke(); ctx.setLineDash([]);
  }
  ctx.restore();
  ctx.fillStyle = "#667085"; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "right";
  const peak = Math.max(0, ...t.samples.total);
  ctx.fillText(fmtTick(niceStep(peak / 2, 1024)), PAD_L - 5, yPx(niceStep(peak / 2, 1024)) + 4);
  ctx.fillText("0", PAD_L - 5, pt + ph + 4); ctx.textAlign = "left";
  ctx.strokeStyle = "#98a2b3"; ctx.beginPath(); ctx.moveTo(PAD_L, pt + ph + 0.5); ctx.lineTo(segChart.clientWidth - PAD_R, pt + ph + 0.5); ctx.stroke();
  $("segtl-note").textContent = "Reserved memory by segment: " + t.drawn.length.toLocaleString() + " segments drawn" +
    (t.live_allocations > t.drawn.length ? ", " + (t.live_allocations - t.drawn.length).toLocaleString() + " summed in grey (< " + fmtBytes(t.min_bytes) + ")" : "") +
    " · up to " + fmtBytes(peak) + " reserved in view · colour: stream";
}

// the segment under the pointer: its address, size, stream and when it was made
function segmentAt(px, py) {
  const S = state.segLayout, t = state.segTile;
  if (!S || !t) return null;
  const L = S.L;
  let j = -1;
  for (let k = 0; k < L.n; k++) if (px >= L.px[k] && px < Math.max(L.px[k + 1], L.px[k] + 1)) { j = k; break; }
  if (j < 0) return null;
  for (let k = 0; k < L.drawn.length; k++) {
    const { d, bottom } = L.drawn[k];
    if (j < d.j0 || j >= d.j1) continue;
    const b = bottom[j - d.j0];
    if (py <= S.yPx(b) && py >= S.yPx(b + d.size)) return { d, f: t.facts[k], j };
  }
  return null;
}
function segmentLines(h) {
  const { d, f } = h;
  return [["segment 0x" + f.address.toString(16) + " · " + fmtBytes(d.size) + " · stream " + f.stream + (f.mapped ? " · mapped (expandable)" : ""), "big"],
    [d.t0 === null ? "made before the trace" : "made at " + fmtX(d.t0)],
    [d.t1 === null ? "held to the end" : "freed at " + fmtX(d.t1)],
    [state.segTile.sites[d.site], "frame"]];
}
segChart.addEventListener("mousemove", (ev) => {
  const r = segChart.getBoundingClientRect();
  const h = segmentAt(ev.clientX - r.left, ev.clientY - r.top);
  if (!h) return hideTip();
  showTip(segmentLines(h), ev.clientX, ev.clientY, segChart);
});
segChart.addEventListener("mouseleave", hideTip);
$("segtl").addEventListener("change", () => { state.segtl = $("segtl").checked; writeFragment(); refreshSegments(); });
