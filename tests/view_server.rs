//! `memtrack view`: the server started as a user starts it, asked over real HTTP, and its page
//! driven in a real headless browser.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::viewer::{selftest, Viewer};
use common::{fixture, json_out};

fn snapshot() -> PathBuf {
    fixture("snapshots/cs336_medium_512_training.pickle")
}

/// Bytes of allocations at sample `j`: drawn, in bands, and older than the trace.
fn sample_sum(tile: &serde_json::Value, j: usize) -> i64 {
    let drawn: i64 = (tile["drawn"].as_array().unwrap().iter())
        .filter(|d| {
            d["j0"].as_u64().unwrap() as usize <= j && j < d["j1"].as_u64().unwrap() as usize
        })
        .map(|d| d["size"].as_i64().unwrap())
        .sum();
    let banded: i64 = (tile["bands"].as_array().unwrap().iter())
        .map(|b| b["bytes"][j].as_i64().unwrap())
        .sum();
    drawn + banded + tile["untracked"][j].as_i64().unwrap()
}

#[test]
fn the_token_is_required_and_the_server_is_read_only() {
    let v = Viewer::start(&snapshot());
    assert_eq!(v.raw("GET", "/").0, 403);
    assert_eq!(v.raw("GET", "/api/overview").0, 403);
    assert_eq!(v.raw("GET", "/api/overview?token=00").0, 403);
    let (status, page) = v.get("/");
    assert_eq!(status, 200);
    assert!(page.contains("<canvas id=\"chart\"") && !page.contains("<script src"));
    assert_eq!(v.get("/api/overview").0, 200);
    let tok = format!("/api/overview?token={}", v.token);
    assert_eq!(v.raw("POST", &tok).0, 405);
    // bounded parameters
    assert_eq!(v.get("/api/tile?x0=0&x1=1&width=100000&height=10").0, 400);
    assert_eq!(v.get("/api/tile?x0=nan&x1=1&width=10&height=10").0, 400);
    assert_eq!(v.get(&format!("/api/search?q={}", "a".repeat(500))).0, 400);
    assert_eq!(v.get("/api/alloc?id=99999999").0, 404);
    assert_eq!(v.get("/nothing").0, 404);
    // no path is a file's: traversal finds nothing
    assert_eq!(v.get("/../../../etc/passwd").0, 404);
    assert_eq!(v.get("/%2e%2e/%2e%2e/etc/passwd").0, 404);
    assert_eq!(v.interrupt(), 0, "Ctrl-C is a clean exit");
}

#[test]
fn tiles_add_up_zoom_is_finer_and_moments_match_top_and_segments() {
    let file = snapshot();
    let v = Viewer::start(&file);
    let ov = v.json("/api/overview");
    let tl = &ov["timeline"];
    let (a, b) = (
        tl["x_range"][0].as_f64().unwrap(),
        tl["x_range"][1].as_f64().unwrap(),
    );
    let whole = v.json(&format!("/api/tile?x0={a}&x1={b}&width=1000&height=500"));
    let (na, nb) = (a + (b - a) * 0.30, a + (b - a) * 0.32);
    let narrow = v.json(&format!("/api/tile?x0={na}&x1={nb}&width=1000&height=500"));
    let step = |t: &serde_json::Value| {
        let n = t["samples"]["x"].as_array().unwrap().len() as f64;
        (t["x1"].as_f64().unwrap() - t["x0"].as_f64().unwrap()) / n
    };
    assert!(
        step(&narrow) < step(&whole) / 5.0,
        "a narrower window is sampled finer"
    );
    assert!(narrow["events"].as_u64() < whole["events"].as_u64());
    for t in [&whole, &narrow] {
        let totals = t["samples"]["total"].as_array().unwrap();
        assert!(!totals.is_empty());
        for (j, total) in totals.iter().enumerate() {
            assert_eq!(
                sample_sum(t, j),
                total.as_i64().unwrap(),
                "sample {j}: nothing dropped"
            );
        }
    }
    // the peak is a sample of the whole view, and it is summary's peak
    let peak = tl["peak"]["bytes"].as_i64().unwrap();
    let most = (whole["samples"]["total"].as_array().unwrap().iter())
        .map(|t| t.as_i64().unwrap())
        .max();
    assert_eq!(most, Some(peak));
    let path = file.to_str().unwrap();
    let summary = json_out(&["summary", path, "--format", "json"]);
    let text = summary.to_string();
    assert!(
        text.contains(&peak.to_string()),
        "summary names the peak {peak}"
    );

    // what is live at a moment is `top --at`'s table, the state `segments --at`'s
    let event = narrow["samples"]["event"][0].as_u64().unwrap();
    let live = v.json(&format!("/api/live?event={event}"));
    let top = json_out(&["top", path, "--at", &event.to_string(), "--format", "json"]);
    assert_eq!(live["at_bytes"], top[0]["at_bytes"]);
    assert_eq!(live["at_count"], top[0]["at_count"]);
    assert_eq!(live["rows"][0]["group"], top[0]["rows"][0]["group"]);
    // and the tile's top edge there is the same figure
    assert_eq!(
        narrow["samples"]["total"][0].as_u64(),
        live["at_bytes"].as_u64()
    );
    let state = v.json(&format!("/api/segments?event={event}"));
    let segs = json_out(&[
        "segments",
        path,
        "--at",
        &event.to_string(),
        "--format",
        "json",
    ]);
    assert_eq!(state["reserved"], segs["totals"]["reserved_bytes"]);
    assert_eq!(
        state["segments"].as_array().unwrap().len() as u64,
        segs["totals"]["segments"].as_u64().unwrap()
    );

    // an allocation's details: Python frames apart from C++ ones
    let id = whole["drawn"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["t0"].is_number())
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    let d = v.json(&format!("/api/alloc?id={id}"));
    assert!(d["python"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f.as_str().unwrap().contains(".py:")));
    assert!(d["category"].is_string());
    assert!(d["rule"].as_str().unwrap().contains(';'), "{d}");
    // search: a site's file names its allocations
    let hits = v.json("/api/search?q=nn_utils.py");
    assert!(hits["allocations"].as_u64().unwrap() > 0);
    let none = v.json("/api/search?q=no_such_file_anywhere");
    assert_eq!(none["allocations"], 0);
    assert_eq!(v.interrupt(), 0);
}

/// The segment timeline's tiles: as bounded as the allocation tiles (a sample per pixel at
/// most, the width capped), every reserved byte in a segment at each sample, each drawn segment
/// with its address and stream, a narrower window resolving more of them; refused where there
/// are no segments.
#[test]
fn segment_tiles_are_bounded_and_hold_every_reserved_byte() {
    let v = Viewer::start(&fixture(
        "snapshots/cs336_ctx256_forward_empty_cache_start.pickle",
    ));
    let ov = v.json("/api/overview");
    let events = ov["timeline"]["events"].as_u64().unwrap();
    let count = ov["segments"]["count"].as_u64().unwrap();
    assert!(count > 0, "{ov}");
    let last = events - 1;
    let whole = v.json(&format!(
        "/api/segment_tile?x0=0&x1={last}&width=40&height=20&axis=event"
    ));
    let n = whole["samples"]["total"].as_array().unwrap().len();
    assert!(n > 0 && n <= 41, "at most a sample a pixel column: {n}");
    for j in 0..n {
        assert_eq!(whole["untracked"][j], 0, "sample {j}: bytes in no segment");
        assert_eq!(
            sample_sum(&whole, j),
            whole["samples"]["total"][j].as_i64().unwrap(),
            "sample {j}"
        );
    }
    // each sample's total is the reserved bytes `segments --at` names for its event
    for j in [0, n / 2, n - 1] {
        let e = whole["samples"]["event"][j].as_u64().unwrap();
        let state = v.json(&format!("/api/segments?event={e}"));
        assert_eq!(whole["samples"]["total"][j], state["reserved"], "event {e}");
    }
    let drawn = whole["drawn"].as_array().unwrap();
    let facts = whole["facts"].as_array().unwrap();
    assert_eq!(drawn.len(), facts.len());
    assert!(facts.iter().all(|f| f["address"].as_u64().unwrap() > 0));
    // at 20 pixels tall few segments are drawn one by one; at 2000 all that are live
    let tall = v.json(&format!(
        "/api/segment_tile?x0=0&x1={last}&width=40&height=2000&axis=event"
    ));
    assert!(tall["drawn"].as_array().unwrap().len() >= drawn.len());
    assert_eq!(tall["live_allocations"], whole["live_allocations"]);
    let (status, body) = v.get("/api/segment_tile?x0=0&x1=1&width=9000&height=10");
    assert_eq!(status, 400, "{body}");
    let (status, _) = v.get("/api/segment_tile?x0=0&x1=1&width=10&height=10&axis=sideways");
    assert_eq!(status, 400);
    assert_eq!(v.interrupt(), 0);
    let p = Viewer::start(&profiler_trace());
    let (status, body) = p.get("/api/segment_tile?x0=0&x1=1&width=10&height=10");
    assert_eq!(status, 404, "{body}");
}

#[test]
fn a_stats_file_shows_its_series() {
    let v = Viewer::start(&fixture("tracker/memory_tracker_cpu_torch2.15.0.pkl"));
    let ov = v.json("/api/overview");
    assert_eq!(ov["kind"], "stats");
    let ops = ov["series"]["ops"].as_u64().unwrap();
    assert!(ops > 0);
    let tile = v.json(&format!("/api/series?x0=0&x1={ops}&width=300"));
    let lines = tile["lines"].as_array().unwrap();
    assert!(!lines.is_empty());
    assert!(lines[0]["op"].as_array().unwrap().len() <= 4 * 300);
    let op = v.json("/api/op?i=0");
    assert!(op["name"].is_string());
    assert_eq!(v.interrupt(), 0);
}

fn profiler_trace() -> PathBuf {
    fixture("profiler/export_chrome_trace.json")
}

/// A torch.profiler trace: its `[memory]` events are the timeline, every sample adds up to the
/// trace's own `Total Allocated` then, and an allocation's details name the op it was made in
/// (the op `summary` attributes its bytes to).
#[test]
fn a_profiler_trace_shows_its_memory_events_by_op() {
    let file = profiler_trace();
    let v = Viewer::start(&file);
    let ov = v.json("/api/overview");
    assert_eq!(ov["kind"], "profile");
    assert_eq!(ov["devices"], serde_json::json!(["cpu"]));
    let tl = &ov["timeline"];
    assert_eq!(tl["device_label"], "cpu");
    // the trace's allocated series, from the file itself: `Total Allocated` per [memory]
    // event in time order
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let mut series: Vec<(f64, i64)> = (raw["traceEvents"].as_array().unwrap().iter())
        .filter(|e| e["name"] == "[memory]")
        .map(|e| {
            let ts = e["ts"].as_f64().unwrap();
            (ts, e["args"]["Total Allocated"].as_i64().unwrap())
        })
        .collect();
    series.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(tl["events"].as_u64(), Some(series.len() as u64));
    let peak = series.iter().map(|s| s.1).max().unwrap();
    assert_eq!(tl["peak"]["bytes"].as_i64(), Some(peak));
    assert_eq!(tl["ooms"].as_array().unwrap().len(), 1, "the 1 PiB request");
    let (a, b) = (
        tl["x_range"][0].as_f64().unwrap(),
        tl["x_range"][1].as_f64().unwrap(),
    );
    // wide enough for one sample per event: each is the series' value at its event
    let whole = v.json(&format!("/api/tile?x0={a}&x1={b}&width=8000&height=500"));
    let totals = whole["samples"]["total"].as_array().unwrap();
    let events = whole["samples"]["event"].as_array().unwrap();
    assert!(totals.len() > series.len() / 2, "{} samples", totals.len());
    for (j, total) in totals.iter().enumerate() {
        let e = events[j].as_u64().unwrap() as usize;
        assert_eq!(
            total.as_i64(),
            Some(series[e].1),
            "sample {j}: the trace's series"
        );
        assert_eq!(
            sample_sum(&whole, j),
            series[e].1,
            "sample {j}: nothing dropped"
        );
    }
    let narrow = v.json(&format!("/api/tile?x0={a}&x1={b}&width=20&height=500"));
    for j in 0..narrow["samples"]["total"].as_array().unwrap().len() {
        assert_eq!(
            sample_sum(&narrow, j),
            narrow["samples"]["total"][j].as_i64().unwrap()
        );
    }
    assert!(narrow["samples"]["total"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!(peak)));

    // the largest allocation is the 4 MiB tensor made at the end: its details name its op
    let big = (whole["drawn"].as_array().unwrap().iter())
        .max_by_key(|d| d["size"].as_u64())
        .unwrap();
    let at = tl["peak"]["index"].as_u64().unwrap() as usize;
    assert_eq!(big["size"].as_i64(), Some(peak - series[at - 1].1));
    let site = &whole["sites"][big["site"].as_u64().unwrap() as usize];
    let d = v.json(&format!("/api/alloc?id={}", big["id"]));
    let op = d["op"].as_str().expect("made in an op");
    assert!(op.starts_with("aten::"), "{d}");
    assert_eq!(site.as_str(), Some(op), "the hover names the op");
    // every allocation made in an op says which, and the ops are the ones summary counts
    let summary = json_out(&["summary", file.to_str().unwrap(), "--format", "json"]);
    let counted: Vec<&str> = (summary["top_ops"].as_array().unwrap().iter())
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert!(counted.contains(&op), "{op} in {counted:?}");
    let small = (whole["drawn"].as_array().unwrap().iter())
        .find(|d| d["t0"].is_number() && d["t1"].is_number())
        .unwrap();
    let sd = v.json(&format!("/api/alloc?id={}", small["id"]));
    assert!(sd["annotations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a.as_str().unwrap().starts_with("ProfilerStep#")));
    assert!(
        sd["python"].as_array().unwrap().len() > 1,
        "with_stack: {sd}"
    );
    // the backward pass frees what the forward made: in its autograd nodes
    let freed_in: Vec<String> = (whole["drawn"].as_array().unwrap().iter())
        .filter(|d| d["t1"].is_number())
        .filter_map(|d| {
            v.json(&format!("/api/alloc?id={}", d["id"]))["freed_in"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert!(
        freed_in.iter().any(|f| f.contains("Backward")),
        "{freed_in:?}"
    );

    // what is live at a moment adds up to the series there
    let e = series.len() / 2;
    let live = v.json(&format!("/api/live?event={e}"));
    assert_eq!(live["at_bytes"].as_i64(), Some(series[e].1));
    let rows: i64 = (live["rows"].as_array().unwrap().iter())
        .map(|r| r["at_bytes"].as_i64().unwrap())
        .sum();
    assert_eq!(rows, series[e].1);
    assert_eq!(v.get("/api/segments?event=0").0, 404);
    let hits = v.json("/api/search?q=aten::");
    assert!(hits["allocations"].as_u64().unwrap() > 0);
    assert_eq!(v.json("/api/search?q=no_such_op")["allocations"], 0);
    assert_eq!(v.interrupt(), 0);
}

#[test]
fn a_folder_of_traces_or_a_trace_without_memory_is_refused() {
    for (rel, says) in [
        ("profiler/tb", "name one of the folder's files"),
        ("profiler/no_memory.json", "profile_memory"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_memtrack"))
            .args(["view", "--no-browser", "--port", "0"])
            .arg(fixture(rel))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{rel}: {err}");
        assert!(err.contains(says), "{rel}: {err}");
    }
}

/// The page in a real browser: it loads without a script error, a wheel zoom fetches a finer
/// tile, clicking a drawn allocation (through the page's own hit testing: `#selftest`) shows
/// its Python stack and what is live then, the same bytes as `top --at`. A screenshot is kept
/// as target/tmp/view_server.png.
#[test]
fn the_page_zooms_and_shows_a_stack_in_a_headless_browser() {
    let Some(browser) =
        common::browser_or_skip("the_page_zooms_and_shows_a_stack_in_a_headless_browser")
    else {
        return;
    };
    let file = snapshot();
    let v = Viewer::start(&file);
    let dir = tempfile::tempdir().unwrap();
    let r = selftest(&browser, dir.path(), &v.url);
    assert!(r["error"].is_null(), "{r}");
    assert!(r["requests_for_zoom"].as_u64() >= Some(1), "{r}");
    assert!(
        r["zoomed"]["step"].as_f64() < r["first"]["step"].as_f64(),
        "the zoom fetched finer data: {r}"
    );
    assert!(r["zoomed"]["span"].as_f64() < r["first"]["span"].as_f64());
    // the hover box names size and site; the click shows the Python stack
    let tip = r["tip"].as_str().unwrap();
    assert!(tip.contains("iB") && tip.contains(".py:"), "{tip}");
    assert!(r["stack"].as_str().unwrap().contains(".py:"), "{r}");
    // the moment clicked: its live bytes are `top --at`'s
    let event = r["moment_event"].as_u64().unwrap().to_string();
    let top = json_out(&[
        "top",
        file.to_str().unwrap(),
        "--at",
        &event,
        "--format",
        "json",
    ]);
    assert_eq!(r["live_bytes"], top[0]["at_bytes"], "{r}");
    assert!(r["segments"].as_u64() > Some(0));
    assert!(r["search_allocations"].as_u64() > Some(0));

    // a screenshot of the page after the same steps, kept as the test's artifact
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("view_server.png");
    let _ = std::fs::remove_file(&shot);
    common::headless(
        &browser,
        &dir.path().join("profile2"),
        10_000,
        &format!("--screenshot={}", shot.display()),
        &format!("{}#selftest", v.url),
    );
    let png = std::fs::read(&shot).expect("the browser wrote the screenshot");
    assert!(png.starts_with(b"\x89PNG"));
    assert_eq!(v.interrupt(), 0);
}

/// A profiler trace's page in a real browser: no script error, the zoom fetches finer data,
/// the hover and the click name the op the clicked allocation was made in, and what is live
/// then is the trace's allocated bytes.
#[test]
fn a_profiler_trace_page_names_the_op_in_a_headless_browser() {
    let Some(browser) =
        common::browser_or_skip("a_profiler_trace_page_names_the_op_in_a_headless_browser")
    else {
        return;
    };
    let v = Viewer::start(&profiler_trace());
    let dir = tempfile::tempdir().unwrap();
    let r = selftest(&browser, dir.path(), &v.url);
    assert!(r["error"].is_null(), "{r}");
    assert!(r["requests_for_zoom"].as_u64() >= Some(1), "{r}");
    let op = r["op"].as_str().expect("the click shows the op");
    assert!(op.starts_with("aten::"), "{r}");
    assert!(
        r["tip"].as_str().unwrap().contains(op),
        "the hover names {op}: {r}"
    );
    let clicked = v.json(&format!("/api/alloc?id={}", r["clicked"]));
    assert_eq!(clicked["op"].as_str(), Some(op));
    let event = r["moment_event"].as_u64().unwrap();
    let live = v.json(&format!("/api/live?event={event}"));
    assert_eq!(r["live_bytes"], live["at_bytes"], "{r}");
    assert!(r["search_allocations"].as_u64() > Some(0), "{r}");
    assert_eq!(v.interrupt(), 0);
}

fn stats_file() -> PathBuf {
    fixture("tracker/memory_tracker_cpu_torch2.15.0.pkl")
}

/// What the server sent on `s` until it closed the connection (`Some(when)`, from `since`), or
/// until `wait` passed (`None`).
fn read_until_closed(
    s: &mut TcpStream,
    since: Instant,
    wait: Duration,
) -> (String, Option<Duration>) {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (String::from_utf8_lossy(&got).into_owned(), None);
            }
            Err(_) => break, // reset: closed too
        }
    }
    (
        String::from_utf8_lossy(&got).into_owned(),
        Some(since.elapsed()),
    )
}

fn status_of(answer: &str) -> u16 {
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|a| a.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {answer:?}"))
}

/// Whether the server has closed `s` (without waiting).
fn closed(mut s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let gone = match s.read(&mut byte) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    s.set_nonblocking(false).unwrap();
    gone
}

/// `clients` connections at once, each sending `start` and then `pad` bytes of `a` (the line
/// never ending) while it reads its answer: each one's status and how long it took, and the
/// server's most RSS meanwhile (KiB).
fn flood(v: &Viewer, start: &str, pad: usize, clients: usize) -> (Vec<(u16, Duration)>, u64) {
    let t = Instant::now();
    let readers: Vec<_> = (0..clients)
        .map(|_| {
            let mut s = v.connect();
            let mut w = s.try_clone().unwrap();
            let start = start.to_string();
            let writer = std::thread::spawn(move || {
                let chunk = vec![b'a'; 64 << 10];
                let mut sent = w.write_all(start.as_bytes()).map(|_| 0);
                while let Ok(n) = sent.as_ref().map(|n| *n) {
                    if n >= pad {
                        break;
                    }
                    sent = w.write_all(&chunk).map(|_| n + chunk.len());
                }
            });
            std::thread::spawn(move || {
                let (answer, when) = read_until_closed(&mut s, t, Duration::from_secs(10));
                writer.join().unwrap();
                (
                    status_of(&answer),
                    when.expect("the server closed the connection"),
                )
            })
        })
        .collect();
    let mut most = v.rss_kib();
    // bounded: each reader gives up after 10 s
    while !readers.iter().all(|r| r.is_finished()) {
        most = most.max(v.rss_kib());
        std::thread::sleep(Duration::from_millis(10));
    }
    let answers = readers.into_iter().map(|r| r.join().unwrap()).collect();
    (answers, most.max(v.rss_kib()))
}

/// A request line or a header far over the 16 KiB limit is answered (414, 431) as soon as the
/// limit is passed, the rest never kept, and the server's memory stays flat: eight clients at
/// once each sending a 32 MiB header (the server before read each whole, a GiB header took it
/// to 2.1 GB).
#[test]
fn oversized_request_lines_and_headers_are_refused_early_with_flat_memory() {
    const MIB: u64 = 1024;
    let v = Viewer::start(&stats_file());
    assert_eq!(v.get("/api/overview").0, 200);
    let before = v.rss_kib();
    let line = format!("GET /?token={}&pad=", v.token);
    let header = format!(
        "GET /?token={} HTTP/1.1\r\nHost: {}\r\nX-Pad: ",
        v.token,
        v.host()
    );
    for (start, status) in [(&line, 414), (&header, 431)] {
        let (answers, _) = flood(&v, start, 1 << 20, 1);
        assert_eq!(answers[0].0, status);
        assert!(answers[0].1 < Duration::from_secs(3), "{answers:?}");
    }
    let (answers, most) = flood(&v, &header, 32 << 20, 8);
    assert!(answers.iter().all(|a| a.0 == 431), "{answers:?}");
    let after = v.rss_kib();
    assert!(
        most < before + 16 * MIB && after < before + 16 * MIB,
        "RSS {before} KiB before, {most} at most, {after} after"
    );
    // and the server still answers
    assert_eq!(v.get("/api/overview").0, 200);
    assert_eq!(v.interrupt(), 0);
}

/// Clients that stop halfway through their headers (and one that sends a byte every 250 ms)
/// are answered 408 and closed 5 s after their first byte; one that sends nothing is closed
/// after 10 s; while 40 of them hang on, 200 requests are answered at once; memory stays flat.
#[test]
fn unfinished_headers_and_idle_connections_are_closed_after_their_timeouts() {
    let v = Viewer::start(&stats_file());
    assert_eq!(v.get("/api/overview").0, 200);
    let before = v.rss_kib();
    let t = Instant::now();
    let unfinished = format!(
        "GET /?token={} HTTP/1.1\r\nHost: {}\r\nX-Pad: {}",
        v.token,
        v.host(),
        "a".repeat(8 << 10)
    );
    let mut held: Vec<_> = (0..40)
        .map(|_| {
            let mut s = v.connect();
            s.write_all(unfinished.as_bytes()).unwrap();
            std::thread::spawn(move || read_until_closed(&mut s, t, Duration::from_secs(15)))
        })
        .collect();
    let mut trickle = v.connect();
    let mut trickle_writer = trickle.try_clone().unwrap();
    let trickler = std::thread::spawn(move || {
        let mut sent = trickle_writer.write_all(b"GET / HTTP/1.1\r\nX-Slow: ");
        for _ in 0..60 {
            if sent.is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
            sent = trickle_writer.write_all(b"a");
        }
    });
    held.push(std::thread::spawn(move || {
        read_until_closed(&mut trickle, t, Duration::from_secs(15))
    }));
    let mut silent = v.connect();
    let silent =
        std::thread::spawn(move || read_until_closed(&mut silent, t, Duration::from_secs(15)));

    // meanwhile, a user's requests are answered without waiting for them
    for i in 0..200 {
        let asked = Instant::now();
        let (status, _) = v.get(&format!("/api/op?i={}", i % 3));
        assert_eq!(status, 200);
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "request {i}: {:?}",
            asked.elapsed()
        );
    }
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "200 requests took {:?}",
        t.elapsed()
    );
    for h in held {
        let (answer, when) = h.join().unwrap();
        let when = when.expect("closed");
        assert_eq!(status_of(&answer), 408, "{answer}");
        assert!(
            when > Duration::from_millis(4500) && when < Duration::from_secs(8),
            "closed after {when:?}"
        );
    }
    trickler.join().unwrap();
    let (answer, when) = silent.join().unwrap();
    let when = when.expect("an idle connection is closed");
    assert_eq!(answer, "", "nothing asked, nothing answered");
    assert!(
        when > Duration::from_millis(9500) && when < Duration::from_secs(13),
        "closed after {when:?}"
    );
    let after = v.rss_kib();
    assert!(
        after < before + 16 * 1024,
        "RSS {before} KiB before, {after} after"
    );
    assert_eq!(v.get("/api/overview").0, 200);
    assert_eq!(v.interrupt(), 0);
}

/// At most 64 connections: past that the one idle longest is closed for a new one, so 100 idle
/// connections do not keep the user out; when all 64 are in the middle of a request, a new one
/// is answered 503 at once, and answered again once they time out.
#[test]
fn past_the_connection_cap_idle_connections_give_way_and_busy_ones_answer_503() {
    const CAP: usize = 64;
    let v = Viewer::start(&stats_file());
    let idle: Vec<TcpStream> = (0..100).map(|_| v.connect()).collect();
    let asked = Instant::now();
    assert_eq!(v.get("/api/overview").0, 200);
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    // the 37 idle longest were closed (100 + the request over 64); the others stay
    let settle = Instant::now();
    let mut gone = 0;
    while settle.elapsed() < Duration::from_secs(3) {
        gone = idle.iter().filter(|s| closed(s)).count();
        if gone >= 100 + 1 - CAP {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(gone, 100 + 1 - CAP);
    assert!(
        idle[..100 + 1 - CAP].iter().all(closed),
        "the oldest go first"
    );
    drop(idle);
    assert_eq!(v.interrupt(), 0);

    let v = Viewer::start(&stats_file());
    let t = Instant::now();
    let partial = format!("GET /?token={} HTTP/1.1\r\nHost: {}\r\n", v.token, v.host());
    let busy: Vec<_> = (0..CAP)
        .map(|_| {
            let mut s = v.connect();
            s.write_all(partial.as_bytes()).unwrap();
            s
        })
        .collect();
    // once the server has read their first bytes, none of them is idle
    std::thread::sleep(Duration::from_millis(500));
    let mut over = v.connect();
    let (answer, when) = read_until_closed(&mut over, Instant::now(), Duration::from_secs(3));
    assert_eq!(status_of(&answer), 503, "{answer}");
    assert!(when.expect("closed") < Duration::from_secs(1));
    // 5 s after their first byte they are answered 408 and closed: room again
    let waiting: Vec<_> = busy
        .into_iter()
        .map(|mut s| {
            std::thread::spawn(move || read_until_closed(&mut s, t, Duration::from_secs(10)))
        })
        .collect();
    for w in waiting {
        assert_eq!(status_of(&w.join().unwrap().0), 408);
    }
    assert_eq!(v.get("/api/overview").0, 200);
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    assert_eq!(v.interrupt(), 0);
}

/// The Host header must name the server (DNS rebinding: a page of another site whose name now
/// points at 127.0.0.1 sends its own name); one connection answers requests in turn, pipelined
/// ones included.
#[test]
fn the_host_must_name_the_server_and_connections_are_kept_alive() {
    let v = Viewer::start(&stats_file());
    let port = v.host().rsplit_once(':').unwrap().1.to_string();
    let ask = |host: Option<&str>| {
        let mut s = v.connect();
        let host = host.map_or(String::new(), |h| format!("Host: {h}\r\n"));
        write!(
            s,
            "GET /?token={} HTTP/1.1\r\n{host}Connection: close\r\n\r\n",
            v.token
        )
        .unwrap();
        let (answer, _) = read_until_closed(&mut s, Instant::now(), Duration::from_secs(5));
        (status_of(&answer), answer)
    };
    for host in [
        format!("evil.example:{port}"),
        format!("127.0.0.1:{}", port.parse::<u16>().unwrap() + 1),
        "127.0.0.1".into(),
        // the port with a sign or a leading zero (taken by `u16::from_str` before)
        format!("127.0.0.1:+{port}"),
        format!("127.0.0.1:0{port}"),
    ] {
        let (status, answer) = ask(Some(&host));
        assert_eq!(status, 403, "{host}");
        assert!(answer.contains("the Host header must name"), "{answer}");
    }
    assert_eq!(ask(None).0, 400, "HTTP/1.1 without Host");
    // an empty one (200 before)
    assert_eq!(ask(Some("")).0, 400, "HTTP/1.1 with an empty Host");
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let (status, answer) = ask(Some(&host));
        assert_eq!(status, 200, "{host}");
        let head = answer.split("\r\n\r\n").next().unwrap();
        for says in [
            "Referrer-Policy: no-referrer",
            "Content-Security-Policy: default-src 'none';",
            "Cache-Control: no-store",
            "X-Content-Type-Options: nosniff",
        ] {
            assert!(head.contains(says), "{head}");
        }
        assert!(!head.contains("Access-Control"), "no CORS: {head}");
    }

    // a body is never read: 413, and the connection closed
    let mut s = v.connect();
    write!(
        s,
        "GET /?token={} HTTP/1.1\r\nHost: {}\r\nContent-Length: 5\r\n\r\nhello",
        v.token,
        v.host()
    )
    .unwrap();
    let (answer, when) = read_until_closed(&mut s, Instant::now(), Duration::from_secs(5));
    assert_eq!(status_of(&answer), 413, "{answer}");
    assert!(
        answer.contains("Connection: close") && when.is_some(),
        "{answer}"
    );

    // keep-alive: two requests sent at once on one connection, two answers, then a third
    let mut s = v.connect();
    let request = format!(
        "GET /api/op?i=0&token={} HTTP/1.1\r\nHost: {}\r\n\r\n",
        v.token,
        v.host()
    );
    s.write_all(format!("{request}{request}").as_bytes())
        .unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut answer = || {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let length: usize = (head.lines())
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        assert!(!head.contains("Connection: close"), "{head}");
        (status_of(&head), String::from_utf8(body).unwrap())
    };
    let first = answer();
    assert_eq!(first.0, 200);
    assert_eq!(answer(), first);
    s.write_all(request.as_bytes()).unwrap();
    assert_eq!(answer(), first);
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(v.interrupt(), 0);
}

/// Without `--no-browser` the opener gets a file only the user can read, which redirects to the
/// URL: never the token on a command line (which `ps` shows every user). The file is 0600 in a
/// fresh 0700 folder even under umask 000, in `$XDG_RUNTIME_DIR` when that is a private folder
/// (else in `TMPDIR`), and gone once view stops.
#[test]
fn the_browser_is_opened_on_a_private_file_never_on_the_token() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let [bin, runtime, shared, tmp] = ["bin", "run", "shared", "tmp"].map(|d| dir.path().join(d));
    for (d, mode) in [
        (&bin, 0o755),
        (&runtime, 0o700),
        (&shared, 0o755),
        (&tmp, 0o700),
    ] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let argv = dir.path().join("argv");
    let opener = bin.join("xdg-open");
    std::fs::write(
        &opener,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > '{0}.part' && mv '{0}.part' '{0}'\n",
            argv.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // a private XDG_RUNTIME_DIR is used; one other users may enter is not
    for (xdg, expect_in) in [(&runtime, &runtime), (&shared, &tmp)] {
        let _ = std::fs::remove_file(&argv);
        let v = Viewer::launch(&stats_file(), |cmd| {
            cmd.env("PATH", &path)
                .env("XDG_RUNTIME_DIR", xdg)
                .env("TMPDIR", &tmp);
            // SAFETY: umask only, between fork and exec
            unsafe {
                cmd.pre_exec(|| {
                    libc::umask(0);
                    Ok(())
                });
            }
        });
        let asked = Instant::now();
        while !argv.exists() && asked.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let args = std::fs::read_to_string(&argv).expect("the opener ran");
        let args: Vec<&str> = args.lines().collect();
        assert_eq!(args.len(), 2, "{args:?}");
        assert!(
            !args.iter().any(|a| a.contains(&v.token)),
            "the token is in argv: {args:?}"
        );
        let file = Path::new(args[1]);
        let folder = file.parent().unwrap();
        assert_eq!(folder.parent(), Some(expect_in.as_path()), "{args:?}");
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(file), 0o600);
        assert_eq!(mode(folder), 0o700);
        let page = std::fs::read_to_string(file).unwrap();
        assert!(
            page.contains(&format!("content=\"0;url={}\"", v.url)),
            "{page}"
        );
        assert!(page.contains(&format!("href=\"{}\"", v.url)), "{page}");
        assert_eq!(v.interrupt(), 0);
        assert!(
            !folder.exists(),
            "{} is removed when view stops",
            folder.display()
        );
    }
}

/// The event list: every alloc and free of the OOM capture, in order, each with its
/// allocation's category; nothing made under the loss (cross_entropy) is "input", and the
/// log-softmax backward frees is an activation, with the rule that said so.
#[test]
fn the_event_list_holds_every_alloc_and_free_and_the_loss_is_never_input() {
    let v = Viewer::start(&fixture("snapshots/h100/oom_default.pickle"));
    let events = v.json("/api/overview")["timeline"]["events"]
        .as_u64()
        .unwrap();
    let mut rows = Vec::new();
    let mut from = 0;
    while from < events {
        let page = v.json(&format!("/api/events?from={from}&count=500"));
        assert_eq!(page["from"], from);
        rows.extend(page["rows"].as_array().unwrap().iter().cloned());
        from = page["to"].as_u64().unwrap();
    }
    // the trace's allocs and frees, each once, in order (752 allocs, 432 frees)
    let count = |a: &str| rows.iter().filter(|r| r["action"] == a).count();
    assert_eq!((count("alloc"), count("free")), (752, 432));
    assert!(rows
        .windows(2)
        .all(|w| w[0]["event"].as_u64() <= w[1]["event"].as_u64()));
    let loss: Vec<_> = rows
        .iter()
        .filter(|r| r["site"].as_str().unwrap().contains("cross_entropy"))
        .collect();
    assert!(loss.len() >= 4, "{loss:?}");
    for r in &loss {
        assert_ne!(r["category"], "input", "{r}");
    }
    let big = loss
        .iter()
        .find(|r| r["action"] == "alloc" && r["size"].as_u64() > Some(200 << 20))
        .unwrap();
    let d = v.json(&format!("/api/alloc?id={}", big["id"]));
    assert_eq!(d["category"], "activation", "{d}");
    assert!(
        d["rule"].as_str().unwrap().contains("freed by backward")
            || d["rule"].as_str().unwrap().contains("still live"),
        "{d}"
    );
    assert_eq!(v.interrupt(), 0);
}
