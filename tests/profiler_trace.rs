//! torch.profiler traces (issue 22): the real fixtures of fixtures/profiler/ (torch 2.15, CPU),
//! checked against the test's own reading of the JSON (serde_json, whole) and against torch's
//! own `key_averages()` memory columns the fixture script saved beside the trace.

mod common;

use std::io::Read;

use common::{fixture, json_out, run};
use serde_json::Value;

fn trace_json(rel: &str) -> Value {
    let path = fixture(rel);
    let mut bytes = Vec::new();
    if rel.ends_with(".gz") {
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
            .read_to_end(&mut bytes)
            .unwrap();
    } else {
        bytes = std::fs::read(&path).unwrap();
    }
    serde_json::from_slice(&bytes).unwrap()
}

/// The test's own peak: the largest `Total Allocated` of the `[memory]` events (first in time).
fn own_peak(t: &Value) -> (i64, f64) {
    let mut best: Option<(i64, f64)> = None;
    let mut events: Vec<&Value> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "[memory]")
        .collect();
    events.sort_by(|a, b| a["ts"].as_f64().partial_cmp(&b["ts"].as_f64()).unwrap());
    for e in events {
        let total = e["args"]["Total Allocated"].as_i64().unwrap();
        if best.is_none_or(|(b, _)| total > b) {
            best = Some((total, e["ts"].as_f64().unwrap()));
        }
    }
    best.unwrap()
}

#[test]
fn summary_peak_and_oom_match_the_json() {
    let t = trace_json("profiler/export_chrome_trace.json");
    let (peak, ts) = own_peak(&t);
    let j = json_out(&[
        "summary",
        fixture("profiler/export_chrome_trace.json")
            .to_str()
            .unwrap(),
        "--format",
        "json",
    ]);
    let dev = &j["devices"][0];
    assert_eq!(dev["device"], "cpu");
    assert_eq!(dev["peak_allocated"]["bytes"].as_i64().unwrap(), peak);
    assert!((dev["peak_allocated"]["ts_us"].as_f64().unwrap() - ts).abs() < 1e-3);
    // the 4 MiB tensor the script allocates last is the peak, made by aten::empty
    assert_eq!(dev["peak_allocated"]["op"], "aten::empty");
    let ooms: Vec<&Value> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "[OutOfMemory]")
        .collect();
    assert_eq!(j["ooms"].as_array().unwrap().len(), ooms.len());
    assert_eq!(j["ooms"][0]["bytes"], ooms[0]["args"]["Bytes"]);
    assert_eq!(j["ooms"][0]["bytes"].as_i64().unwrap(), 1 << 50);
    // the steps the script annotated, each with its peak
    let steps: Vec<&str> = j["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["ProfilerStep#0", "ProfilerStep#1"]);
}

#[test]
fn op_memory_matches_torch_key_averages() {
    let averages: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("profiler/export_chrome_trace.key_averages.json"))
            .unwrap(),
    )
    .unwrap();
    let j = json_out(&[
        "top",
        fixture("profiler/export_chrome_trace.json")
            .to_str()
            .unwrap(),
        "--top",
        "1000",
        "--format",
        "json",
    ]);
    let ours = j["ops"].as_array().unwrap();
    let mut compared = 0;
    for (name, row) in averages["ops"].as_object().unwrap() {
        if !name.starts_with("aten::") {
            continue;
        }
        let incl = row["cpu_memory_usage"].as_i64().unwrap();
        let own_self = row["self_cpu_memory_usage"].as_i64().unwrap();
        let mine = ours.iter().find(|r| r["name"] == name.as_str());
        let (net, self_net) = mine.map_or((0, 0), |r| {
            (r["net"].as_i64().unwrap(), r["self_net"].as_i64().unwrap())
        });
        assert_eq!(net, incl, "{name}: net within (torch's cpu_memory_usage)");
        assert_eq!(self_net, own_self, "{name}: self net");
        if incl != 0 {
            compared += 1;
            assert_eq!(
                mine.unwrap()["calls"].as_u64().unwrap(),
                row["count"].as_u64().unwrap(),
                "{name}: calls"
            );
        }
    }
    assert!(compared >= 5, "only {compared} ops with memory compared");
}

#[test]
fn a_folder_of_gzip_traces_is_the_ranks_table() {
    let j = json_out(&[
        "summary",
        fixture("profiler/tb").to_str().unwrap(),
        "--format",
        "json",
    ]);
    let rows = j.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (row, file) in rows.iter().zip(["worker0", "worker1"]) {
        let rel = format!("profiler/tb/{file}.pt.trace.json.gz");
        assert_eq!(row["file"], format!("{file}.pt.trace.json.gz"));
        let (peak, _) = own_peak(&trace_json(&rel));
        assert_eq!(
            row["summary"]["devices"][0]["peak_allocated"]["bytes"]
                .as_i64()
                .unwrap(),
            peak
        );
    }
}

#[test]
fn diff_gates_on_the_peak() {
    let a = fixture("profiler/tb/worker0.pt.trace.json.gz");
    let b = fixture("profiler/tb/worker1.pt.trace.json.gz");
    let (pa, _) = own_peak(&trace_json("profiler/tb/worker0.pt.trace.json.gz"));
    let (pb, _) = own_peak(&trace_json("profiler/tb/worker1.pt.trace.json.gz"));
    assert!(pb > pa);
    let (code, out, _) = run(&[
        "diff",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--fail-over",
        "10%",
        "--format",
        "json",
    ]);
    assert_eq!(code, 1);
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["devices"][0]["before"].as_i64().unwrap(), pa);
    assert_eq!(j["devices"][0]["after"].as_i64().unwrap(), pb);
    // the other way round it shrank: passes
    let (code, _, _) = run(&[
        "diff",
        b.to_str().unwrap(),
        a.to_str().unwrap(),
        "--fail-over",
        "0%",
    ]);
    assert_eq!(code, 0);
}

#[test]
fn export_has_every_memory_event() {
    let t = trace_json("profiler/tb/worker1.pt.trace.json.gz");
    let own: Vec<i64> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "[memory]")
        .map(|e| e["args"]["Bytes"].as_i64().unwrap())
        .collect();
    let j = json_out(&[
        "export",
        fixture("profiler/tb/worker1.pt.trace.json.gz")
            .to_str()
            .unwrap(),
    ]);
    let ours: Vec<i64> = j["memory_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["bytes"].as_i64().unwrap())
        .collect();
    assert_eq!(ours, own);
}

#[test]
fn plot_marks_the_steps() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.svg");
    let (code, _, err) = run(&[
        "plot",
        fixture("profiler/tb/worker0.pt.trace.json.gz")
            .to_str()
            .unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(&out).unwrap();
    // the scheduled profile's two active steps
    assert!(
        svg.contains("step #2") && svg.contains("step #3"),
        "{svg:.300}"
    );
}

#[test]
fn bad_inputs_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let check = |path: &std::path::Path, needle: &str| {
        let (code, _, err) = run(&["summary", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(needle), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
    };
    check(&fixture("profiler/no_memory.json"), "profile_memory=True");
    let full = std::fs::read(fixture("profiler/export_chrome_trace.json")).unwrap();
    let cut = common::write_temp(dir.path(), "cut.json", &full[..full.len() / 2]);
    check(&cut, "cut short");
    let other = common::write_temp(dir.path(), "other.json", br#"{"loss": [1, 2]}"#);
    check(&other, "no `traceEvents`");
    let broken = common::write_temp(dir.path(), "broken.json", br#"{"traceEvents": [{"ph" 1}]}"#);
    check(&broken, "not valid JSON at byte");
    let gz = std::fs::read(fixture("profiler/tb/worker0.pt.trace.json.gz")).unwrap();
    let gz_cut = common::write_temp(dir.path(), "cut.json.gz", &gz[..gz.len() / 2]);
    check(&gz_cut, "cut short");
}

/// `memtrack summary PATH`: exit code, stderr, peak resident memory (MiB) and seconds. The
/// peak is the process's own high-water mark (VmHWM), read while it runs: the rusage of a
/// child spawned from this (large, multi-threaded) test process counts the test's memory too.
fn summary_measured(path: &std::path::Path) -> (i32, String, u64, f64) {
    let err_path = path.with_extension("stderr");
    let started = std::time::Instant::now();
    let mut child = common::memtrack_process()
        .arg("summary")
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let hwm = std::fs::read_to_string(&status_file).ok().and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        });
        peak_kib = peak_kib.max(hwm.unwrap_or(0));
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    let seconds = started.elapsed().as_secs_f64();
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    (
        status.code().unwrap_or(-1),
        stderr,
        peak_kib / 1024,
        seconds,
    )
}

fn gzip(text: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(text).unwrap();
    z.finish().unwrap()
}

/// A gzip of 1 GiB of white space inside `traceEvents` (concatenated members, 1 MiB on disk)
/// is refused as it inflates: the reader neither re-reads nor keeps it.
#[test]
fn a_gzip_bomb_of_white_space_is_refused_early_in_little_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = gzip(br#"{"traceEvents": ["#);
    let member = gzip(&vec![b' '; 16 << 20]);
    for _ in 0..64 {
        file.extend_from_slice(&member);
    }
    file.extend(gzip(b"]}"));
    let path = dir.path().join("ws.json.gz");
    std::fs::write(&path, &file).unwrap();
    let (code, err, rss, seconds) = summary_measured(&path);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("ws.json.gz") && err.contains("expands past") && err.contains("gunzip"),
        "{err}"
    );
    assert!(rss < 200, "peak RSS {rss} MiB");
    assert!(seconds < 30.0, "{seconds} s");
}

/// Values memtrack does not keep are passed over in constant memory, however long: one
/// memory event with a 64 MiB array and a 64 MiB string among its args.
#[test]
fn long_values_inside_an_event_are_skipped_in_little_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut t =
        br#"{"traceEvents": [{"name": "[memory]", "ph": "i", "ts": 1, "args": {"Input Dims": ["#
            .to_vec();
    for _ in 0..(32 << 20) {
        t.extend_from_slice(b"1,");
    }
    t.extend_from_slice(br#"1], "s": ""#);
    t.extend(std::iter::repeat_n(b'a', 64 << 20));
    t.extend_from_slice(
        br#"", "Bytes": 4096, "Total Allocated": 4096, "Total Reserved": 8192}}]}"#,
    );
    let path = dir.path().join("long.json");
    std::fs::write(&path, &t).unwrap();
    drop(t);
    let (code, err, rss, seconds) = summary_measured(&path);
    assert_eq!(code, 0, "{err}");
    assert!(rss < 120, "peak RSS {rss} MiB for a 128 MiB event");
    assert!(seconds < 30.0, "{seconds} s");
    let j = json_out(&["summary", path.to_str().unwrap(), "--format", "json"]);
    assert_eq!(j["devices"][0]["peak_allocated"]["bytes"], 4096);
}

/// One event whose kept fields (here its name) pass 4 MiB, a gzip trace with more kept events
/// than its compressed size can hold, text after the JSON, and memory figures no allocator
/// reports: each refused, naming the file and the event.
#[test]
fn hostile_traces_are_refused_with_what_was_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let mut long_name = br#"[{"ph": "X", "cat": "cpu_op", "name": ""#.to_vec();
    long_name.extend(std::iter::repeat_n(b'n', 5 << 20));
    long_name.extend_from_slice(br#"", "ts": 1, "dur": 1}]"#);
    let mut many = br#"{"traceEvents": ["#.to_vec();
    for _ in 0..(2 << 20) {
        many.extend_from_slice(br#"{"name":"[memory]","ts":1,"args":{"Bytes":8}},"#);
    }
    many.extend_from_slice(br#"{"name":"[memory]","ts":1}]}"#);
    let memory = |args: &str| {
        format!(r#"{{"traceEvents": [{{"name": "[memory]", "ts": 1, "args": {{{args}}}}}]}}"#)
            .into_bytes()
    };
    // `ts` as it stands in the event's members (empty: none), before a valid `Bytes`
    let timed = |ts: &str| {
        format!(r#"{{"traceEvents": [{{"name": "[memory]", {ts}"args": {{"Bytes": 8}}}}]}}"#)
            .into_bytes()
    };
    let range = |times: &str| {
        format!(r#"[{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", {times}}}]"#).into_bytes()
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("name.json", long_name, "trace event 0 has more than 4 MiB"),
        ("many.json.gz", gzip(&many), "kept events from its first"),
        (
            "tail.json",
            br#"{"traceEvents": []} {"traceEvents": []}"#.to_vec(),
            "expected the end of the file after the trace's JSON",
        ),
        (
            "inf.json",
            memory(r#""Bytes": 1e400"#),
            "`Bytes` is 1e400 bytes, which no allocator reports",
        ),
        (
            "neg.json",
            memory(r#""Bytes": 8, "Total Allocated": -9223372036854775808"#),
            "`Total Allocated` is -9223372036854775808 bytes, which no allocator reports",
        ),
        (
            "text.json",
            memory(r#""Bytes": "8 GB""#),
            "`Bytes` is `8 GB`, not a number of bytes",
        ),
        // a time read as 0 before: the event would have been placed at the trace's start
        (
            "ts_inf.json",
            timed(r#""ts": 1e400, "#),
            "trace event 0 (at byte 17) is a memory event memtrack cannot place in time: its `ts` is 1e400 microseconds, which no clock gives",
        ),
        (
            "ts_minus_inf.json",
            timed(r#""ts": -1e400, "#),
            "its `ts` is -1e400 microseconds, which no clock gives",
        ),
        (
            "ts_text.json",
            timed(r#""ts": "abc", "#),
            "its `ts` is `abc`, not a time in microseconds",
        ),
        ("ts_null.json", timed(r#""ts": null, "#), "it has no `ts`"),
        // white space alone, gzip-compressed (called a gzip'd pickle before)
        (
            "white.json.gz",
            gzip(b"  \n\n   "),
            "gzip-compressed, and inflated the JSON is nothing but 7 bytes of white space",
        ),
        ("ts_missing.json", timed(""), "it has no `ts`"),
        (
            "range_ts.json",
            range(r#""ts": 1e400, "dur": 1"#),
            "is a `cpu_op` range memtrack cannot place in time: its `ts` is 1e400",
        ),
        (
            "range_dur.json",
            range(r#""ts": 1, "dur": "x""#),
            "its `dur` is `x`, not a time in microseconds",
        ),
    ];
    for (name, bytes, says) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let (code, _, err) = run(&["summary", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(name) && err.contains(says), "{name}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // a free's negative `Bytes` is what the allocator reports: read
    let path = dir.path().join("free.json");
    std::fs::write(&path, memory(r#""Bytes": -4096, "Total Allocated": 0"#)).unwrap();
    let (code, _, err) = run(&["summary", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
}
