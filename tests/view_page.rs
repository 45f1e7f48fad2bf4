//! `memtrack view`'s page in a real headless browser, read back for what it drew: the event
//! axis and its round ticks, the annotation ranges and their labels, the legend by category,
//! the OOM in the header and in sight, the URL fragment that reproduces a view, each input
//! kind's own words, the hover box beside the chart. The page's `#probe=STEPS` runs the steps
//! and writes what the last draw put where (canvas pixels included) into the page.

mod common;

use std::path::{Path, PathBuf};

use common::fixture;
use common::viewer::{report, Viewer};

/// The probe's report for `file` opened at `#FRAGMENT` (`probe=STEPS` in it).
fn probe(browser: &Path, v: &Viewer, fragment: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let r = report(browser, dir.path(), &v.url, fragment, "probe");
    assert!(r["error"].is_null(), "the probe failed: {r}");
    r
}

fn gpt() -> PathBuf {
    fixture("snapshots/h100/gpt_default.pickle")
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("a number: {v}"))
}

/// Whether every mark and its label lie inside the plot.
fn inside(r: &serde_json::Value, m: &serde_json::Value) {
    let (left, right) = (
        f(&r["chart"]["pad_l"]),
        f(&r["chart"]["width"]) - f(&r["chart"]["pad_r"]),
    );
    assert!(
        f(&m["x"]) >= left && f(&m["x"]) <= right,
        "{m} outside {left}..{right}"
    );
    if !m["l0"].is_null() {
        assert!(
            f(&m["l0"]) >= left && f(&m["l1"]) <= right,
            "label {m} outside {left}..{right}"
        );
    }
}

/// The GPT-2 capture: x is the event index (the steps spread out), ticks at round values,
/// the 24 annotation ranges drawn and labelled where they fit, colours by category with a
/// legend whose bytes add up to the allocated bytes at the sample, the hover box off the chart.
#[test]
fn a_snapshot_spreads_its_events_draws_its_ranges_and_keys_its_colours() {
    let Some(browser) = common::browser_or_skip("a_snapshot_spreads_its_events") else {
        return;
    };
    let v = Viewer::start(&gpt());
    let overview = v.json("/api/overview");
    let events = overview["timeline"]["events"].as_u64().unwrap();
    let ranges = overview["timeline"]["ranges"].as_array().unwrap().len();
    assert_eq!(ranges, 24, "11 optimizer steps and zero_grads: {overview}");
    let r = probe(&browser, &v, "probe=hover");
    assert_eq!(r["axis"], "event");
    assert_eq!(f(&r["full"][0]), 0.0);
    assert!(f(&r["full"][1]) >= (events - 1) as f64);
    // round ticks, more than three of them
    let xt = r["drawn"]["xticks"].as_array().unwrap();
    assert!(xt.len() >= 4, "{xt:?}");
    let step = f(&xt[1]["v"]) - f(&xt[0]["v"]);
    for t in xt {
        assert_eq!(f(&t["v"]) % step, 0.0, "{t}");
        assert!(!t["label"].as_str().unwrap().contains('.'), "{t}");
    }
    let yt = r["drawn"]["yticks"].as_array().unwrap();
    assert!(yt.len() >= 3);
    let ystep = f(&yt[1]["v"]);
    assert_eq!(ystep.log2().fract(), 0.0, "a power of two: {ystep}");
    assert!(yt.iter().all(|t| f(&t["v"]) % ystep == 0.0), "{yt:?}");
    // every range drawn, one at least labelled, the bar coloured
    let drawn = r["drawn"]["ranges"].as_array().unwrap();
    assert_eq!(drawn.len(), ranges);
    assert!(
        drawn
            .iter()
            .any(|d| !d["label"].as_str().unwrap().is_empty()),
        "{drawn:?}"
    );
    for px in r["range_pixels"].as_array().unwrap() {
        assert_ne!(
            px,
            &serde_json::json!([255, 255, 255]),
            "a range bar is drawn: {px}"
        );
        assert_ne!(
            px,
            &serde_json::json!([0, 0, 0]),
            "a range bar is drawn: {px}"
        );
    }
    // on the event axis the three steps spread: the 11 optimizer ranges span a wide part of the plot
    let first = f(&drawn[0]["x0"]);
    let last = f(&drawn[drawn.len() - 1]["x1"]);
    assert!(
        last - first > 0.6 * f(&r["chart"]["width"]),
        "{first}..{last}"
    );
    // the legend: categories, what each holds under the cursor, adding up to the sample
    assert_eq!(r["colour"], "category");
    let legend = r["hover"]["legend"].as_array().unwrap();
    let categories = overview["timeline"]["categories"].as_array().unwrap();
    assert!(legend.len() >= 3, "{legend:?}");
    for e in legend {
        let k = &e["key"];
        assert!(
            categories.contains(k) || k.as_str().unwrap().starts_with('('),
            "{k} is a category"
        );
    }
    let sum: f64 = legend.iter().map(|e| f(&e["bytes"])).sum();
    assert_eq!(sum, f(&r["legend_total"]), "{legend:?}");
    // the hover box names the allocation and stays off the chart
    let h = &r["hover"];
    assert!(h["tip"].as_str().unwrap().contains("allocation #"), "{h}");
    let (t, c) = (&h["tipRect"], &h["chartRect"]);
    let overlap =
        f(&t[0]) < f(&c[2]) && f(&t[2]) > f(&c[0]) && f(&t[1]) < f(&c[3]) && f(&t[3]) > f(&c[1]);
    assert!(!overlap, "the hover box covers the chart: {t} over {c}");
    // the peak is marked inside the plot
    let marks = r["drawn"]["marks"].as_array().unwrap();
    let peak = marks
        .iter()
        .find(|m| m["kind"] == "peak")
        .expect("the peak is marked");
    inside(&r, peak);

    // wall time is a switch; colouring by site names sites in the legend
    let r = probe(&browser, &v, "probe=xaxis:time,colour:site");
    assert_eq!(r["axis"], "time");
    assert!(f(&r["full"][1]) < 100.0, "seconds: {}", r["full"]);
    assert_eq!(r["drawn"]["ranges"].as_array().unwrap().len(), ranges);
    assert!(r["drawn"]["xticks"].as_array().unwrap().len() >= 4);
    let legend = r["legend"].as_array().unwrap();
    assert!(
        legend
            .iter()
            .any(|e| e["key"].as_str().unwrap().contains(".py:")),
        "{legend:?}"
    );
    assert!(
        r["hash"].as_str().unwrap().contains("x=time")
            && r["hash"].as_str().unwrap().contains("c=site")
    );
    assert_eq!(v.interrupt(), 0);
}

/// An OOM capture: the header names the OOM, zooming twice at the right edge keeps it in the
/// window, its button goes there and sets the moment, and its red line and label are inside
/// the plot.
#[test]
fn the_oom_is_named_in_the_header_and_kept_in_sight() {
    let Some(browser) = common::browser_or_skip("the_oom_is_named_in_the_header") else {
        return;
    };
    let v = Viewer::start(&fixture("snapshots/h100/oom_default.pickle"));
    let overview = v.json("/api/overview");
    let oom = &overview["timeline"]["ooms"][0];
    let at = oom["index"].as_u64().unwrap();
    let r = probe(&browser, &v, "probe=zoomright");
    let facts = r["oom_facts"].as_str().unwrap();
    assert!(
        facts.contains("OOM") && facts.contains(&format!("event {}", fmt_thousands(at))),
        "{facts}"
    );
    let jumps = r["jumps"].as_array().unwrap();
    assert!(
        jumps.contains(&"go-peak".into()) && jumps.contains(&"go-oom-0".into()),
        "{jumps:?}"
    );
    // zoomed twice at the right edge: the OOM is still in the window, marked inside the plot
    assert!(
        f(&r["view"][1]) - f(&r["view"][0]) < f(&r["full"][1]) / 2.0,
        "{}",
        r["view"]
    );
    assert!(
        f(&r["view"][0]) <= at as f64 && at as f64 <= f(&r["view"][1]),
        "{}",
        r["view"]
    );
    let marks = r["drawn"]["marks"].as_array().unwrap();
    let m = marks
        .iter()
        .find(|m| m["kind"] == "oom")
        .expect("the OOM is drawn");
    inside(&r, m);
    assert!(m["label"].as_str().unwrap().contains("asked"));
    // its line is red on the canvas
    let px = r["pixels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "oom")
        .unwrap();
    let rgb = px["rgb"].as_array().unwrap();
    assert!(f(&rgb[0]) > 180.0 && f(&rgb[1]) < 110.0, "red: {px}");

    // the peak, then the OOM button: the window moves there and the moment is the OOM's
    let r = probe(&browser, &v, "probe=peak,oom");
    assert_eq!(r["moment"]["event"].as_u64(), Some(at), "{}", r["moment"]);
    assert!(f(&r["view"][0]) <= at as f64 && at as f64 <= f(&r["view"][1]));
    assert!(
        r["live_bytes"].as_f64().is_some(),
        "what is live at the OOM is shown"
    );
    inside(
        &r,
        r["drawn"]["marks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["kind"] == "oom")
            .unwrap(),
    );
    assert_eq!(v.interrupt(), 0);
}

fn fmt_thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The URL's fragment holds the window, the search, the selection, the moment and the
/// colouring: opening it shows the same; reset zooms out and the search's line stays true.
#[test]
fn the_fragment_reproduces_the_view_and_reset_keeps_the_search_line() {
    let Some(browser) = common::browser_or_skip("the_fragment_reproduces_the_view") else {
        return;
    };
    let v = Viewer::start(&gpt());
    let search = v.json("/api/search?q=layer_norm");
    let first = probe(
        &browser,
        &v,
        "probe=colour:site,search:layer_norm,zoomright",
    );
    let hash = first["hash"]
        .as_str()
        .unwrap()
        .trim_start_matches('#')
        .to_string();
    assert!(
        hash.contains("q=layer_norm") && hash.contains("c=site") && hash.contains("v="),
        "{hash}"
    );
    let line = first["search_status"].as_str().unwrap().to_string();
    assert!(
        line.contains(&format!("{} allocations", search["allocations"])),
        "{line} vs {search}"
    );
    // the link, opened afresh, shows the same window, colouring and search
    let mut fragment: Vec<&str> = hash
        .split('&')
        .filter(|kv| !kv.starts_with("probe="))
        .collect();
    fragment.push("probe=");
    let fragment = fragment.join("&");
    let again = probe(&browser, &v, &fragment);
    assert_eq!(again["colour"], "site");
    assert_eq!(again["search_status"].as_str(), Some(line.as_str()));
    for k in 0..2 {
        let (a, b) = (f(&first["view"][k]), f(&again["view"][k]));
        assert!(
            (a - b).abs() <= 0.01 * (f(&first["view"][1]) - f(&first["view"][0])),
            "{a} vs {b}"
        );
    }
    // a selection and a moment in the link: the allocation's stack and what is live then
    let sel = probe(
        &browser,
        &v,
        "x=event&v=1000,3000&q=layer_norm&sel=5&at=2000&c=category&probe=reset",
    );
    assert_eq!(sel["selected"], 5);
    assert_eq!(sel["moment"]["event"], 2000);
    let top = common::json_out(&[
        "top",
        gpt().to_str().unwrap(),
        "--at",
        "2000",
        "--format",
        "json",
    ]);
    assert_eq!(sel["live_bytes"], top[0]["at_bytes"]);
    // reset zoomed out; the search and its line are still there and still true
    assert_eq!(sel["view"], sel["full"]);
    assert_eq!(sel["search_value"], "layer_norm");
    assert_eq!(sel["search_status"].as_str(), Some(line.as_str()));
    assert!(
        !sel["hash"].as_str().unwrap().contains("v="),
        "{}",
        sel["hash"]
    );
    assert_eq!(v.interrupt(), 0);
}

/// A stats file speaks of ops: its own hint and search (over op names and modules: `AdamW`),
/// the markers named inside the plot, and a note that allocated and active coincide.
#[test]
fn a_stats_file_has_its_own_words_labelled_markers_and_a_note_on_coinciding_series() {
    let Some(browser) = common::browser_or_skip("a_stats_file_has_its_own_words") else {
        return;
    };
    let v = Viewer::start(&fixture("record/h100_gpt2_train.pkl"));
    let r = probe(&browser, &v, "probe=search:AdamW,hover");
    assert!(
        !r["hint"].as_str().unwrap().contains("allocation"),
        "{}",
        r["hint"]
    );
    assert!(r["placeholder"].as_str().unwrap().contains("ops"));
    let status = r["search_status"].as_str().unwrap();
    assert!(
        status.contains("\"AdamW\": 498 ops") && status.contains("AdamW"),
        "{status}"
    );
    assert!(
        r["drawn"]["hits"].as_u64() > Some(0),
        "the matching ops are ticked"
    );
    let markers = r["drawn"]["markers"].as_array().unwrap();
    for name in ["fw_start", "fw_bw_boundary"] {
        let m = markers
            .iter()
            .find(|m| m["label"] == name)
            .unwrap_or_else(|| panic!("{name} labelled: {markers:?}"));
        inside(&r, m);
    }
    assert!(
        r["note"]
            .as_str()
            .unwrap()
            .contains("allocated, active are equal"),
        "{}",
        r["note"]
    );
    assert!(r["drawn"]["lines"]
        .as_array()
        .unwrap()
        .contains(&"allocated = active".into()));
    let tip = r["hover"]["tip"].as_str().unwrap();
    assert!(tip.contains("op ") && tip.contains("module"), "{tip}");
    assert_eq!(v.interrupt(), 0);
}

/// A profiler trace: its y scale keeps the small allocations visible beside its one 4 MiB
/// tensor (square root by default; linear squashes them), and it speaks of ops.
#[test]
fn a_profiler_trace_keeps_its_small_allocations_visible() {
    let Some(browser) = common::browser_or_skip("a_profiler_trace_keeps_small_visible") else {
        return;
    };
    let v = Viewer::start(&fixture("profiler/export_chrome_trace.json"));
    let root = probe(&browser, &v, "probe=");
    assert_eq!(root["yscale"], "sqrt");
    assert!(root["placeholder"].as_str().unwrap().contains("op"));
    let linear = probe(&browser, &v, "probe=yscale:linear");
    let (s, l) = (
        f(&root["heights"]["median_px"]),
        f(&linear["heights"]["median_px"]),
    );
    assert!(
        s >= 4.0 * l && s >= 8.0,
        "square root {s} px, linear {l} px"
    );
    assert!(f(&root["heights"]["max_px"]) <= f(&root["chart"]["bottom"]));
    assert_eq!(v.interrupt(), 0);
}

/// Under the chart: the overview strip shows the whole capture with the window on it, and
/// dragging on it brushes the window (kept in the fragment, followed by the strip when the
/// chart zooms); the segment timeline, switched on, stacks the segments and names the one under
/// the pointer.
#[test]
fn the_overview_strip_brushes_the_window_and_the_segment_timeline_names_its_segments() {
    let Some(browser) = common::browser_or_skip("the_overview_strip_brushes_the_window") else {
        return;
    };
    let v = Viewer::start(&gpt());
    let r = probe(&browser, &v, "probe=brush:0.2-0.4");
    let (a, b) = (f(&r["full"][0]), f(&r["full"][1]));
    let (v0, v1) = (f(&r["view"][0]), f(&r["view"][1]));
    let near = |x: f64, want: f64| (x - want).abs() <= (b - a) * 0.005;
    assert!(
        near(v0, a + 0.2 * (b - a)) && near(v1, a + 0.4 * (b - a)),
        "the brushed window: {v0}..{v1} of {a}..{b}"
    );
    // the strip draws the window where it lies in the whole capture
    let s = &r["strip"];
    let px = |frac: f64| f(&r["chart"]["pad_l"]) + frac * f(&s["width"]);
    assert!(
        (f(&s["x0"]) - px(0.2)).abs() < 2.0 && (f(&s["x1"]) - px(0.4)).abs() < 2.0,
        "{s}"
    );
    assert!(
        f(&s["samples"]) > 100.0,
        "the whole capture is sampled: {s}"
    );
    let hash = r["hash"].as_str().unwrap().to_string();
    assert!(hash.contains("v="), "{hash}");
    // the fragment reproduces the window, and the strip shows it again
    let fragment = hash
        .trim_start_matches('#')
        .replace("probe=brush%3A0.2-0.4", "probe=");
    let again = probe(&browser, &v, &fragment);
    assert!(near(f(&again["view"][0]), v0) && near(f(&again["view"][1]), v1));
    assert!(
        (f(&again["strip"]["x0"]) - f(&s["x0"])).abs() < 2.0,
        "{}",
        again["strip"]
    );
    // zooming the chart narrows the window drawn on the strip
    let zoomed = probe(&browser, &v, "probe=zoomright");
    let w = f(&zoomed["strip"]["x1"]) - f(&zoomed["strip"]["x0"]);
    assert!(
        w < f(&zoomed["strip"]["width"]) / 2.0,
        "{}",
        zoomed["strip"]
    );
    assert!(zoomed["segtl"].is_null() && !zoomed["segtl_shown"].as_bool().unwrap());

    // the segment timeline: reserved bytes by segment, the last sample the snapshot's
    let overview = v.json("/api/overview");
    let events = overview["timeline"]["events"].as_u64().unwrap();
    let end = v.json(&format!("/api/segments?event={}", events - 1));
    let r = probe(&browser, &v, "probe=segtl,seghover");
    let seg = &r["segtl"];
    assert!(r["segtl_shown"].as_bool().unwrap(), "{r}");
    assert!(
        f(&seg["drawn"]) >= 10.0 && f(&seg["height"]) >= 150.0,
        "{seg}"
    );
    assert_eq!(f(&seg["total_last"]), f(&end["reserved"]), "{seg}");
    assert_ne!(
        seg["pixel"],
        serde_json::json!([255, 255, 255]),
        "segments drawn: {seg}"
    );
    assert!(r["hash"].as_str().unwrap().contains("seg=1"));
    // hovering a segment names its address, size, stream and when it was made
    let h = &r["seghover"];
    let tip = h["tip"].as_str().unwrap();
    let address = h["facts"]["address"].as_u64().unwrap();
    assert!(tip.contains(&format!("segment 0x{address:x}")), "{tip}");
    assert!(
        end["segments"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["address"].as_u64() == Some(address))
            || tip.contains("freed at"),
        "the address is a segment's: {tip}"
    );
    assert!(
        tip.contains(&format!("stream {}", h["facts"]["stream"])),
        "{tip}"
    );
    let made = match h["t0"].as_f64() {
        Some(t0) => format!("made at event {}", fmt_thousands(t0 as u64)),
        None => "made before the trace".into(),
    };
    assert!(tip.contains(&made), "{tip} names {made}");
    // opened from the fragment, the timeline is there again
    let shown = probe(&browser, &v, "seg=1&probe=");
    assert!(shown["segtl_shown"].as_bool().unwrap() && !shown["segtl"].is_null());
    assert_eq!(v.interrupt(), 0);
}

/// Expandable segments: the timeline's segments are the pages mapped, named so, and add up
/// to what is reserved at the end.
#[test]
fn the_segment_timeline_of_expandable_segments_shows_the_mappings() {
    let Some(browser) = common::browser_or_skip("the_segment_timeline_of_expandable") else {
        return;
    };
    let v = Viewer::start(&fixture("snapshots/h100/gpt_expandable_segments.pickle"));
    let events = v.json("/api/overview")["timeline"]["events"]
        .as_u64()
        .unwrap();
    let end = v.json(&format!("/api/segments?event={}", events - 1));
    let r = probe(&browser, &v, "probe=segtl,seghover");
    assert_eq!(f(&r["segtl"]["total_last"]), f(&end["reserved"]));
    let h = &r["seghover"];
    if h["facts"]["mapped"].as_bool().unwrap() {
        assert!(
            h["tip"].as_str().unwrap().contains("mapped (expandable)"),
            "{h}"
        );
    }
    assert_eq!(v.interrupt(), 0);
}

/// `memtrack estimate -o OUT [extra] -- python estimate_mlp.py 300,500,10` (None without a
/// Python with torch).
fn estimate(dir: &Path, name: &str, extra: &[&str]) -> Option<PathBuf> {
    let py = common::python()?;
    let out = dir.join(name);
    let o = common::memtrack_process()
        .arg("estimate")
        .arg("-o")
        .arg(&out)
        .args(extra)
        .arg("--")
        .arg(&py)
        .arg(common::script("estimate_mlp.py"))
        .arg("300,500,10")
        .output()
        .unwrap();
    assert!(out.exists(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(out)
}

/// An `estimate` file's page names the device it was estimated for and the verdict: fits,
/// with how much spare; or does not, at which op, module and iteration, asking how much. Its
/// modules are shown by category; there is no segments switch (a stats file has none).
#[test]
fn an_estimate_shows_its_device_and_verdict() {
    let Some(browser) = common::browser_or_skip("an_estimate_shows_its_device_and_verdict") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(fits) = estimate(dir.path(), "fits.pkl", &[]) else {
        return;
    };
    let tight = estimate(dir.path(), "tight.pkl", &["--gpu", "50MiB"]).unwrap();
    let v = Viewer::start(&fits);
    let r = probe(&browser, &v, "probe=");
    let kind = r["file_kind"].as_str().unwrap();
    assert!(
        kind.contains("estimate for NVIDIA H100 80GB HBM3"),
        "{kind}"
    );
    let verdict = r["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("fits NVIDIA H100 80GB HBM3") && verdict.contains("spare"),
        "{verdict}"
    );
    assert!(!r["segtl_control"].as_bool().unwrap());
    assert!(
        !r["modules"].as_array().unwrap().is_empty(),
        "{}",
        r["modules"]
    );
    assert_eq!(v.interrupt(), 0);

    let v = Viewer::start(&tight);
    let r = probe(&browser, &v, "probe=");
    let verdict = r["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("does not fit a GPU of 50MiB: runs out at op ")
            && verdict.contains(".backward.mm.")
            && verdict.contains("iteration 1")
            && verdict.contains("asking 32.0 MiB"),
        "{verdict}"
    );
    // and the chart marks where
    let markers = r["drawn"]["markers"].as_array().unwrap();
    let at = markers
        .iter()
        .find(|m| m["name"] == "runs out")
        .expect("the op where it runs out is marked");
    inside(&r, at);
    assert!(r["jumps"].as_array().unwrap().contains(&"go-oom-0".into()));
    assert_eq!(v.interrupt(), 0);
}

/// A `record` file's page shows what `memtrack modules` prints: each module's bytes by
/// category (GPT-2's activations at its peak in backward, its parameters, Adam's state).
#[test]
fn a_record_file_shows_its_modules_by_category() {
    let Some(browser) = common::browser_or_skip("a_record_file_shows_its_modules") else {
        return;
    };
    let v = Viewer::start(&fixture("record/h100_gpt2_train.pkl"));
    let r = probe(&browser, &v, "probe=");
    assert!(
        r["file_kind"]
            .as_str()
            .unwrap()
            .starts_with("record · cuda · NVIDIA H100"),
        "{}",
        r["file_kind"]
    );
    assert!(!r["segtl_control"].as_bool().unwrap());
    let rows = r["modules"].as_array().unwrap();
    // depth 2 by default: the model, and its transformer and lm_head
    let names: Vec<&str> = rows.iter().map(|r| r[0].as_str().unwrap()).collect();
    assert!(
        names.contains(&"GPT2LMHeadModel") && names.contains(&"lm_head"),
        "{names:?}"
    );
    let model = &rows[names.iter().position(|n| *n == "GPT2LMHeadModel").unwrap()];
    // module, state, Parameter, Buffer, Gradient, Activation, Temp, Optstate, Other, Total:
    // as `memtrack modules` prints the model at its peak (Peak-Backward)
    assert_eq!(model[1], "Peak-Backward");
    assert_eq!(model[2], "65.1 MiB");
    assert_eq!(model[5], "625 MiB");
    assert_eq!(model[7], "130 MiB");
    assert_eq!(v.interrupt(), 0);
}

/// A snapshot taken without memory history says it has no trace, and shows the allocator's
/// state when it was taken (every segment).
#[test]
fn a_snapshot_without_a_trace_says_so_and_shows_the_allocator_state() {
    let Some(browser) = common::browser_or_skip("a_snapshot_without_a_trace") else {
        return;
    };
    let v = Viewer::start(&fixture("snapshots/verl_mem_no_trace_multi_pool.pickle"));
    let end = v.json("/api/segments?event=end");
    let r = probe(&browser, &v, "probe=");
    assert!(
        r["notrace"]
            .as_str()
            .unwrap()
            .starts_with("No trace recorded."),
        "{}",
        r["notrace"]
    );
    assert!(r["facts"].as_str().unwrap().contains("no trace recorded"));
    let note = r["state_note"].as_str().unwrap();
    let segments = end["segments"].as_array().unwrap().len();
    assert_eq!(segments, 127);
    assert!(
        note.starts_with(&format!("{segments} segments when the snapshot was taken")),
        "{note}"
    );
    assert_eq!(v.interrupt(), 0);
}

/// Save: one HTML file that opens with no server (the server stopped first) and draws the
/// same view: the chart pixel for pixel, the legend, the selection with its rule, the moment
/// and its tables, the search's line, the segment timeline.
#[test]
fn a_saved_view_opens_from_its_file_and_draws_the_same_chart() {
    let Some(browser) = common::browser_or_skip("a_saved_view_opens_from_its_file") else {
        return;
    };
    let v = Viewer::start(&gpt());
    let live = probe(
        &browser,
        &v,
        "x=event&c=category&v=1000,3000&sel=5&at=2000&q=layer_norm&seg=1&probe=save",
    );
    assert_eq!(v.interrupt(), 0);
    let html = live["saved_html"].as_str().unwrap();
    eprintln!("the saved view: {} bytes", html.len());
    assert!(
        !html.contains("http://") && !html.contains("token="),
        "no server named"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gpt.view.html");
    std::fs::write(&file, html).unwrap();
    let url = format!("file://{}", file.display());
    let saved = report(&browser, dir.path(), &url, "probe=", "probe");
    assert!(saved["error"].is_null(), "{saved}");
    assert!(saved["saved_note"]
        .as_str()
        .unwrap()
        .starts_with("A saved view"));
    for k in [
        "chart_hash",
        "legend",
        "samples",
        "drawn_count",
        "view",
        "moment",
        "live_bytes",
        "selected",
        "alloc",
        "events",
        "search_status",
        "segtl",
        "strip",
    ] {
        assert_eq!(saved[k], live[k], "{k}");
    }
    assert!(live["alloc"]["rule"]
        .as_str()
        .unwrap()
        .starts_with("rule: "));
}

/// The allocation panel's lifetime on the event axis is in events; the legend keys every
/// category of the window (0 B where the sample has none) and says the moment clicked only
/// when it is in the window; the event list shows the allocs and frees around the moment.
#[test]
fn the_legend_keys_the_window_and_the_panels_speak_of_events() {
    let Some(browser) = common::browser_or_skip("the_legend_keys_the_window") else {
        return;
    };
    let v = Viewer::start(&fixture("snapshots/h100/oom_default.pickle"));
    let r = probe(&browser, &v, "x=event&v=1600,1747&at=1650&sel=40&probe=");
    let life = r["alloc"]["life"].as_str().unwrap();
    assert!(life.starts_with("live event "), "{life}");
    assert!(!life.contains(" x "), "{life}");
    assert!(r["legend_text"]
        .as_str()
        .unwrap()
        .contains("(at the moment clicked)"));
    let keys: Vec<&str> = (r["legend"].as_array().unwrap().iter())
        .map(|e| e["key"].as_str().unwrap())
        .collect();
    assert!(
        keys.contains(&"temporary") && keys.contains(&"other"),
        "{keys:?}"
    );
    assert!(r["events"].as_u64().unwrap() > 10, "{}", r["events"]);
    // the moment outside the window: the legend is the window's peak, and says where the moment is
    let r = probe(&browser, &v, "x=event&v=1600,1747&at=200&probe=");
    let text = r["legend_text"].as_str().unwrap();
    assert!(
        text.contains("at the window's peak; the moment clicked, event 200, is outside the window"),
        "{text}"
    );
    // the peak's label clears the OOM's line
    let marks = r["drawn"]["marks"].as_array().unwrap();
    let oom = marks.iter().find(|m| m["kind"] == "oom").unwrap();
    let peak = marks.iter().find(|m| m["kind"] == "peak").unwrap();
    let x = f(&oom["x"]);
    assert!(
        f(&peak["l1"]) < x - 1.0 || f(&peak["l0"]) > x + 1.0,
        "{peak} over {oom}"
    );
    assert_eq!(v.interrupt(), 0);
}
