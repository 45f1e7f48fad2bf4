//! Pictures: the stacked timeline (SVG, PNG, HTML, and the HTML page in a real headless
//! browser), PNG output of every drawing command, and refused output names.

mod common;

use std::path::{Path, PathBuf};

use common::{fixture, memtrack};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn snapshot(name: &str) -> PathBuf {
    fixture(&format!("snapshots/{name}.pickle"))
}

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.starts_with(PNG_MAGIC), "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |o: usize| u32::from_be_bytes(bytes[o..o + 4].try_into().unwrap());
    (be(16), be(20))
}

#[test]
fn stacked_svg_has_bands_peak_and_ooms() {
    let dir = tempfile::tempdir().unwrap();
    let svg = plot_stacked(dir.path(), "t.svg");
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    let bands: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("band"))
        .collect();
    // 20 bands by default, and the grey rest
    assert_eq!(bands.len(), 21, "{}", bands.len());
    assert!(bands
        .iter()
        .any(|b| b.attribute("data-band") == Some("other")));
    // the peak label says what `summary` says
    let summary = common::json_out(&[
        "summary",
        p(&snapshot("cs336_medium_512_training")),
        "--format",
        "json",
    ]);
    let peak = summary["devices"][0]["peak_allocated"]["bytes"]
        .as_f64()
        .unwrap();
    let label = format!(">peak {:.1}GiB<", peak / (1u64 << 30) as f64);
    assert!(text.contains(&label), "no {label} in the SVG");

    // an OOM is marked; several devices need --device
    let multi = snapshot("synthetic_multi_device_oom");
    memtrack()
        .args(["plot", p(&multi), "--stacked", "-o", p(&svg)])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--device"));
    memtrack()
        .args([
            "plot",
            p(&multi),
            "--stacked",
            "--device",
            "0",
            "--by",
            "site",
            "-o",
            p(&svg),
        ])
        .assert()
        .success();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains(">OOM"), "OOM not marked");
}

#[test]
fn png_is_a_real_png_for_every_drawing_command() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot("cs336_medium_512_training");
    let stats = fixture("tracker/synthetic_2000_ops.pkl");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["plot", p(&snap), "--stacked"], "stacked.png"),
        (vec!["plot", p(&snap)], "snap.png"),
        (vec!["plot", p(&stats)], "stats.png"),
        (vec!["segments", p(&snap)], "segments.png"),
    ];
    for (args, name) in cases {
        let out = dir.path().join(name);
        memtrack()
            .args(&args)
            .args(["-o", p(&out)])
            .assert()
            .success();
        let bytes = std::fs::read(&out).unwrap();
        let (w, h) = png_size(&bytes);
        assert!(w >= 600 && h >= 300, "{name}: {w}x{h}");
        // rendered, not blank: more than one colour in the pixels' compressed stream
        assert!(bytes.len() > 10_000, "{name}: {} bytes", bytes.len());
    }
}

#[test]
fn unknown_picture_names_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot("cs336_medium_512_training");
    let stats = fixture("tracker/synthetic_2000_ops.pkl");
    for (args, name, says) in [
        (vec!["plot", p(&snap)], "t.jpg", ".svg, .png"),
        (vec!["plot", p(&snap), "--stacked"], "t.pdf", ".html"),
        (vec!["plot", p(&stats)], "t.html", "--stacked"),
        (
            vec!["plot", p(&stats), "--stacked"],
            "t.svg",
            "allocator snapshot",
        ),
    ] {
        let out = dir.path().join(name);
        memtrack()
            .args(&args)
            .args(["-o", p(&out)])
            .assert()
            .code(2)
            .stderr(predicates::str::contains(says));
        assert!(!out.exists(), "{name} was written");
    }
}

/// `plot --stacked` of a real training snapshot into `dir/name`.
fn plot_stacked(dir: &Path, name: &str) -> PathBuf {
    stacked_of(dir, "cs336_medium_512_training", &[], name)
}

#[test]
fn stacked_html_is_self_contained() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(plot_stacked(dir.path(), "t.html")).unwrap();
    assert!(text.starts_with("<!DOCTYPE html>"));
    // no network: the only URL is the SVG namespace
    let urls: Vec<&str> = text
        .match_indices("http")
        .map(|(i, _)| &text[i..(i + 40).min(text.len())])
        .filter(|u| !u.starts_with("http://www.w3.org/2000/svg"))
        .collect();
    assert!(urls.is_empty(), "{urls:?}");
    assert!(!text.contains("<script src") && !text.contains("<link"));
    // the bands' details are in the page, with their stacks
    assert!(text.contains(r#"<script id="details" type="application/json">"#));
    // Python frames listed, C++ frames only counted (the hover box folds them)
    assert!(text.contains(r#""python":["#));
    assert!(text.contains(r#""native":"#));
}

/// The page loads in a real browser without a script error, and hovering a band (through the
/// browser's own hit testing: the page's `#selftest` finds a point of band 0 and moves the
/// mouse there) shows its size, site and Python stack.
#[test]
fn stacked_html_hover_works_in_a_headless_browser() {
    let Some(browser) = common::browser_or_skip("stacked_html_hover_works_in_a_headless_browser")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let html = plot_stacked(dir.path(), "t.html");
    let profile = dir.path().join("profile");
    let url = format!("file://{}#selftest", html.display());
    let out = common::headless(&browser, &profile, 5_000, "--dump-dom", &url);
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        !log.contains("Uncaught"),
        "the page has a script error:\n{log}"
    );
    let start = dom
        .find(r#"<pre id="selftest">"#)
        .unwrap_or_else(|| panic!("the page's script did not run to its end:\n{log}"));
    let report = &dom[start..];
    let report = &report[..report.find("</pre>").unwrap()];
    assert!(
        report.contains("hovered band ") && report.contains(", tip block"),
        "hover did not show the tip: {report}"
    );
    // the tip names the band's size, its site and its Python stack
    assert!(report.contains("iB"), "{report}");
    assert!(report.contains(".py:"), "{report}");
}

/// The y axis' numeric tick labels: right-aligned texts left of the plot.
fn y_tick_labels(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter(|n| n.attribute("x").and_then(|x| x.parse::<f64>().ok()) < Some(100.0))
        .filter(|n| n.attribute("text-anchor") == Some("end"))
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .filter(|t| !t.is_empty() && t.parse::<f64>().is_ok())
        .collect()
}

#[test]
fn y_ticks_share_one_number_of_decimals() {
    let dir = tempfile::tempdir().unwrap();
    for (input, name) in [
        (fixture("tracker/synthetic_2000_ops.pkl"), "a.svg"),
        (snapshot("synthetic_multi_device_oom"), "b.svg"),
        (snapshot("cs336_medium_512_training"), "c.svg"),
    ] {
        let out = dir.path().join(name);
        memtrack()
            .args(["plot", p(&input), "-o", p(&out)])
            .assert()
            .success();
        let labels = y_tick_labels(&std::fs::read_to_string(&out).unwrap());
        assert!(labels.len() >= 4, "{name}: {labels:?}");
        let decimals = |s: &str| s.split('.').nth(1).map_or(0, str::len);
        assert!(
            labels.iter().all(|l| decimals(l) == decimals(&labels[0])),
            "{name}: {labels:?}"
        );
    }
}

#[test]
fn degenerate_inputs_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    // a MemoryTracker file from a CPU run: every sample is 0 bytes
    let zero = fixture("tracker/memory_tracker_cpu_torch2.15.0.pkl");
    let out = dir.path().join("z.svg");
    memtrack()
        .args(["plot", p(&zero), "-o", p(&out)])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("every sample is 0 bytes"));
    assert!(!out.exists());
    // a stats file without a single op
    let empty = dir.path().join("empty.pkl");
    memtrack::formats::tracker::write(&memtrack::model::TrackerStats::default(), &empty).unwrap();
    memtrack()
        .args(["plot", p(&empty), "-o", p(&out)])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("no ops recorded"));
    assert!(!out.exists());
}

#[test]
fn segments_picture_labels_its_rows_at_400_segments() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.svg");
    memtrack()
        .args([
            "segments",
            p(&snapshot("cs336_medium_512_training")),
            "-o",
            p(&out),
        ])
        .assert()
        .success();
    let svg = std::fs::read_to_string(&out).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    // runs of equal-size segments are named in the left column: "20.00 MiB × 164"
    let runs: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .filter(|t| t.contains(" × "))
        .map(str::to_string)
        .collect();
    assert!(runs.len() >= 4, "{runs:?}");
    let counted: usize = runs
        .iter()
        .filter_map(|r| r.rsplit(" × ").next()?.parse::<usize>().ok())
        .sum();
    assert!((300..=400).contains(&counted), "{runs:?}");
}

/// The area of an SVG path made of `M x y`, `H x`, `V y` and `Z` (the bands' paths), by the
/// shoelace formula over each closed subpath.
fn path_area(d: &str) -> f64 {
    let mut total = 0.0;
    for sub in d.split('M').filter(|s| !s.trim().is_empty()) {
        let mut points: Vec<(f64, f64)> = Vec::new();
        let mut rest = sub;
        let number = |s: &str| -> (f64, usize) {
            let s2 = s.trim_start();
            let skip = s.len() - s2.len();
            let end = s2
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
                .unwrap_or(s2.len());
            (s2[..end].parse().unwrap(), skip + end)
        };
        // the subpath starts with the M's two numbers
        let (a, n) = number(rest);
        rest = &rest[n..];
        let (b, n) = number(rest);
        rest = &rest[n..];
        let (mut x, mut y) = (a, b);
        points.push((x, y));
        while let Some(c) = rest.chars().next() {
            rest = &rest[c.len_utf8()..];
            match c {
                'H' | 'V' => {
                    let (v, n) = number(rest);
                    rest = &rest[n..];
                    if c == 'H' {
                        x = v
                    } else {
                        y = v
                    }
                    points.push((x, y));
                }
                _ => {}
            }
        }
        let n = points.len();
        let twice: f64 = (0..n)
            .map(|i| {
                let (p, q) = (points[i], points[(i + 1) % n]);
                p.0 * q.1 - q.0 * p.1
            })
            .sum();
        total += twice.abs() / 2.0;
    }
    total
}

/// `plot --stacked` of `name` (a snapshot fixture) with `extra` arguments into `dir/out`.
fn stacked_of(dir: &Path, name: &str, extra: &[&str], out: &str) -> PathBuf {
    let out = dir.join(out);
    memtrack()
        .args(["plot", p(&snapshot(name)), "--stacked", "-o", p(&out)])
        .args(extra)
        .assert()
        .success();
    out
}

/// The legend names every band once (the default bands are sites; bands of allocations made
/// at one site say when each was made), the grey rest is a few allocations, and every OOM and
/// annotation line has a label and a tooltip with its whole text. A real GPT-2 capture: its
/// nine largest allocations come from one line (module.py:1097:<lambda>) and its optimizer
/// steps are annotated.
#[test]
fn stacked_legend_is_distinct_and_every_marker_is_labelled() {
    let dir = tempfile::tempdir().unwrap();
    for (extra, name) in [
        (&[][..], "site.svg"),
        (&["--by", "allocation"][..], "alloc.svg"),
    ] {
        let svg = stacked_of(dir.path(), "h100_gpt2_train_exit", extra, name);
        let text = std::fs::read_to_string(&svg).unwrap();
        let doc = roxmltree::Document::parse(&text).unwrap();
        let sites: Vec<&str> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("legend-site"))
            .filter_map(|n| n.text())
            .collect();
        assert_eq!(sites.len(), 21, "{name}: 20 bands and the rest: {sites:?}");
        let mut unique = sites.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), sites.len(), "{name}: repeated: {sites:?}");
        let marks: Vec<_> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("mark"))
            .filter(|n| n.children().any(|c| c.has_tag_name("line")))
            .collect();
        assert!(marks.len() >= 10, "{name}: {} marker lines", marks.len());
        for m in &marks {
            let label = m
                .descendants()
                .find(|c| c.has_tag_name("text"))
                .and_then(|t| t.text())
                .unwrap_or("");
            let title = m
                .children()
                .find(|c| c.has_tag_name("title"))
                .and_then(|t| t.text())
                .unwrap_or("");
            assert!(!label.trim().is_empty(), "{name}: a marker without a label");
            assert!(!title.is_empty(), "{name}: {label:?} has no tooltip");
        }
        let annotations = marks
            .iter()
            .filter(|m| {
                m.children()
                    .any(|c| c.text().is_some_and(|t| t.contains("Optimizer.")))
            })
            .count();
        assert!(annotations >= 10, "{name}: {annotations} annotation lines");
        if extra.is_empty() {
            // by site the grey band is a sliver of the picture, not most of it (it was 80%
            // by allocation); backward allocations, made with no Python frame, are sites of
            // their own, one per autograd node
            let area = |band: &str| -> f64 {
                (doc.descendants())
                    .filter(|n| n.attribute("class") == Some("band"))
                    .filter(|n| band.is_empty() || n.attribute("data-band") == Some(band))
                    .map(|n| path_area(n.attribute("d").unwrap()))
                    .sum()
            };
            let grey = area("other") / area("");
            assert!(
                grey < 0.05,
                "the grey band is {:.1}% of the picture",
                grey * 100.0
            );
            assert!(
                sites.iter().any(|s| s.starts_with("<backward ")),
                "no band named by its autograd node: {sites:?}"
            );
            assert!(!sites.iter().any(|s| s.starts_with("??")), "{sites:?}");
        } else {
            assert!(sites.iter().any(|s| s.contains("allocated at event")));
        }
    }
}

/// Runs `probe` (JavaScript that fills `<pre id="probe">`) in `page` (HTML; an SVG file is
/// inlined into a page) in the headless browser; its text, or None without a browser.
fn probe_in_browser(page: &Path, probe: &str, dir: &Path) -> Option<String> {
    let browser = common::browser_or_skip("a browser check")?;
    let text = std::fs::read_to_string(page).unwrap();
    // in a scope of its own: the page's script has top-level names too
    let script = format!("<script>\n(() => {{\n{probe}\n}})();\n</script>");
    let html = if text.starts_with("<!DOCTYPE html>") {
        text.replace("</body>", &format!("{script}</body>"))
    } else {
        let svg = &text[text.find("<svg").unwrap()..];
        format!("<!DOCTYPE html><html><body style=\"margin:0\">{svg}{script}</body></html>")
    };
    let probed = dir.join("probed.html");
    std::fs::write(&probed, html).unwrap();
    let out = common::headless(
        &browser,
        &dir.join("profile"),
        5_000,
        "--dump-dom",
        &format!("file://{}", probed.display()),
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!log.contains("Uncaught"), "a script error:\n{log}");
    let start = dom
        .find(r#"<pre id="probe">"#)
        .unwrap_or_else(|| panic!("the probe did not run to its end:\n{log}"));
    let report = &dom[start + r#"<pre id="probe">"#.len()..];
    Some(report[..report.find("</pre>").unwrap()].replace("&amp;", "&"))
}

/// Hovered near the right edge, the box with a band's details stays in the window, is short
/// (size and site first, a few Python frames, C++ frames counted) and names no C++ frame;
/// the chart's text cannot be selected, a double-click undoes a zoom, and no two labels of
/// marker lines overlap as the browser lays them out.
#[test]
fn stacked_html_hover_box_is_compact_and_on_screen() {
    let dir = tempfile::tempdir().unwrap();
    let html = stacked_of(dir.path(), "h100_gpt2_train_exit", &[], "t.html");
    let probe = r#"
const out = document.createElement('pre'); out.id = 'probe';
const tip = document.getElementById('tip'), svg = document.querySelector('svg');
const report = [];
// a point of a band 160 px or less from the window's right edge
let hit = null;
for (const band of document.querySelectorAll('path.band')) {
  if (band.dataset.band === 'other') continue;
  const r = band.getBoundingClientRect();
  for (let i = 79; i >= 1 && !hit; i--) for (let j = 1; j < 40 && !hit; j++) {
    const x = r.left + r.width * i / 80, y = r.top + r.height * j / 40;
    if (x > window.innerWidth - 160 && document.elementFromPoint(x, y) === band) hit = [band, x, y];
  }
  if (hit) break;
}
if (!hit) report.push('FAIL no band near the right edge');
else {
  hit[0].dispatchEvent(new MouseEvent('mousemove', { clientX: hit[1], clientY: hit[2], bubbles: true }));
  const t = tip.getBoundingClientRect();
  if (t.left < 0 || t.top < 0 || t.right > window.innerWidth || t.bottom > window.innerHeight)
    report.push('FAIL tip off screen: ' + JSON.stringify([t.left, t.top, t.right, t.bottom, window.innerWidth, window.innerHeight]));
  const lines = tip.textContent.split('\n');
  if (lines.length > 12) report.push('FAIL ' + lines.length + ' lines');
  if (!/iB/.test(lines[0]) || !/\.py:\d+:/.test(lines[0])) report.push('FAIL first line ' + lines[0]);
  if (/::|\.cpp:/.test(tip.textContent)) report.push('FAIL a C++ frame shown');
  if (!/C\+\+ frames not shown/.test(tip.textContent)) report.push('FAIL C++ frames not counted');
  report.push('tip:\n' + tip.textContent);
}
if (getComputedStyle(svg).userSelect !== 'none') report.push('FAIL the chart text is selectable');
// zoom with the wheel, then a double-click resets it
const data = document.getElementById('data');
const r = svg.getBoundingClientRect();
svg.dispatchEvent(new WheelEvent('wheel', { deltaY: -100, clientX: r.left + r.width / 2, clientY: r.top + 300, bubbles: true, cancelable: true }));
const zoomed = data.getAttribute('transform') || '';
svg.dispatchEvent(new MouseEvent('dblclick', { bubbles: true }));
const reset = data.getAttribute('transform') || '';
if (!/scale\((?!1 )/.test(zoomed)) report.push('FAIL the wheel did not zoom: ' + zoomed);
if (!/scale\(1 1\)/.test(reset)) report.push('FAIL double-click did not reset: ' + reset);
// marker labels: laid out apart
const boxes = [...document.querySelectorAll('.mark-label')].map(t => t.getBoundingClientRect());
if (boxes.length < 10) report.push('FAIL ' + boxes.length + ' marker labels');
for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
  const a = boxes[i], b = boxes[j];
  if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) report.push('FAIL labels ' + i + ' and ' + j + ' overlap');
}
out.textContent = report.join('\n');
document.body.appendChild(out);
"#;
    let Some(report) = probe_in_browser(&html, probe, dir.path()) else {
        return;
    };
    assert!(!report.contains("FAIL"), "{report}");
    assert!(report.contains("tip:"), "{report}");
}

/// A snapshot's plot names its annotation ranges without two names overlapping each other or
/// any other text, as the browser draws them, and keeps each whole name in a tooltip.
#[test]
fn snapshot_plot_annotation_labels_do_not_overlap() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "h100_gpt2_train_exit",
        "cs336_medium_512_training",
        "synthetic_step_leak",
    ] {
        let out = dir.path().join(format!("{name}.svg"));
        memtrack()
            .args(["plot", p(&snapshot(name)), "-o", p(&out)])
            .assert()
            .success();
        let text = std::fs::read_to_string(&out).unwrap();
        let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
        let labels: Vec<_> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("span-label"))
            .collect();
        assert!(!labels.is_empty(), "{name}: no annotation named");
        for l in &labels {
            let title = l.children().find(|c| c.has_tag_name("title")).unwrap();
            let shown = l.children().find(|c| c.has_tag_name("text")).unwrap();
            let (title, shown) = (title.text().unwrap(), shown.text().unwrap());
            let kept = shown.trim_end_matches('…');
            assert!(title.starts_with(kept), "{name}: {shown:?} of {title:?}");
        }
        let probe = r#"
const out = document.createElement('pre'); out.id = 'probe';
const report = [];
const labels = [...document.querySelectorAll('.span-label text')];
const others = [...document.querySelectorAll('text')].filter(t => !t.closest('.span-label') && t.textContent.trim());
const box = t => t.getBoundingClientRect();
const meet = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
labels.forEach((l, i) => {
  for (const o of labels.slice(i + 1).concat(others))
    if (meet(box(l), box(o))) report.push('FAIL ' + JSON.stringify(l.textContent) + ' overlaps ' + JSON.stringify(o.textContent.trim()));
});
report.push(labels.length + ' labels');
out.textContent = report.join('\n');
document.body.appendChild(out);
"#;
        let Some(report) = probe_in_browser(&out, probe, dir.path()) else {
            return;
        };
        assert!(!report.contains("FAIL"), "{name}: {report}");
    }
}
