// memtrack view, a view saved as one HTML file: the page itself with the server's answers that
// drew the current view inside it (`<script id="memtrack-saved">`). Opened from the file, with
// no server and no network, the page answers its own requests from those (core.js's api()):
// the same chart, legend, selection, moment and tables. Zoom, search and clicks past what was
// saved need `memtrack view` and the capture.

// the last answers, by what they answer (a tile by its role, not its pixel size), so that
// saving asks the server again only for what it does not hold
const RECENT = 64;
const recent = new Map();
// while saving: the answers the view is drawn from
let capturing = null;

// a request's key: its path and parameters; a tile's by which chart it draws (the window is in
// the saved link; the pixels are the opening browser's)
function answerKey(path, params) {
  const p = Object.assign({}, params || {});
  if (path === "/api/tile" || path === "/api/segment_tile" || path === "/api/series") {
    const role = path === "/api/tile" && Number(p.height) === STRIP_H ? "strip" : "chart";
    return path + "|" + role + "|" + (p.axis || "") + "|" + (p.by || "");
  }
  delete p.width; delete p.height;
  return path + "|" + new URLSearchParams(Object.entries(p).map(([k, v]) => [k, String(v)]).sort()).toString();
}

function remember(key, answer) {
  if (capturing) capturing.set(key, answer);
  recent.delete(key);
  recent.set(key, answer);
  if (recent.size > RECENT) recent.delete(recent.keys().next().value);
}

// the view drawn again, each answer it asks for captured (those held are not asked again):
// what the saved page asks for as it opens
function captureView() {
  capturing = new Map();
  const steps = [api("/api/overview")];
  if (KIND === "snapshot" && state.overview.trace === false) {
    steps.push(api("/api/segments", { event: "end" }));
  } else {
    // (the strip's tile is kept while the axis and width stay: asked again here)
    state.whole = null;
    steps.push(refresh());
    // (the saved page opens on the last iteration's modules, whichever is shown)
    if (KIND === "stats") steps.push(showModules(), api("/api/modules", {}));
    if (state.query) steps.push(runSearch());
    // (an allocation's details are asked once a page and kept: asked again here)
    if (KIND !== "stats" && state.selected !== null) steps.push(api("/api/alloc", { id: state.selected }));
    if (KIND !== "stats" && state.moment !== null) steps.push(momentAtEvent(state.moment.event));
  }
  return Promise.all(steps.map((p) => Promise.resolve(p).catch(() => null))).then(() => {
    const got = capturing;
    capturing = null;
    return got;
  });
}

// the saved page: this page's HTML (asked of the server again, as it was first served) with
// the answers in it
function saveView() {
  if (SAVED) return Promise.reject(new Error("this is a saved view already"));
  const page = fetch(location.pathname + location.search).then((r) => r.text());
  return Promise.all([page, captureView()]).then(([html, answers]) => {
    const hash = new URLSearchParams(location.hash.replace(/^#/, ""));
    hash.delete("probe");
    const data = {
      saved: new Date().toISOString(), title: document.title, hash: hash.toString(),
      answers: Object.fromEntries(answers),
    };
    // `<` never appears raw in the script element, so nothing in the data can end it
    const json = JSON.stringify(data).replace(/[<]/g, "\\u003c");
    return html.replace(/<body[^>]*>/, (body) => body + "\n<script type=\"application/json\" id=\"memtrack-saved\">" + json + "</script>");
  });
}

function downloadView() {
  return saveView().then((html) => {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([html], { type: "text/html" }));
    a.download = document.title.split(" · ")[0].replace(/[^\w.-]+/g, "_") + ".view.html";
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
    $("status").textContent = "saved " + a.download + " (" + fmtBytes(html.length) + "): it opens in any browser, no server needed";
    return html;
  }).catch(fail);
}

// a saved view says so, and what it cannot do
function setupSaved() {
  $("saved-note").textContent = "A saved view (" + SAVED.saved.replace("T", " ").replace(/\..*/, "") + " UTC): it shows what was on screen when it was saved. " +
    "Zooming, searching and clicking further need the capture: memtrack view FILE.";
  for (const id of ["save", "reset", "search"]) $(id).disabled = true;
}

$("save").addEventListener("click", downloadView);
