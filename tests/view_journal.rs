//! `memtrack view JOURNAL`: a job still being recorded, in the browser. The page's series grow
//! as the job runs, `/api/live` says where it is, and the page shows a live badge and the last
//! finished iteration's modules (checked in a real headless browser).

mod common;

use std::time::{Duration, Instant};

use common::viewer::Viewer;
use common::{python, script};

/// Ask `v` for `path` until `test` holds of its JSON (at most `limit`).
fn until(
    v: &Viewer,
    path: &str,
    limit: Duration,
    test: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let j = v.json(path);
        if test(&j) {
            return j;
        }
        assert!(start.elapsed() < limit, "{path} never got there: {j}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_running_jobs_page_grows_with_a_live_badge_and_its_modules() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut record = common::memtrack_process()
        .current_dir(dir.path())
        .args(["record", "-o", "run.pkl", "--"])
        .arg(&py)
        .args([&script("watch_loop.py"), "40", "0.1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let journal = loop {
        let found = std::fs::read_dir(dir.path()).unwrap().find_map(|e| {
            let p = e.ok()?.path();
            p.file_name()?.to_str()?.contains(".journal-").then_some(p)
        });
        if let Some(j) = found {
            break j;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let v = Viewer::start(&journal);
    let live = until(&v, "/api/live", Duration::from_secs(20), |l| {
        l["iteration"].as_u64() >= Some(3) && !l["modules"].as_array().unwrap().is_empty()
    });
    assert!(live["ended"].is_null(), "{live}");
    let modules = live["modules"].as_array().unwrap();
    assert!(
        modules.iter().any(|m| m["module"] == "Sequential"),
        "{live}"
    );
    assert!(
        modules
            .iter()
            .any(|m| m["peak_backward_bytes"].as_i64() > Some(0)),
        "{live}"
    );
    // the run so far answers as a stats file does, and grows
    let overview = v.json("/api/overview");
    // the page starts following the run only when its overview says `live`
    assert_eq!(overview["live"], true, "{overview}");
    let ops = overview["series"]["ops"].as_u64().unwrap();
    assert!(ops > 0);
    until(&v, "/api/overview", Duration::from_secs(10), |o| {
        o["series"]["ops"].as_u64() > Some(ops)
    });
    let tile = v.json(&format!("/api/series?x0=0&x1={ops}&width=200"));
    assert!(!tile["lines"].as_array().unwrap().is_empty(), "{tile}");
    // the page: the badge and the modules
    if let Some(browser) = common::browser_or_skip("the live page") {
        let profile = tempfile::tempdir().unwrap();
        let out = common::headless(&browser, profile.path(), 4000, "--dump-dom", &v.url);
        let dom = String::from_utf8_lossy(&out.stdout);
        assert!(dom.contains("● live · iteration"), "{dom}");
        assert!(
            dom.contains("Modules of the last finished iteration"),
            "{dom}"
        );
        assert!(dom.contains("Sequential"), "{dom}");
    }
    // the job ends: the page is told
    assert!(record.wait().unwrap().success());
    until(&v, "/api/live", Duration::from_secs(10), |l| {
        !l["ended"].is_null()
    });
    assert_eq!(v.interrupt(), 0);
}
