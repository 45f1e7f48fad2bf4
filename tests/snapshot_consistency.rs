//! A capture that contradicts itself (Mosaic's test snapshot: blocks that do not add up to
//! their segment's size) is read on, with a warning naming every such segment, in text and as
//! one JSON line under `--format json`, from every command that reads a snapshot. The segments
//! that disagree are found independently by tests/py/segment_consistency.py (standard library).

mod common;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const MOSAIC: &str = "snapshots/mosaic_test_output_inconsistent.pickle";

/// (device, address, total_size, block bytes) of each segment that contradicts itself.
fn python_oracle(file: &PathBuf) -> Vec<(u64, u64, u64, u64)> {
    let py = common::python().expect("python for the oracle");
    let script = common::root().join("tests/py/segment_consistency.py");
    let out = Command::new(py).arg(script).arg(file).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn warning_json(stderr: &str) -> Value {
    let line = stderr
        .lines()
        .find(|l| l.contains("inconsistent_snapshot"))
        .unwrap_or_else(|| panic!("no JSON warning in {stderr:?}"));
    serde_json::from_str(line).unwrap()
}

#[test]
fn every_command_warns_of_each_segment_whose_blocks_do_not_add_up() {
    let file = common::fixture(MOSAIC);
    let expected = python_oracle(&file);
    assert_eq!(expected.len(), 5);
    let path = file.to_str().unwrap();
    let commands: [&[&str]; 5] = [
        &["segments", path],
        &["summary", path],
        &["top", path],
        &["trace", path],
        &["plot", path, "-o", "-"],
    ];
    for args in commands {
        let (code, _, err) = common::run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let warnings: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("contradicts itself"))
            .collect();
        assert_eq!(warnings.len(), 1, "{args:?}: once per read: {err}");
        assert!(warnings[0].contains("in 5 segment(s)"), "{args:?}: {err}");
        let (_, address, total, blocks) = expected[0];
        assert!(
            warnings[0].contains(&format!(
                "0x{address:x}: its blocks add up to {blocks} bytes, its size is {total}"
            )),
            "{args:?}: {err}"
        );
    }
    for cmd in ["segments", "summary", "top", "simulate"] {
        let (code, out, err) = common::run(&[cmd, path, "--format", "json"]);
        assert_eq!(code, 0, "{cmd}: {err}");
        serde_json::from_str::<Value>(&out)
            .unwrap_or_else(|e| panic!("{cmd}: stdout is JSON: {e}"));
        let w = warning_json(&err);
        let got: Vec<(u64, u64, u64, u64)> = w["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let n = |k: &str| s[k].as_u64().unwrap();
                (n("device"), n("address"), n("total_size"), n("block_bytes"))
            })
            .collect();
        assert_eq!(got, expected, "{cmd}");
    }
}

#[test]
fn consistent_real_captures_get_no_warning() {
    for name in [
        "cs336_medium_512_training",
        "verl_mem_no_trace_multi_pool",
        "flexgen_oom_snapshot_legacy",
        "cs336_ctx256_forward_empty_cache_start",
    ] {
        let file = common::fixture(&format!("snapshots/{name}.pickle"));
        assert!(python_oracle(&file).is_empty(), "{name}");
        let (code, _, err) = common::run(&["segments", file.to_str().unwrap()]);
        assert_eq!(code, 0);
        assert!(!err.contains("contradicts itself"), "{name}: {err}");
    }
}
