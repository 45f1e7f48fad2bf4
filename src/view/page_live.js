// memtrack view of a job still being recorded (`view JOURNAL`, src/view/journal.rs): once a
// second, where the job is (`/api/live`) and its ops so far; the chart's range grows with the
// run (a window that reaches the end follows it), a badge says where the job is, and a
// section lists the last finished iteration's modules. Only a journal's overview says
// `live`: any other page stops here once loaded.

const LIVE_EVERY_MS = 1000;

function pollLive() {
  return api("/api/live").then((l) => {
    showLive(l);
    return api("/api/overview").then((ov) => {
      const [a, b] = state.full, [v0, v1] = state.view;
      const whole = v0 <= a && v1 >= b, atEnd = v1 >= b - 1;
      state.overview = ov;
      state.full = fullRange();
      if (whole) state.view = state.full.slice();
      else if (atEnd) state.view = clampView([state.full[1] - (v1 - v0), state.full[1]]);
      const s = ov.series;
      $("facts").textContent = s.ops.toLocaleString() + " ops" +
        (s.peak ? " · peak " + fmtBytes(s.peak[1]) + " allocated at op " + s.peak[0].toLocaleString() : "");
      return refresh();
    }).then(() => { if (!l.ended) setTimeout(pollLive, LIVE_EVERY_MS); });
  }).catch(() => {});
}

function showLive(l) {
  let badge = $("live");
  if (!badge) {
    badge = document.createElement("span");
    badge.id = "live";
    badge.style.cssText = "font-weight: 600; padding: 1px 8px; border-radius: 9px; color: #fff";
    $("facts").after(badge);
  }
  badge.style.background = l.ended ? "#667085" : "#039855";
  badge.textContent = l.ended ? "ended (" + l.ended + ")"
    : "● live · iteration " + l.iteration + " · " + l.phase + (l.module ? " · " + l.module : "") +
      " · " + fmtBytes(l.allocated_now) + " in tensors";
  let sec = $("live-modules");
  if (!sec) {
    sec = document.createElement("section");
    sec.id = "live-modules";
    document.querySelector("main").appendChild(sec);
  }
  const n = (b) => b === null || b === undefined ? "-" : fmtBytes(b);
  sec.innerHTML = "<h2>Modules of the last finished iteration" + (l.modules_iteration ? " (" + l.modules_iteration + ")" : "") + "</h2>" +
    (l.modules.length ? "<table><tr><th>module</th><th class=\"n\">parameters</th><th class=\"n\">peak forward</th><th class=\"n\">peak backward</th></tr>" +
      l.modules.map((m) => "<tr><td>" + esc(m.module) + "</td><td class=\"n\">" + n(m.parameter_bytes) + "</td><td class=\"n\">" +
        n(m.peak_forward_bytes) + "</td><td class=\"n\">" + n(m.peak_backward_bytes) + "</td></tr>").join("") + "</table>"
      : "<div class=\"muted\">none yet: the first iteration is under way</div>");
}

function startLive() {
  if (!state.overview) return setTimeout(startLive, 100);
  if (state.overview.live) setTimeout(pollLive, LIVE_EVERY_MS);
}

if (KIND === "stats") startLive();
