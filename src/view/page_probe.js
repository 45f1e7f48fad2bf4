// memtrack view, driven by its tests in a headless browser: `#selftest` (zoom, click, search)
// and `#probe=STEP,STEP` (the steps below, then a report of what the page drew: header, marks,
// labels, ticks, legend, hover box, canvas pixels), written into the page as JSON.

function report(id, out) {
  const pre = document.createElement("pre");
  pre.id = id;
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}
const settle = () => new Promise((resolve) => setTimeout(resolve, 60)).then(() => state.pending).then(() => new Promise((r) => setTimeout(r, 60)));

// the canvas read back once (one read: the browser warns about many)
let image = null;
function pixel(x, y) {
  const dpr = window.devicePixelRatio || 1;
  if (!image) image = chart.getContext("2d").getImageData(0, 0, chart.width, chart.height);
  const at = (Math.round(y * dpr) * image.width + Math.round(x * dpr)) * 4;
  return [image.data[at], image.data[at + 1], image.data[at + 2]];
}

// the pointer on the middle of the tallest allocation drawn (the middle of the plot for lines)
function hoverSomething() {
  const rect = chart.getBoundingClientRect();
  let px = PAD_L + plotWidth() / 2, py = padTop() + plotHeight() / 2;
  const L = state.layout;
  if (L) {
    let best = null;
    for (const it of L.drawn) if (!best || it.d.size > best.d.size) best = it;
    if (best) {
      const j = best.d.j0 + ((best.d.j1 - best.d.j0) >> 1);
      px = (L.px[j] + L.px[j + 1]) / 2; py = yToPx(best.bottom[j - best.d.j0] + best.d.size / 2, L.top);
    }
  }
  chart.dispatchEvent(new MouseEvent("mousemove", { clientX: rect.left + px, clientY: rect.top + py, bubbles: true }));
  return { px, py };
}

function step(name, out) {
  const [what, arg] = name.split(":");
  const click = (id) => { const b = $(id); if (!b) throw new Error("no button " + id); b.click(); };
  if (what === "oom") { click("go-oom-" + (arg || 0)); return settle(); }
  if (what === "peak") { click("go-peak"); return settle(); }
  if (what === "reset") { click("reset"); return settle(); }
  if (what === "save") return saveView().then((html) => { out.saved_html = html; });
  if (what === "click") {
    // a click on the middle of the tallest allocation drawn: its stack, the moment there
    const at = hoverSomething(), rect = chart.getBoundingClientRect();
    chart.dispatchEvent(new MouseEvent("click", { clientX: rect.left + at.px, clientY: rect.top + at.py, bubbles: true }));
    return settle().then(() => new Promise((r) => setTimeout(r, 300)));
  }
  if (what === "search") { $("search").value = decodeURIComponent(arg); return runSearch().then(settle); }
  if (what === "colour" || what === "xaxis" || what === "yscale") {
    $(what).value = arg; $(what).dispatchEvent(new Event("change")); return settle().then(settle);
  }
  if (what === "zoomright") {
    const rect = chart.getBoundingClientRect();
    const zoom = () => chart.dispatchEvent(new WheelEvent("wheel", { deltaY: -800, clientX: rect.right - PAD_R - 2, clientY: rect.top + 100, bubbles: true, cancelable: true }));
    zoom(); return settle().then(() => { zoom(); return settle(); });
  }
  if (what === "key") {
    window.dispatchEvent(new KeyboardEvent("keydown", { key: arg, bubbles: true }));
    return settle().then(() => new Promise((r) => setTimeout(r, 300)));
  }
  if (what === "segtl") { $("segtl").checked = true; $("segtl").dispatchEvent(new Event("change")); return settle().then(() => state.segPending).then(settle); }
  if (what === "seghover") {
    // the pointer on the middle of the largest segment drawn
    const S = state.segLayout, rect = segChart.getBoundingClientRect();
    let best = null;
    for (const it of S.L.drawn) if (!best || it.d.size * (it.d.j1 - it.d.j0) > best.d.size * (best.d.j1 - best.d.j0)) best = it;
    if (!best) throw new Error("no segment drawn");
    const j = best.d.j0 + ((best.d.j1 - best.d.j0) >> 1);
    const px = (S.L.px[j] + S.L.px[j + 1]) / 2, py = S.yPx(best.bottom[j - best.d.j0] + best.d.size / 2);
    segChart.dispatchEvent(new MouseEvent("mousemove", { clientX: rect.left + px, clientY: rect.top + py, bubbles: true }));
    out.seghover = { id: best.d.id, size: best.d.size, t0: best.d.t0, facts: state.segTile.facts[S.L.drawn.indexOf(best)], tip: tip.textContent };
    return Promise.resolve();
  }
  if (what === "brush") {
    // drag on the overview strip from one fraction of its plot to another (`brush:0.2-0.4`)
    const [p, q] = arg.split("-").map(Number), rect = strip.getBoundingClientRect();
    const at = (f) => ({ clientX: rect.left + PAD_L + f * plotWidth(), clientY: rect.top + STRIP_H / 2, bubbles: true, buttons: 1 });
    strip.dispatchEvent(new MouseEvent("mousedown", at(p)));
    window.dispatchEvent(new MouseEvent("mousemove", at((p + q) / 2)));
    window.dispatchEvent(new MouseEvent("mousemove", at(q)));
    window.dispatchEvent(new MouseEvent("mouseup", at(q)));
    return settle().then(settle);
  }
  if (what === "hover") {
    const at = hoverSomething();
    return new Promise((r) => setTimeout(r, 400)).then(() => {
      const t = tip.getBoundingClientRect(), c = chart.getBoundingClientRect();
      out.hover = { at, tip: tip.textContent, tipRect: [t.left, t.top, t.right, t.bottom], chartRect: [c.left, c.top, c.right, c.bottom],
        legend: legendEntries(), detail: $("detail").textContent };
    });
  }
  throw new Error("unknown probe step " + name);
}

function legendEntries() {
  return [...$("key").querySelectorAll(".entry")].map((e) => ({ key: e.dataset.key, bytes: e.dataset.bytes === undefined ? null : Number(e.dataset.bytes) }));
}

function runProbe(steps) {
  const out = { steps: [] };
  let chain = state.pending || Promise.resolve();
  for (const s of (steps || "").split(",").filter(Boolean)) chain = chain.then(() => step(s, out)).then(() => out.steps.push(s));
  chain.then(settle).then(() => {
    const t = state.overview.timeline;
    out.kind = KIND;
    out.title = document.title;
    out.facts = $("facts").textContent;
    out.oom_facts = $("oom-facts").textContent;
    out.jumps = [...$("jumps").querySelectorAll("button")].map((b) => b.id);
    out.axis = state.axis; out.colour = state.colour; out.yscale = state.yscale;
    out.view = state.view; out.full = state.full;
    out.status = $("status").textContent; out.search_status = $("search-status").textContent;
    out.hash = location.hash;
    out.hint = $("hint").textContent; out.placeholder = $("search").placeholder; out.note = $("note").textContent;
    out.drawn = state.drawn;
    out.legend = legendEntries();
    out.legend_text = $("key").textContent;
    if (state.layout) { const j = legendSample(); out.legend_total = j >= 0 ? state.tile.samples.total[j] : null; }
    out.search_value = $("search").value;
    out.chart = { width: chart.clientWidth, height: chart.clientHeight, pad_l: PAD_L, pad_r: PAD_R, top: padTop(), bottom: padTop() + plotHeight() };
    out.moment = state.moment;
    out.selected = state.selected;
    out.live_bytes = $("live-total") ? Number($("live-total").dataset.bytes) : null;
    out.segments = state.segments ? state.segments.event : null;
    out.x_is_time = t ? t.x_is_time : null;
    out.op_name = $("op-name") ? $("op-name").textContent : null;
    out.file_kind = $("file-kind") ? $("file-kind").textContent : null;
    out.verdict = $("verdict").textContent; out.verdict_more = $("verdict-more").textContent;
    out.notrace = $("notrace").textContent; out.saved_note = $("saved-note").textContent;
    out.state_note = $("state-note").textContent;
    out.segtl_control = $("segtl-control").style.display !== "none";
    out.modules = $("modules-table") ? [...$("modules-table").querySelectorAll("tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent)) : null;
    out.alloc = { life: $("alloc-life") ? $("alloc-life").textContent : null, category: $("alloc-category") ? $("alloc-category").textContent : null,
      rule: $("alloc-rule") ? $("alloc-rule").textContent : null };
    out.events = $("events").querySelectorAll("tr[data-id]").length;
    out.samples = state.tile && state.tile.samples ? state.tile.samples.x.length : null;
    // what the chart's canvas holds, as one number: two drawings of one view have the same
    if (!image && chart.width) image = chart.getContext("2d").getImageData(0, 0, chart.width, chart.height);
    out.chart_hash = image ? image.data.reduce((h, v) => (Math.imul(h, 31) + v) >>> 0, 7) : null;
    out.drawn_count = state.tile && state.tile.drawn ? state.tile.drawn.length : null;
    // the colours drawn where the marks are
    out.pixels = (state.drawn && state.drawn.marks || []).map((m) => ({ kind: m.kind, rgb: pixel(m.x, padTop() + plotHeight() * 0.25) }));
    out.range_pixels = (state.drawn && state.drawn.ranges || []).slice(0, 3).map((r) => pixel((r.x0 + r.x1) / 2, 4 + r.depth * RANGE_ROW + 2));
    // how tall the drawn allocations and bands are on screen: the smallest visible, the tallest
    if (state.layout) {
      const L = state.layout, hs = [];
      for (const { d } of L.drawn) hs.push(Math.abs(yToPx(0, L.top) - yToPx(d.size, L.top)));
      hs.sort((a, b) => a - b);
      out.heights = { drawn: hs.length, median_px: hs.length ? hs[hs.length >> 1] : null, max_px: hs.length ? hs[hs.length - 1] : null };
    }
    out.strip = state.stripDrawn ? { x0: state.stripDrawn.x0, x1: state.stripDrawn.x1, width: plotWidth(), samples: state.whole.x.length } : null;
    if (state.segTile) {
      const st = state.segTile;
      out.segtl = { drawn: st.drawn.length, facts: st.facts.length, live: st.live_allocations, view: [st.x0, st.x1],
        total_last: st.samples.total[st.samples.total.length - 1], total_max: Math.max(...st.samples.total),
        note: $("segtl-note").textContent, height: segChart.clientHeight,
        // a pixel in the middle of the panel's plot, where segments are stacked from the bottom
        pixel: (() => { const dpr = window.devicePixelRatio || 1, d = segChart.getContext("2d").getImageData(Math.round((PAD_L + plotWidth() / 2) * dpr), Math.round((SEG_H - 22) * dpr), 1, 1).data; return [d[0], d[1], d[2]]; })() };
    } else out.segtl = null;
    out.segtl_shown = $("segtl-wrap").style.display !== "none";
    report("probe", out);
  }).catch((e) => { out.error = String(e && e.message || e); report("probe", out); });
}

// ---- #selftest: the test drives a zoom and a click, and writes what it saw into the page ----
function selftest() {
  const out = {};
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
    report("selftest", out);
  }).catch((e) => { out.error = String(e && e.message || e); report("selftest", out); });
}

load();
