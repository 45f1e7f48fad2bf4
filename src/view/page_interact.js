// memtrack view, what the user does: hover (a box beside the panel, never over it), click (the
// allocation's stack, the moment's live table and allocator state), the arrow keys, zoom, pan,
// search and the switches (src/view/details.rs answers).

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

// The hover box goes beside the panel it speaks of (below it, else above, else at its side),
// following the pointer along the panel: it never hides what the pointer is on.
function showTip(lines, cx, cy, panel) {
  tip.innerHTML = lines.slice(0, 8).map((l) => "<div class=\"" + (l[1] || "") + "\">" + esc(l[0]) + "</div>").join("");
  tip.style.display = "block";
  const r = tip.getBoundingClientRect(), p = (panel || chart).getBoundingClientRect();
  const vw = window.innerWidth, vh = window.innerHeight;
  let x = Math.max(4, Math.min(cx - r.width / 2, vw - r.width - 4)), y;
  if (p.bottom + 6 + r.height <= vh - 4) y = p.bottom + 6;
  else if (p.top - 6 - r.height >= 4) y = p.top - 6 - r.height;
  else {
    // no room above or below: at the side of the panel away from the pointer
    y = Math.max(4, Math.min(cy - r.height / 2, vh - r.height - 4));
    x = cx - p.left > p.width / 2 ? Math.max(4, p.left - r.width - 6) : Math.min(vw - r.width - 4, p.right + 6);
  }
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
  const cursor = h ? h.j : null;
  if (cursor !== state.cursor) { state.cursor = cursor; drawLegend(); }
  if (!h || h.kind === "none") return hideTip();
  const total = state.tile.samples.total[h.j];
  const at = "at " + fmtX(state.tile.samples.x[h.j]) + ": " + fmtBytes(total) + " allocated";
  if (h.kind === "alloc") {
    const d = h.d;
    const cat = categoryName(d.category);
    const lines = [[fmtBytes(d.size) + " · allocation #" + d.id + (cat ? " · " + cat : ""), "big"], [state.tile.sites[d.site]], [lifetime(d)]];
    showTip(lines.concat([["click: whole stack and what is live then", "frame"]]), ev.clientX, ev.clientY, chart);
    const seq = ++hoverSeq;
    detail(d.id).then((det) => {
      if (seq !== hoverSeq || tip.style.display === "none") return;
      if (KIND === "profile") {
        const ctx = [];
        if (det.annotations.length) ctx.push([det.annotations.join(" › "), "frame"]);
        for (const f of det.python.slice(0, 2)) ctx.push([f, "frame"]);
        const op = det.op ? "in " + det.op : det.start_event === null ? "allocated before the trace" : "outside any op";
        showTip(lines.slice(0, 1).concat([[op]], lines.slice(2), ctx, det.freed_in ? [["freed in " + det.freed_in, "frame"]] : []), ev.clientX, ev.clientY, chart);
        return;
      }
      const frames = det.python.slice(0, 3).map((f) => [f, "frame"]);
      const more = det.python.length > 3 || det.native.length ? [["+" + Math.max(0, det.python.length - 3) + " Python, " + det.native.length + " C++ frames (click)", "frame"]] : [];
      showTip(lines.concat(frames, more), ev.clientX, ev.clientY, chart);
    }).catch(() => {});
  } else if (h.kind === "band") {
    const b = h.b;
    const name = state.colour === "category"
      ? (b.category === null ? "allocations of no category" : categoryName(b.category) + " (category)")
      : b.site === null ? "other small allocations (" + b.allocations.toLocaleString() + " in view)" : state.tile.sites[b.site];
    showTip([[fmtBytes(b.bytes[h.j]) + " in allocations under " + fmtBytes(state.tile.min_bytes), "big"], [name],
      [b.allocations.toLocaleString() + " allocations summed in this band"], [at], ["zoom in to see them one by one", "frame"]], ev.clientX, ev.clientY, chart);
  } else {
    showTip([[fmtBytes(h.bytes) + " allocated before the trace", "big"], ["never freed within it: no stack recorded"], [at]], ev.clientX, ev.clientY, chart);
  }
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
  state.selected = id;
  writeFragment();
  sec.innerHTML = "<h2>Allocation #" + id + "</h2><div class=\"muted\">loading…</div>";
  return detail(id).then((d) => {
    if (state.layout) draw();
    if (KIND === "profile") return showProfileDetail(sec, d);
    const py = d.python.map((f) => "<li>" + esc(f) + "</li>").join("") || "<li class=\"muted\">no Python frame</li>";
    const cpp = d.native.map((f) => "<li>" + esc(f) + "</li>").join("");
    const freed = d.freed_by.slice(0, 4).map((f) => "<li>" + esc(f) + "</li>").join("");
    // on the event axis the lifetime is in events; on the time axis in seconds, events beside
    const span = timed() ? { t0: d.start_x, t1: d.end_x } : { t0: d.start_event, t1: d.end_event };
    sec.innerHTML = "<h2>Allocation #" + d.id + ": " + fmtBytes(d.size) + "</h2>" +
      "<div>" + esc(d.site) + "</div>" +
      "<div class=\"muted\" id=\"alloc-life\">" + esc(lifetime(span)) +
      (timed() ? (d.start_event !== null ? " · event " + d.start_event.toLocaleString() : "") +
        (d.end_event !== null ? " → " + d.end_event.toLocaleString() : "") : "") + "</div>" +
      "<div>category: <b id=\"alloc-category\">" + esc(d.category) + "</b>" +
      (d.annotations.length ? " · annotations: " + esc(d.annotations.join(" › ")) : "") + "</div>" +
      (d.rule ? "<div class=\"muted\" id=\"alloc-rule\">rule: " + esc(d.rule) + "</div>" : "") +
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
    "<div class=\"muted\">" + (d.start_event !== null ? "event " + d.start_event : "before the trace") +
    (d.end_event !== null ? " → " + d.end_event : " → live at the end") +
    (d.start_x !== null && d.end_x !== null ? " (" + fmtSeconds(d.end_x - d.start_x, 1e-6) + ")" : "") +
    (d.thread ? " · thread " + esc(d.thread) : "") + "</div>" +
    (d.total_allocated !== null ? "<div class=\"muted\">then: " + fmtBytes(d.total_allocated) + " allocated, " + fmtBytes(d.total_reserved) + " reserved</div>" : "") +
    (d.annotations.length ? "<div>annotations: " + esc(d.annotations.join(" › ")) + "</div>" : "") +
    (d.freed_in ? "<div>freed in: " + esc(d.freed_in) + "</div>" : "") +
    "<h2 style=\"margin-top:8px\">Python functions open (innermost first)</h2><ol class=\"stack\" id=\"python-stack\">" + py + "</ol>";
  return d;
}

// the moment after event `event` (at `x` on the page's axis)
let momentSeq = 0;
function setMoment(event, x) {
  state.moment = { event, x };
  const seq = ++momentSeq;
  writeFragment();
  if (state.layout) draw();
  const sec = $("moment");
  const title = "Live after event " + event.toLocaleString() + (timed() ? " (" + esc(fmtX(x)) + ")" : "");
  sec.innerHTML = "<h2>" + title + "</h2><div class=\"muted\">loading…</div>";
  const live = api("/api/live", { event }).then((r) => {
    if (seq !== momentSeq) return r;
    const rows = r.rows.map((row) => "<tr><td title=\"" + esc(row.location || row.group) + "\">" + esc(row.group) +
      "</td><td class=\"n\">" + fmtBytes(row.at_bytes || 0) + "</td><td class=\"n\">" + (row.at_count || 0).toLocaleString() +
      "</td><td class=\"n\">" + fmtBytes(row.end_bytes) + "</td></tr>").join("");
    sec.innerHTML = "<h2>" + title + ": <span id=\"live-total\" data-bytes=\"" + r.at_bytes + "\">" +
      fmtBytes(r.at_bytes || 0) + "</span> in " + (r.at_count || 0).toLocaleString() + " allocations</h2>" +
      "<table><thead><tr><th>" + (KIND === "profile" ? "op" : "site") + "</th><th class=\"n\">live then</th><th class=\"n\">count</th><th class=\"n\">at the end</th></tr></thead><tbody>" +
      rows + "</tbody></table>" + (r.groups > r.rows.length ? "<div class=\"muted\">" + (r.groups - r.rows.length) + " more sites</div>" : "");
    return r;
  }).catch(fail);
  const list = showEvents(event);
  if (KIND === "profile") return Promise.all([live, list]);
  const seg = api("/api/segments", { event }).then((s) => { if (seq === momentSeq) { state.segments = s; drawSegments(); } return s; }).catch(fail);
  return Promise.all([live, seg, list]);
}

// ---- the event list: each alloc and free in order around the moment, its stack on click ----
const EVENT_ROWS = 60;
function showEvents(event) {
  const sec = $("events");
  const from = Math.max(0, event - EVENT_ROWS / 2);
  return api("/api/events", { from, count: EVENT_ROWS }).then((r) => {
    state.eventList = r;
    const rows = r.rows.map((e) => "<tr data-id=\"" + e.id + "\" class=\"" + (e.event === event ? "now" : "") + "\"><td class=\"n\">" + e.event.toLocaleString() +
      "</td><td>" + e.action + "</td><td class=\"n\">" + fmtBytes(e.size) + "</td><td>" + esc(e.site) +
      "</td><td>" + (e.category ? esc(e.category) : "") + "</td></tr>").join("");
    sec.innerHTML = "<h2>Events " + r.from.toLocaleString() + "–" + Math.max(r.from, r.to - 1).toLocaleString() + " of " + r.events.toLocaleString() +
      " (allocs and frees; click one for its stack)</h2>" +
      "<table><thead><tr><th class=\"n\">event</th><th>action</th><th class=\"n\">size</th><th>" + (KIND === "profile" ? "op" : "site") + "</th><th>" +
      (state.overview.timeline.categories.length ? "category" : "") + "</th></tr></thead><tbody>" + rows + "</tbody></table>" +
      (r.rows.length ? "" : "<div class=\"muted\">no alloc or free among these events</div>");
    return r;
  }).catch(fail);
}
$("events").addEventListener("click", (ev) => {
  const tr = ev.target.closest("tr[data-id]");
  if (tr) showDetail(Number(tr.dataset.id));
});

// the moment at an event known by its index only (a link, the arrow keys): its x first
function momentAtEvent(event) {
  if (!timed()) return setMoment(event, event);
  return api("/api/event", { event }).then((r) => setMoment(event, r.x));
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
    state.segmentRows.push({ y, h: rowH, g, scale });
  });
  $("legend").innerHTML = "<span><i style=\"background:#2e90fa\"></i>allocated</span><span><i style=\"background:#f79009\"></i>awaiting free</span><span><i style=\"background:#eaecf0\"></i>free (cached)</span>";
  $("state-note").textContent = rows + " segments " + (s.event === null ? "when the snapshot was taken" : "after event " + s.event) + ": " + fmtBytes(s.reserved) + " reserved, " +
    fmtBytes(s.allocated) + " in allocated blocks" + (s.blocks_left_out ? " (" + s.blocks_left_out + " blocks not drawn)" : "") +
    "; widths scaled to the largest segment";
}

function onSegmentsHover(ev) {
  const cv = $("segments"), rect = cv.getBoundingClientRect();
  const px = ev.clientX - rect.left, py = ev.clientY - rect.top;
  const row = (state.segmentRows || []).find((r) => py >= r.y && py < r.y + r.h);
  if (!row) return hideTip();
  const off = (px - 2) / row.scale;
  const b = row.g.blocks.find((b) => off >= b.offset && off < b.offset + b.size);
  const lines = [["segment 0x" + row.g.address.toString(16) + " · " + fmtBytes(row.g.total_size) + " · " + row.g.pool + " pool · stream " + row.g.stream, "big"]];
  if (b) {
    lines.push([b.state.replace(/_/g, " ") + " block of " + fmtBytes(b.size) + " at +" + b.offset]);
    if (b.requested !== null) lines.push(["requested " + fmtBytes(b.requested)]);
    if (b.site) lines.push([b.site]);
  }
  showTip(lines, ev.clientX, ev.clientY, cv);
}

// ---- zoom, pan, reset, search, switches, keys ----
function zoomAt(px, factor) {
  if (SAVED) return Promise.resolve(null);
  const [a, b] = state.view, x = pxToX(px);
  const minSpan = timed() ? 1e-6 : 4;
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
chart.addEventListener("mousedown", (ev) => { if (!SAVED) drag = { x: ev.clientX, view: state.view.slice(), moved: false }; });
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
chart.addEventListener("mouseleave", () => { hideTip(); if (state.cursor !== null) { state.cursor = null; if (state.layout) drawLegend(); } });
chart.addEventListener("click", (ev) => { if (!(drag && drag.moved)) onClick(ev); });
chart.addEventListener("dblclick", (ev) => ev.preventDefault());
$("segments").addEventListener("mousemove", onSegmentsHover);
$("segments").addEventListener("mouseleave", hideTip);
$("reset").addEventListener("click", () => { if (!SAVED) { state.view = state.full.slice(); refresh(); } });
window.addEventListener("resize", () => { if (state.tile) { refresh(); drawSegments(); } });
$("colour").addEventListener("change", () => { state.colour = $("colour").value; refresh(); });
$("yscale").addEventListener("change", () => { state.yscale = $("yscale").value; draw(); writeFragment(); });
$("xaxis").addEventListener("change", () => {
  // the window is kept by its events: the tile's first and last sample, read on the other axis
  const t = state.tile, keep = t && t.samples.event.length > 1 && state.view[0] > state.full[0] ? [t.samples.event[0], t.samples.event[t.samples.event.length - 1]] : null;
  state.axis = $("xaxis").value;
  state.full = fullRange();
  state.view = state.full.slice();
  const moment = state.moment;
  state.moment = null;
  const done = keep ? Promise.all(keep.map((e) => timed() ? api("/api/event", { event: e }).then((r) => r.x) : e))
    .then(([a, b]) => { if (b > a) state.view = clampView([a, b]); }) : Promise.resolve();
  return done.then(() => { refresh(); if (moment) momentAtEvent(moment.event); });
});
// ←/→ step the moment by an event (shift: ten), the live table and the allocator state follow
window.addEventListener("keydown", (ev) => {
  if (KIND === "stats" || state.moment === null || ev.target === $("search")) return;
  if (ev.key !== "ArrowLeft" && ev.key !== "ArrowRight") return;
  ev.preventDefault();
  const step = (ev.key === "ArrowLeft" ? -1 : 1) * (ev.shiftKey ? 10 : 1);
  const e = Math.max(0, Math.min(state.overview.timeline.events - 1, state.moment.event + step));
  momentAtEvent(e);
});

let searchTimer = null;
$("search").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(runSearch, 250);
});
function runSearch() {
  const q = $("search").value.trim();
  if (!q) {
    state.hits = null; state.opHits = null; state.query = "";
    $("search-status").textContent = "";
    draw(); writeFragment();
    return Promise.resolve(null);
  }
  if (KIND === "stats") return runOpSearch(q).catch(fail);
  return api("/api/search", { q }).then((r) => {
    state.hits = { stacks: new Set(r.stacks) };
    state.query = q.toLowerCase();
    $("search-status").textContent = "\"" + q + "\": " + r.allocations.toLocaleString() + " allocations, " + fmtBytes(r.bytes) + " in all";
    draw();
    writeFragment();
    return r;
  }).catch(fail);
}
