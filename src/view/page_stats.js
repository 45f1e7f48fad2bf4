// memtrack view, a stats file (MemoryTracker's or `record`'s): allocated, active and reserved
// bytes per op (src/view/series.rs), the markers labelled, the ops a search names ticked.

const SERIES_COLOR = { allocated: "#175cd3", active: "#039855", reserved: "#dc6803" };

function setupStats(ov) {
  const s = ov.series;
  $("facts").textContent = s.ops.toLocaleString() + " ops" +
    (s.peak ? " · peak " + fmtBytes(s.peak[1]) + " allocated at op " + s.peak[0].toLocaleString() : "");
  $("state").style.display = "none";
  $("moment").style.display = "none";
  $("controls").querySelectorAll(".timeline-only").forEach((e) => { e.style.display = "none"; });
  $("search").placeholder = "search ops and modules (Adam, attn, addmm)";
  $("hint").textContent = "Wheel: zoom · drag: pan · hover: the op, its module and its bytes · search: ops and modules";
  $("detail").querySelector("h2").textContent = "Op";
  $("detail").querySelector("div").textContent = "Hover the lines for the op, its module and its bytes.";
  if (s.peak) addJump($("jumps"), "Peak", "go to the peak: " + fmtBytes(s.peak[1]), "go-peak", () => {
    const span = Math.max(40, (state.full[1] - state.full[0]) / 12);
    state.view = clampView([s.peak[0] - span / 2, s.peak[0] + span / 2]);
    refresh();
  });
  // series equal at every op are one line: say so
  $("note").textContent = s.coinciding.map((g) => g.join(", ") + " are equal at every op: one line shows " +
    (g.length === 2 ? "both" : "all " + g.length)).join(" · ");
}

function seriesLabel(name) {
  const g = state.overview.series.coinciding.find((g) => g.includes(name));
  return g ? g.join(" = ") : name;
}

function drawSeries() {
  const { w, h, dpr } = size();
  const ctx = chart.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const tile = state.tile;
  if (!tile) return;
  state.drawn = { markers: [], xticks: [], yticks: [], lines: [], hits: 0 };
  let top = 1;
  for (const l of tile.lines) for (const v of l.bytes) top = Math.max(top, v);
  top *= 1.04;
  state.seriesTop = top;
  drawYAxis(ctx, top);
  // coinciding series: the first one of a group is drawn, it stands for the others
  const drawnNames = new Set();
  for (const l of tile.lines) {
    const g = state.overview.series.coinciding.find((g) => g.includes(l.name));
    if (g && g[0] !== l.name) continue;
    drawnNames.add(l.name);
    ctx.strokeStyle = SERIES_COLOR[l.name] || "#444"; ctx.lineWidth = 1.4; ctx.beginPath();
    l.op.forEach((op, k) => {
      const x = xToPx(op), y = yToPx(l.bytes[k], top);
      if (k === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
    state.drawn.lines.push(seriesLabel(l.name));
  }
  // the ops the search names: ticks along the bottom
  const bottom = padTop() + plotHeight();
  if (state.opHits) {
    ctx.fillStyle = "#f79009";
    for (const op of state.opHits.first) {
      if (op < state.view[0] || op > state.view[1]) continue;
      ctx.fillRect(Math.floor(xToPx(op)), bottom - 8, 2, 8);
      state.drawn.hits++;
    }
  }
  drawMarkers(ctx, w, bottom);
  drawXAxis(ctx);
  // the key: each line's colour and name (coinciding series named together)
  $("key").innerHTML = state.drawn.lines.map((name) => "<span class=\"entry\" data-key=\"" + esc(name) + "\"><i style=\"background:" +
    SERIES_COLOR[name.split(" = ")[0]] + "\"></i>" + esc(name) + "</span>").join("");
}

// markers (`fw_start`, `fw_bw_boundary`) as dashed lines, named where the name fits
function drawMarkers(ctx, w, bottom) {
  ctx.font = "11px system-ui, sans-serif";
  const right = w - PAD_R;
  let lastRight = -Infinity;
  for (const [name, op] of state.overview.series.markers) {
    if (op < state.view[0] || op > state.view[1]) continue;
    const x = markX(op);
    ctx.strokeStyle = name === "fw_bw_boundary" ? "#7a5af8" : "#98a2b3";
    ctx.setLineDash([3, 3]); ctx.beginPath(); ctx.moveTo(x, padTop()); ctx.lineTo(x, bottom); ctx.stroke(); ctx.setLineDash([]);
    const tw = ctx.measureText(name).width;
    let lx = x + 3;
    if (lx + tw > right) lx = x - 3 - tw;
    let labelled = false;
    if (lx > lastRight + 4 && lx >= PAD_L) {
      ctx.fillStyle = ctx.strokeStyle; ctx.fillText(name, lx, padTop() + 10);
      lastRight = lx + tw; labelled = true;
    }
    state.drawn.markers.push({ name, op, x, label: labelled ? name : "", l0: lx, l1: lx + tw });
  }
}

let opSeq = 0;
function hoverSeries(px, ev) {
  const tile = state.tile;
  if (!tile || !tile.lines.length || px < PAD_L) return hideTip();
  const x = pxToX(px);
  const l = tile.lines[0];
  let best = -1, dist = Infinity;
  l.op.forEach((op, k) => { const dd = Math.abs(op - x); if (dd < dist) { dist = dd; best = k; } });
  if (best < 0) return hideTip();
  const op = l.op[best];
  const seq = ++opSeq;
  api("/api/op", { i: op }).then((o) => {
    if (seq !== opSeq) return;
    const module = opModule(o.name || "");
    const lines = [["op " + o.op.toLocaleString(), "big"], [o.name || "(no name)", "frame"],
      [module === null ? "outside every module" : "module " + (module || "(root)")]];
    for (const k of ["allocated", "active", "reserved"]) if (o[k] !== null && !Number.isNaN(o[k])) lines.push([k + " " + fmtBytes(o[k])]);
    const near = state.overview.series.markers.filter(([, m]) => m === o.op).map(([n]) => n);
    if (near.length) lines.push(["marker " + near.join(", ") + " before this op"]);
    showTip(lines, ev.clientX, ev.clientY, chart);
    $("detail").innerHTML = "<h2>Op " + o.op.toLocaleString() + "</h2><div id=\"op-name\">" + esc(o.name || "") + "</div>" +
      "<div class=\"muted\">" + lines.slice(2).map((l) => esc(l[0])).join(" · ") + "</div>";
  }).catch(() => {});
}

// the module an op ran in, as `model::tracker::op_module` reads the names
function opModule(name) {
  const first = (phases) => { let at = -1; for (const p of phases) { const i = name.indexOf(p); if (i >= 0 && (at < 0 || i < at)) at = i; } return at; };
  let at = first([".forward.", ".backward."]);
  if (at < 0) at = first([".step."]);
  return at < 0 ? null : name.slice(0, at);
}

function runOpSearch(q) {
  return api("/api/search", { q }).then((r) => {
    state.opHits = r;
    state.query = q.toLowerCase();
    $("search-status").textContent = "\"" + q + "\": " + r.ops.toLocaleString() + " ops" +
      (r.modules.length ? " in " + r.modules.map((m) => m || "(root)").join(", ") : "");
    draw();
    writeFragment();
    return { allocations: r.ops };
  });
}
