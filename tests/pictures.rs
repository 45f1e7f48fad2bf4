//! Pictures: the stacked timeline (SVG, PNG, HTML, and the HTML page in a real headless
//! browser), PNG output of every drawing command, and refused output names.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

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
    let out = dir.join(name);
    memtrack()
        .args([
            "plot",
            p(&snapshot("cs336_medium_512_training")),
            "--stacked",
            "-o",
            p(&out),
        ])
        .assert()
        .success();
    out
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
    assert!(text.contains(r#""stack":["#));
}

/// A Chromium-family browser: `MEMTRACK_BROWSER`, else the usual names on PATH.
fn browser() -> Option<PathBuf> {
    if let Some(b) = std::env::var_os("MEMTRACK_BROWSER") {
        return Some(PathBuf::from(b));
    }
    ["chromium", "chromium-browser", "google-chrome", "chrome"]
        .iter()
        .find_map(|name| {
            let out = Command::new("sh")
                .args(["-c", &format!("command -v {name}")])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        })
}

/// The page loads in a real browser without a script error, and hovering a band (through the
/// browser's own hit testing: the page's `#selftest` finds a point of band 0 and moves the
/// mouse there) shows its size, site and Python stack.
#[test]
fn stacked_html_hover_works_in_a_headless_browser() {
    let Some(browser) = browser() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs a headless browser for this test: scripts/test.sh installs chromium"
        );
        eprintln!(
            "\n*** SKIPPED stacked_html_hover_works_in_a_headless_browser: no chromium on PATH \
             (apt-get install chromium, or set MEMTRACK_BROWSER) ***\n"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let html = plot_stacked(dir.path(), "t.html");
    let profile = dir.path().join("profile");
    let url = format!("file://{}#selftest", html.display());
    let out = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--window-size=1300,1100",
            "--virtual-time-budget=5000",
            "--enable-logging=stderr",
            "--v=0",
            &format!("--user-data-dir={}", profile.display()),
            "--dump-dom",
            &url,
        ])
        .output()
        .expect("the browser runs");
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
        report.contains("hovered band 0, tip block"),
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
