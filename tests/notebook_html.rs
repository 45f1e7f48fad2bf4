//! What a notebook cell shows of `memtrack.record`'s Recording (`_repr_html_`), from real torch:
//! the picture first, scaled to the cell's width (no scroller, the legend whole in a 1000 px
//! window where the fixed 1200 px SVG cut it), the summary after it in a `<details>`.

mod common;

use std::process::Command;

#[test]
fn a_recording_in_a_narrow_cell_shows_its_whole_picture_before_its_summary() {
    let Some(py) = common::python_with_torch() else {
        eprintln!("skipped: no Python with torch");
        return;
    };
    let Some(browser) = common::browser_or_skip("a_recording_in_a_narrow_cell") else {
        return;
    };
    let root = common::root();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(py)
        .env("PYTHONPATH", root.join("python"))
        .env("MEMTRACK_BINARY", env!("CARGO_BIN_EXE_memtrack"))
        .arg(root.join("tests/py/notebook_html.py"))
        .arg(dir.path())
        .arg(root.join("examples"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "notebook_html.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = dir.path().join("cell.html");
    let shown = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--window-size=1000,900",
            "--virtual-time-budget=5000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&shown.stdout);
    let start = dom.find(r#"<pre id="report">"#).expect("the page reported") + 17;
    let text = &dom[start..];
    let text = text[..text.find("</pre>").unwrap()].replace("&quot;", "\"");
    let r: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    let width = f(&r["viewport"][0]);
    assert!(width <= 1000.0, "{r}");
    // no horizontal scroller: the page is no wider than the window, the picture fills it
    assert!(f(&r["scroll_width"]) <= width, "{r}");
    let svg = &r["svg"];
    assert!(
        f(&svg[2]) <= width + 0.5 && f(&svg[2]) - f(&svg[0]) > 0.9 * width,
        "{svg}"
    );
    // every label inside the window, the legend's (the series, `allocated …`) among them
    let texts = r["texts"].as_array().unwrap();
    assert!(
        texts
            .iter()
            .any(|t| t["text"].as_str().unwrap().starts_with("allocated")),
        "the legend names the series: {r}"
    );
    for t in texts {
        let b = &t["box"];
        assert!(f(&b[0]) >= 0.0 && f(&b[2]) <= width, "{t} cut at {width}");
    }
    // the picture, then the summary in a details element that can be folded
    let order: Vec<&str> = (r["order"].as_array().unwrap().iter())
        .map(|o| o.as_str().unwrap())
        .collect();
    let picture = order.iter().position(|&t| t == "div").expect("the picture");
    let details = order
        .iter()
        .position(|&t| t == "details")
        .expect("the summary");
    assert!(picture < details, "{order:?}");
    assert_eq!(r["details_open"], true);
    assert_eq!(r["summary_has_peak"], true, "{r}");
}
