//! memtrack against PyTorch itself (needs torch: skipped loudly outside CI, required in CI).
//! - `summary` lists exactly what `MemoryTracker.summary` lists, in the same order.
//! - what memtrack writes, `MemoryTracker().load()` and `show_traces()` read.

mod common;

use std::path::Path;
use std::process::Command;

use common::{fixture, memtrack, python_with_torch, root};
use serde_json::Value;

const MIB: f64 = 1024.0 * 1024.0;

/// PyTorch's summary of `stats` for each of `tops` (one interpreter start: importing torch
/// takes seconds).
fn reference(py: &Path, stats: &Path, tops: &[usize], pngs: Option<&Path>) -> Value {
    let tops: Vec<String> = tops.iter().map(usize::to_string).collect();
    let mut cmd = Command::new(py);
    cmd.arg(root().join("tests/py/tracker_reference.py"))
        .arg(stats)
        .arg(tops.join(","));
    if let Some(dir) = pngs {
        cmd.arg(dir);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ours(stats: &Path, top: usize) -> Value {
    let out = memtrack()
        .args(["summary", "--format", "json", "--top", &top.to_string()])
        .arg(stats)
        .output()
        .unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn assert_same_top(stats: &Path, reference: &Value, top: usize, ours: &Value) {
    let theirs = reference["top"][top.to_string()].as_array().unwrap();
    let mine = ours["top_ops"].as_array().unwrap();
    assert_eq!(theirs.len(), mine.len(), "{}", stats.display());
    for (t, m) in theirs.iter().zip(mine) {
        assert_eq!(
            t[0],
            m["op"],
            "{}: same op at the same rank",
            stats.display()
        );
        assert_eq!(
            t[1].as_f64().unwrap(),
            m["generated_bytes"].as_f64().unwrap() / MIB
        );
    }
}

#[test]
fn summary_lists_what_memorytracker_lists() {
    let Some(py) = python_with_torch() else {
        return;
    };
    for f in [
        "memory_tracker_cpu_torch2.15.0.pkl",
        "memory_tracker_without_op_index.pkl",
        "synthetic_2000_ops.pkl",
    ] {
        let stats = fixture(&format!("tracker/{f}"));
        let tops = [5, 20, 5000];
        let r = reference(&py, &stats, &tops, None);
        for top in tops {
            assert_same_top(&stats, &r, top, &ours(&stats, top));
        }
    }
}

#[test]
fn what_memtrack_writes_pytorch_loads_and_draws() {
    let Some(py) = python_with_torch() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let stats =
        memtrack::formats::load_tracker(&fixture("tracker/synthetic_2000_ops.pkl")).unwrap();
    let written = dir.path().join("rewritten.pkl");
    memtrack::formats::tracker::write(&stats, &written).unwrap();
    let r = reference(&py, &written, &[20], Some(dir.path()));
    assert_eq!(r["ops"], 2000);
    assert_eq!(r["op_index"], 2000);
    assert_eq!(r["markers"]["fw_bw_boundary"], 1000);
    assert_eq!(r["figures"], 4, "show_traces draws its four figures");
    for n in 1..=4 {
        let png = std::fs::metadata(dir.path().join(format!("figure{n}.png"))).unwrap();
        assert!(png.len() > 1000);
    }
    assert_same_top(&written, &r, 20, &ours(&written, 20));
}
