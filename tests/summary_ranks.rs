//! `summary` of several allocator snapshots (one per rank): the table's figures against this
//! test's own replay of each fixture's trace, and the same table reduced from each file's
//! `summary --format json`.

mod common;

use std::path::PathBuf;

use common::{memtrack, run};
use memtrack::model::snapshot::{Action, BlockState};
use serde_json::Value;

/// Real captures standing in for the ranks of a job (one has no trace, one ran out of memory,
/// one has two devices).
const RANKS: &[&str] = &[
    "cs336_small_mem_snapshot",
    "cs336_medium_512_training",
    "cs336_windows_partial_frames",
    "h100_gpt2_train_exit",
    "h100_resnet18_train_exit",
    "h100/oom_default",
    "synthetic_multi_device_oom",
    "verl_mem_no_trace_multi_pool",
];

fn snapshot(name: &str) -> PathBuf {
    common::fixture(&format!("snapshots/{name}.pickle"))
}

fn paths() -> Vec<String> {
    RANKS
        .iter()
        .map(|n| snapshot(n).to_str().unwrap().to_string())
        .collect()
}

/// What this test expects of one device: peaks from its own replay of the trace.
#[derive(Debug, PartialEq)]
struct Expected {
    device: u32,
    trace_entries: usize,
    peak_allocated: Option<i64>,
    peak_reserved: Option<i64>,
    reserved_at_peak_allocated: Option<i64>,
    reserved_at_capture: u64,
    ooms: usize,
    first_oom_asked: Option<u64>,
}

/// Replays each device's trace from the bytes the final state implies before it: allocated
/// moves at alloc and free_requested, reserved at segment events; the peaks are the first
/// highest values after an event, and reserved is read where allocated peaked.
fn replay(name: &str) -> Vec<Expected> {
    let snap = memtrack::formats::load_snapshot(&snapshot(name)).unwrap();
    let mut out = Vec::new();
    for device in snap.devices() {
        let segments: Vec<_> = snap
            .segments
            .iter()
            .filter(|s| s.device == device)
            .collect();
        let reserved_end: i64 = segments.iter().map(|s| s.total_size as i64).sum();
        let allocated_end: i64 = segments
            .iter()
            .flat_map(|s| s.blocks(&snap.blocks))
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.requested_size.unwrap_or(b.size) as i64)
            .sum();
        let events = snap
            .traces
            .get(device as usize)
            .map_or(&[][..], |t| &t.events[..]);
        let step = |e: &memtrack::model::snapshot::TraceEvent| -> (i64, i64) {
            let s = e.size as i64;
            match e.action {
                Action::Alloc => (s, 0),
                Action::FreeRequested => (-s, 0),
                Action::SegmentAlloc | Action::SegmentMap => (0, s),
                Action::SegmentFree | Action::SegmentUnmap => (0, -s),
                _ => (0, 0),
            }
        };
        let (net_a, net_r) = events
            .iter()
            .map(step)
            .fold((0, 0), |(a, r), (da, dr)| (a + da, r + dr));
        let (mut a, mut r) = (allocated_end - net_a, reserved_end - net_r);
        let (mut peak_a, mut peak_r, mut r_at_a): (Option<i64>, Option<i64>, Option<i64>) =
            (None, None, None);
        for e in events {
            let (da, dr) = step(e);
            a += da;
            r += dr;
            if peak_a.is_none_or(|p| a > p) {
                peak_a = Some(a);
                r_at_a = Some(r);
            }
            if peak_r.is_none_or(|p| r > p) {
                peak_r = Some(r);
            }
        }
        let ooms: Vec<u64> = events
            .iter()
            .filter(|e| e.action == Action::Oom)
            .map(|e| e.size)
            .collect();
        out.push(Expected {
            device,
            trace_entries: events.len(),
            peak_allocated: peak_a,
            peak_reserved: peak_r,
            reserved_at_peak_allocated: r_at_a,
            reserved_at_capture: reserved_end as u64,
            ooms: ooms.len(),
            first_oom_asked: ooms.first().copied(),
        });
    }
    out
}

fn got(d: &Value) -> Expected {
    Expected {
        device: d["device"].as_u64().unwrap() as u32,
        trace_entries: d["trace_entries"].as_u64().unwrap() as usize,
        peak_allocated: d["peak_allocated_bytes"].as_i64(),
        peak_reserved: d["peak_reserved_bytes"].as_i64(),
        reserved_at_peak_allocated: d["reserved_at_peak_allocated_bytes"].as_i64(),
        reserved_at_capture: d["reserved_bytes"].as_u64().unwrap(),
        ooms: d["ooms"].as_u64().unwrap() as usize,
        first_oom_asked: d["first_oom_requested_bytes"].as_u64(),
    }
}

fn summary(files: &[String], extra: &[&str]) -> String {
    let mut args = vec!["summary"];
    args.extend(files.iter().map(String::as_str));
    args.extend(extra);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    out
}

#[test]
fn every_rank_row_is_its_own_replay() {
    let files = paths();
    let table: Value = serde_json::from_str(&summary(&files, &["--format", "json"])).unwrap();
    assert_eq!(table["kind"], "snapshot_ranks");
    let listed = table["files"].as_array().unwrap();
    assert_eq!(listed.len(), RANKS.len(), "every file, in order");
    let mut oomed = 0;
    for (name, f) in RANKS.iter().zip(listed) {
        assert_eq!(f["file"], snapshot(name).to_str().unwrap());
        let want = replay(name);
        let have: Vec<Expected> = f["devices"].as_array().unwrap().iter().map(got).collect();
        assert_eq!(have, want, "{name}");
        for (d, w) in f["devices"].as_array().unwrap().iter().zip(&want) {
            oomed += w.ooms;
            let frag = d["fragmentation_at_peak"].as_f64();
            match (w.peak_allocated, w.reserved_at_peak_allocated) {
                (Some(a), Some(r)) if r > 0 => {
                    let f = frag.expect("a fragmentation at the peak");
                    assert!((f - (1.0 - a as f64 / r as f64)).abs() < 1e-12, "{name}");
                }
                _ => assert_eq!(frag, None, "{name}"),
            }
        }
    }
    assert!(oomed >= 2, "the fixtures include OOMs: {oomed}");
    assert!(
        listed
            .iter()
            .any(|f| f["devices"][0]["peak_reserved_bytes"].is_null()),
        "one capture has no trace"
    );
}

/// The median of the peaks reserved (reserved at capture without a trace), and the file
/// furthest from it, by this test's replay.
#[test]
fn the_outlier_named_is_the_furthest_from_the_median() {
    let mut rows: Vec<(&str, i64)> = Vec::new();
    for name in RANKS {
        for d in replay(name) {
            rows.push((
                name,
                d.peak_reserved.unwrap_or(d.reserved_at_capture as i64),
            ));
        }
    }
    let mut v: Vec<i64> = rows.iter().map(|r| r.1).collect();
    v.sort();
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0
    };
    let away = |x: i64| (x as f64 / median - 1.0).abs();
    let furthest = rows
        .iter()
        .fold(rows[0], |b, r| if away(r.1) > away(b.1) { *r } else { b });
    let table: Value = serde_json::from_str(&summary(&paths(), &["--format", "json"])).unwrap();
    assert_eq!(table["median_peak_reserved_bytes"].as_f64(), Some(median));
    assert_eq!(
        table["outlier"]["file"],
        snapshot(furthest.0).to_str().unwrap()
    );
    let text = summary(&paths(), &["--units", "B"]);
    assert!(
        text.contains(&format!(
            "Outlier: {} (device 0)",
            snapshot(furthest.0).display()
        )),
        "{text}"
    );
    // the OOM's size asked, as the trace has it
    let oom = replay("h100/oom_default")[0].first_oom_asked.unwrap();
    assert!(text.contains(&format!("asked {oom} B")), "{text}");
}

/// The map on the user's cluster (one `summary --format json` beside each capture) and the
/// reduce (`summary` of those outputs) give the table reading the pickles gives, in every
/// format; and a reduced table's JSON reduces again (per node, then for the job).
#[test]
fn the_table_reduced_from_json_outputs_is_the_table_of_the_pickles() {
    let dir = tempfile::tempdir().unwrap();
    let files = paths();
    let mut outputs = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let out = dir.path().join(format!("rank{i}.json"));
        memtrack()
            .args([
                "summary",
                f,
                "--format",
                "json",
                "-o",
                out.to_str().unwrap(),
            ])
            .assert()
            .success();
        outputs.push(out.to_str().unwrap().to_string());
    }
    for format in ["text", "json", "csv", "markdown"] {
        let from_pickles = summary(&files, &["--format", format]);
        let from_json = summary(&outputs, &["--format", format]);
        assert_eq!(from_json, from_pickles, "{format}");
    }
    let node = dir.path().join("node0.json");
    let mut first_half: Vec<&str> = vec!["summary"];
    first_half.extend(outputs[..3].iter().map(String::as_str));
    first_half.extend(["--format", "json", "-o", node.to_str().unwrap()]);
    memtrack().args(&first_half).assert().success();
    let mut twice = vec![node.to_str().unwrap().to_string()];
    twice.extend(outputs[3..].iter().cloned());
    assert_eq!(summary(&twice, &[]), summary(&files, &[]));
}

#[test]
fn a_stats_file_among_snapshots_is_refused_by_name() {
    let stats = common::fixture("tracker/synthetic_2000_ops.pkl");
    let snap = snapshot("cs336_small_mem_snapshot");
    let (code, out, err) = run(&["summary", snap.to_str().unwrap(), stats.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.contains("synthetic_2000_ops.pkl: is a stats file"),
        "{err}"
    );
    // JSON that is not a summary of snapshots
    let dir = tempfile::tempdir().unwrap();
    let bad = common::write_temp(dir.path(), "other.json", b"{\"ops\": 3}");
    let (code, _, err) = run(&["summary", snap.to_str().unwrap(), bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("other.json: JSON without a `kind`"), "{err}");
}
