// memtrack view, a stats file (MemoryTracker's or `record`'s): allocated, active and reserved
// bytes per op (src/view/series.rs), the markers labelled, the ops a search names ticked.

const SERIES_COLOR = { allocated: "#175cd3", active: "#039855", reserved: "#dc6803" };

function setupStats(ov) {
  const s = ov.series, r = ov.record;
  // what the file is: MemoryTracker's, `record`'s (where it ran), or `estimate`'s (for which device)
  const device = r && r.device_name ? r.device_name + (r.device_total_bytes ? " (" + fmtBytes(r.device_total_bytes) + ")" : "") : null;
  const what = !r ? "MemoryTracker stats" : r.backend === "estimate" ? "estimate" + (device ? " for " + device : "")
    : "record · " + r.backend + (device ? " · " + device : "");
  $("facts").innerHTML = "<span id=\"file-kind\">" + esc(what) + "</span> · " + s.ops.toLocaleString() + " ops" +
    (s.peak ? " · peak " + fmtBytes(s.peak[1]) + " allocated at op " + s.peak[0].toLocaleString() : "");
  if (ov.verdict) showVerdict(ov.verdict);
  const oom = ov.verdict && ov.verdict.oom;
  if (oom) addJump($("jumps"), "Runs out", "go to the op where it runs out of memory", "go-oom-0", () => {
    const span = Math.max(40, (state.full[1] - state.full[0]) / 12);
    state.view = clampView([oom.op_index - span / 2, oom.op_index + span / 2]);
    refresh();
  }, "oom");
  for (const id of ["state", "moment", "events"]) $(id).style.display = "none";
  // no segments, no categories of allocations, no time axis: their controls go
  $("controls").querySelectorAll(".timeline-only, .snapshot-only").forEach((e) => { e.style.display = "none"; });
  if (r && r.iterations) $("modules").style.display = "";
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
  drawRunsOut(ctx, bottom);
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

// where an estimate runs out of memory: a red line at the op, labelled
function drawRunsOut(ctx, bottom) {
  const oom = state.overview.verdict && state.overview.verdict.oom;
  if (!oom || oom.op_index < state.view[0] || oom.op_index > state.view[1]) return;
  const x = Math.round(markX(oom.op_index));
  ctx.fillStyle = "#d92d20"; ctx.fillRect(x - 1, padTop(), 2, bottom - padTop());
  ctx.font = "bold 11px system-ui, sans-serif";
  const text = "runs out: " + fmtBytes(oom.requested_bytes) + " asked";
  const w = ctx.measureText(text).width, lx = x + 4 + w > chart.clientWidth - PAD_R ? x - 4 - w : x + 4;
  ctx.fillStyle = "rgba(255,255,255,0.85)"; ctx.fillRect(lx - 2, padTop() + 14, w + 4, 13);
  ctx.fillStyle = "#d92d20"; ctx.fillText(text, lx, padTop() + 24);
  state.drawn.markers.push({ name: "runs out", op: oom.op_index, x, label: text, l0: lx, l1: lx + w });
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

// ---- an estimate's verdict: the estimate's own (estimate::verdict), every field it has ----
const VERDICT_SAID = ["device", "device_bytes", "usable_bytes", "fits", "spare_bytes", "oom", "peak_reserved_bytes", "peak_allocated_bytes", "peak_allocated_op"];
function showVerdict(v) {
  const el = $("verdict"), oom = v.oom;
  const where = oom ? "op " + oom.op_index.toLocaleString() + " (" + oom.op + ")" + (oom.module ? " in " + oom.module : "") +
    (oom.iteration ? ", iteration " + oom.iteration : ", before the first forward") : "";
  const usable = v.usable_bytes !== undefined ? " of " + fmtBytes(v.usable_bytes) + " usable" : "";
  if (v.fits === true) {
    el.className = "fits";
    el.textContent = "fits " + (v.device || "the device") + ": peak reserved " + fmtBytes(v.peak_reserved_bytes) + usable +
      (v.spare_bytes !== null && v.spare_bytes !== undefined ? ", " + fmtBytes(v.spare_bytes) + " spare" : "");
  } else if (v.fits === false) {
    el.className = "oom";
    el.textContent = "does not fit " + (v.device || "the device") + ": runs out at " + where +
      (oom ? ", asking " + fmtBytes(oom.requested_bytes) + " with " + fmtBytes(oom.allocated_bytes) + " allocated, " + fmtBytes(oom.reserved_bytes) + " reserved" : "");
  } else {
    el.className = "";
    el.textContent = "fit on " + (v.device || "the device") + " unknown" + (where ? ": stopped at " + where : "");
  }
  // whatever else the verdict says (what ran, caveats), as it says it
  const more = Object.entries(v).filter(([k, x]) => !VERDICT_SAID.includes(k) && x !== null && x !== undefined && x !== "" &&
    !(Array.isArray(x) && !x.length));
  $("verdict-more").textContent = more.map(([k, x]) => k.replace(/_/g, " ") + ": " +
    (typeof x === "number" && /bytes$/.test(k) ? fmtBytes(x) : typeof x === "object" ? JSON.stringify(x) : String(x))).join(" · ");
}

// ---- a record file's modules: what `memtrack modules` prints, one iteration, by category ----
const MODULE_CATEGORIES = ["Parameter", "Buffer", "Gradient", "Activation", "Temp", "Optstate", "Other", "Total"];
const moduleView = { iteration: null, depth: 2, state: "peak" };
function showModules() {
  if (!state.overview.record || !state.overview.record.iterations) return Promise.resolve(null);
  const params = moduleView.iteration === null ? {} : { iteration: moduleView.iteration };
  return api("/api/modules", params).then((m) => { state.modules = m; drawModules(); return m; }).catch(fail);
}
// the device a module's table shows: the one holding the most at the run's peak
function moduleDevice(m) {
  const peak = m.peak || (m.iterations[0] && m.iterations[0].peak) || {};
  let best = null;
  for (const [d, c] of Object.entries(peak)) if (!best || c.Total > peak[best].Total) best = d;
  return best;
}
function drawModules() {
  const m = state.modules, body = $("modules-body"), it = m.iterations[0];
  if (!it) { body.textContent = "no iteration recorded"; return; }
  const device = moduleDevice(m);
  const states = [...new Set(it.modules.flatMap((mod) => mod.states.map((s) => s.state)))];
  const pick = (mod) => {
    // the module's state asked for, else the one where the device held the most
    let best = null;
    for (const s of mod.states) {
      if (moduleView.state !== "peak" && s.state !== moduleView.state) continue;
      for (const call of s.calls) {
        const c = call[device];
        if (c && (!best || c.Total > best.c.Total)) best = { state: s.state, c };
      }
    }
    return best;
  };
  const depths = Math.max(...it.modules.map((mod) => mod.depth));
  const rows = it.modules.filter((mod) => mod.depth <= moduleView.depth).map((mod) => {
    const p = pick(mod);
    if (!p) return "";
    return "<tr><td class=\"name\" data-fqn=\"" + esc(mod.fqn) + "\" title=\"search its ops\" style=\"padding-left:" + (6 + 12 * (mod.depth - 1)) + "px\">" +
      esc(mod.fqn.split(".").slice(mod.depth > 1 ? -1 : 0).join(".")) + "</td><td>" + esc(p.state) + "</td>" +
      MODULE_CATEGORIES.map((k) => "<td class=\"n\">" + (p.c[k] ? fmtBytes(p.c[k]) : "<span class=\"muted\">0</span>") + "</td>").join("") + "</tr>";
  }).join("");
  const option = (v, label, on) => "<option value=\"" + esc(v) + "\"" + (on ? " selected" : "") + ">" + esc(label) + "</option>";
  const iterations = state.overview.record.iterations;
  body.className = "";
  body.innerHTML = "<div class=\"muted\" style=\"margin-bottom:4px\">" +
    "iteration <select id=\"mod-iteration\">" + Array.from({ length: iterations }, (_, k) => option(k + 1, k + 1, k + 1 === it.iteration)).join("") + "</select> of " + iterations +
    " · depth <select id=\"mod-depth\">" + Array.from({ length: depths }, (_, k) => option(k + 1, k + 1, k + 1 === moduleView.depth)).join("") + "</select>" +
    " · state <select id=\"mod-state\">" + option("peak", "each module's peak", moduleView.state === "peak") + states.map((s) => option(s, s, s === moduleView.state)).join("") + "</select>" +
    " · " + esc(device) + ", bytes by MemTracker's categories (what <code>memtrack modules</code> prints); click a module for its ops</div>" +
    "<table id=\"modules-table\"><thead><tr><th>module</th><th>state</th>" + MODULE_CATEGORIES.map((k) => "<th class=\"n\">" + k + "</th>").join("") +
    "</tr></thead><tbody>" + rows + "</tbody></table>";
  $("mod-iteration").addEventListener("change", (e) => { moduleView.iteration = Number(e.target.value); showModules(); });
  $("mod-depth").addEventListener("change", (e) => { moduleView.depth = Number(e.target.value); drawModules(); });
  $("mod-state").addEventListener("change", (e) => { moduleView.state = e.target.value; drawModules(); });
}
$("modules").addEventListener("click", (ev) => {
  const td = ev.target.closest("td[data-fqn]");
  if (!td) return;
  $("search").value = td.dataset.fqn + ".";
  runSearch();
});
