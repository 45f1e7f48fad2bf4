//! memtrack's numbers against what PyTorch's own `torch.cuda._memory_viz` computes on the same
//! files, with the real torch: `tests/py/check_memviz.py` runs under the Python that
//! `common::python_with_torch` finds.
//!
//! Without an importable torch the test prints a loud SKIPPED line and passes, unless `CI` is
//! set: there it fails, so CI never goes green without the cross-check.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command as Proc;

use common::root;
use serde_json::Value;

fn memtrack_json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    common::json_out(&a)
}

fn memtrack_text(args: &[&str]) -> String {
    common::stdout(args)
}

#[test]
fn memviz_crosscheck() {
    let dir = root().join("fixtures/snapshots");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pickle"))
        // a capture that contradicts itself stops _memory_viz ("Segment size mismatch");
        // tests/snapshot_consistency.rs checks what memtrack says of it
        .filter(|p| !p.to_string_lossy().contains("inconsistent"))
        .collect();
    files.sort();
    assert!(files.len() >= 7);
    let Some(py) = common::python_with_torch() else {
        return;
    };
    let out = Proc::new(&py)
        .arg(root().join("tests/py/check_memviz.py"))
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "check_memviz.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Value = serde_json::from_slice(&out.stdout).unwrap();
    for f in &files {
        let key = f.to_str().unwrap();
        let exp = &expected[key];
        let name = f.file_name().unwrap().to_string_lossy();

        // segsum totals, exact and as printed
        let seg = memtrack_json(&["segments", key]);
        let t = &seg["totals"];
        let s = &exp["segsum"];
        for (ours, theirs) in [
            ("reserved_bytes", "reserved"),
            ("allocated_bytes", "allocated"),
            ("free_external_bytes", "free_external"),
            ("free_internal_bytes", "free_internal"),
        ] {
            assert_eq!(t[ours], s[theirs], "{name}: {ours}");
        }
        let fs = |v: &Value| memtrack::analysis::memviz::format_size(v.as_i64().unwrap());
        let printed = &s["printed"];
        assert_eq!(
            t["segments"],
            printed["segments"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        );
        assert_eq!(
            fs(&t["reserved_bytes"]),
            printed["total_reserved"],
            "{name}"
        );
        assert_eq!(
            fs(&t["allocated_bytes"]),
            printed["total_allocated"],
            "{name}"
        );
        let free = match t["internal_percent"].as_f64() {
            Some(p) => format!("{} ({p:.1}% internal)", fs(&t["free_bytes"])),
            None => fs(&t["free_bytes"]),
        };
        assert_eq!(free, printed["total_free"], "{name}");

        // trace totals, and the listing line by line
        'trace: {
            let exp_tr = exp["trace"].as_object().unwrap();
            if exp_tr.is_empty() {
                // _memory_viz lists nothing; memtrack says there is nothing to list (exit 2)
                common::memtrack().args(["trace", key]).assert().code(2);
                break 'trace;
            }
            let tr = memtrack_json(&["trace", key]);
            let devs = tr["devices"].as_array().unwrap();
            assert_eq!(devs.len(), exp_tr.len(), "{name}: devices with a trace");
            for d in devs {
                let e = &exp_tr[&d["device"].to_string()];
                for k in [
                    "entries",
                    "alloc_bytes",
                    "free_completed_bytes",
                    "net_bytes",
                ] {
                    assert_eq!(d["totals"][k], e[k], "{name}: trace {k}");
                }
            }
            // segment_map names a segment in our listing and not in _memory_viz's (it prints the
            // dict), so names diverge after one: compare such files by totals only
            let lines = exp["trace_lines"].as_array().filter(|l| {
                !l.iter()
                    .any(|x| x.as_str().unwrap().starts_with("{'action': 'segment_map'"))
            });
            if let Some(lines) = lines {
                let ours: Vec<String> = memtrack_text(&["trace", key])
                    .lines()
                    .filter(|l| !l.starts_with("TOTAL MEM: "))
                    .map(str::to_string)
                    .collect();
                assert_eq!(ours.len(), lines.len(), "{name}: listing length");
                let seg_addr: BTreeMap<u64, u64> = seg["segments"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| (r["index"].as_u64().unwrap(), r["address"].as_u64().unwrap()))
                    .collect();
                let mut compared = 0;
                let mut placed_better = 0;
                for (i, (a, b)) in ours.iter().zip(lines).enumerate() {
                    let b = b.as_str().unwrap();
                    // _memory_viz prints a dict repr for actions it does not list (segment_map,
                    // snapshot, ...); ours has a line of its own there
                    if b.starts_with('{') {
                        continue;
                    }
                    // _memory_viz looks final segments up by `allocated_size`, so a block past a
                    // segment's allocated prefix prints as MEM[address]; ours finds its segment
                    if a != b {
                        if let Some((ours_name, rest)) = a.split_once(" = seg_") {
                            let (idx, rest) = rest.split_once('[').unwrap();
                            let (off, size) = rest.split_once(':').unwrap();
                            let base = seg_addr[&idx.parse::<u64>().unwrap()];
                            let theirs = format!(
                                "{ours_name} = MEM[{}:{size}",
                                base + off.parse::<u64>().unwrap()
                            );
                            assert_eq!(theirs, b, "{name}: trace line {}", i + 1);
                            placed_better += 1;
                            continue;
                        }
                    }
                    assert_eq!(a, b, "{name}: trace line {}", i + 1);
                    compared += 1;
                }
                assert!(compared > 0);
                eprintln!(
                "{name}: {compared} trace lines identical, {placed_better} placed in their segment where _memory_viz says MEM"
            );
            }
        }

        // bytes by allocation site at the end, with _memory_viz's frame filter
        let top = memtrack_json(&["top", key, "--top", "1000000000"]);
        for rep in top.as_array().unwrap() {
            let dev = rep["device"].to_string();
            let ours: BTreeMap<String, u64> = rep["rows"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["end_bytes"].as_u64().unwrap() > 0)
                .map(|r| {
                    (
                        r["location"].as_str().unwrap().to_string(),
                        r["end_bytes"].as_u64().unwrap(),
                    )
                })
                .collect();
            let theirs: BTreeMap<String, u64> = exp["sites_at_end"][&dev]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
                        .filter(|(_, v)| *v > 0)
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(ours, theirs, "{name}: sites at end, device {dev}");
        }

        for (n, s) in exp["format_size"].as_object().unwrap() {
            assert_eq!(
                memtrack::analysis::memviz::format_size(n.parse().unwrap()),
                s.as_str().unwrap(),
                "_format_size({n})"
            );
        }
    }
}
