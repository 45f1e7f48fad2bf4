//! End-to-end tests of the snapshot commands over every fixture: golden text output, JSON
//! checked for internal consistency, and errors with exit code 2.
//!
//! Golden files: `tests/golden/<fixture>/<command>.txt`. After an intended change of output,
//! regenerate them with `UPDATE_GOLDEN=1 cargo test --test snapshot_cli` and review the diff.

mod common;

use std::path::{Path, PathBuf};

use common::{memtrack, root};
use serde_json::Value;

const FIXTURES: &[&str] = &[
    "cs336_small_mem_snapshot",
    "cs336_medium_512_training",
    "cs336_windows_partial_frames",
    "flexgen_oom_snapshot_legacy",
    "verl_mem_no_trace_multi_pool",
    "synthetic_multi_device_oom",
    "synthetic_bare_segment_list",
    // trace events with odd values (aux text, unknown action, float time, bool stream, None
    // frames) over two devices: the streamed reading's less common branches
    "synthetic_flat_events",
];

fn snapshot(name: &str) -> PathBuf {
    common::fixture(&format!("snapshots/{name}.pickle"))
}

fn run_ok(args: &[&str]) -> String {
    common::stdout(args)
}

fn json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    common::json_out(&a)
}

fn golden(name: &str, cmd: &str, actual: &str) {
    common::golden(&format!("{name}/{cmd}.txt"), actual)
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn golden_text_output_of_every_fixture() {
    for name in FIXTURES {
        let f = snapshot(name);
        for cmd in ["summary", "segments", "top", "trace"] {
            if cmd == "trace" && NO_TRACE.contains(name) {
                continue; // an error: without_history_trace_and_plot_exit_2
            }
            let out = run_ok(&[cmd, p(&f)]);
            golden(name, cmd, &out);
        }
    }
}

/// Fixtures taken without memory history: no trace events.
const NO_TRACE: &[&str] = &[
    "verl_mem_no_trace_multi_pool",
    "synthetic_bare_segment_list",
];

#[test]
fn without_history_trace_and_plot_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("t.svg");
    for name in NO_TRACE {
        let f = snapshot(name);
        for args in [vec!["trace", p(&f)], vec!["plot", p(&f), "-o", p(&svg)]] {
            memtrack()
                .args(&args)
                .assert()
                .code(2)
                .stdout("")
                .stderr(predicates::str::contains(format!("{name}.pickle")))
                .stderr(predicates::str::contains(
                    "call torch.cuda.memory._record_memory_history(stacks=\"all\") at the start",
                ));
        }
    }
    // a device of a file with a trace, whose own trace is empty
    let f = snapshot("synthetic_multi_device_oom");
    let devices = json(&["summary", p(&f)]);
    for d in devices["devices"].as_array().unwrap() {
        let args = ["trace", p(&f), "--device", &d["device"].to_string()];
        if d["trace_entries"].as_u64().unwrap() == 0 {
            memtrack().args(args).assert().code(2);
        } else {
            memtrack().args(args).assert().success();
        }
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned int: {v}"))
}

#[test]
fn summary_json_adds_up() {
    for name in FIXTURES {
        let f = snapshot(name);
        let s = json(&["summary", p(&f)]);
        assert_eq!(s["kind"], "allocator_snapshot");
        for d in s["devices"].as_array().unwrap() {
            let reserved = u(&d["reserved_bytes"]);
            let active = u(&d["active_bytes"]);
            let allocated = u(&d["allocated_bytes"]);
            let free = u(&d["free_bytes"]);
            assert_eq!(active + free, reserved, "{name}: active + free = reserved");
            assert!(allocated <= active && u(&d["requested_bytes"]) <= active);
            assert_eq!(
                active - u(&d["requested_bytes"]),
                u(&d["internal_fragmentation_bytes"])
            );
            assert_eq!(active - allocated, u(&d["pending_free_bytes"]), "{name}");
            let pools = d["pools"].as_array().unwrap();
            let sum = |k: &str| pools.iter().map(|p| u(&p[k])).sum::<u64>();
            assert_eq!(sum("reserved_bytes"), reserved);
            assert_eq!(sum("allocated_bytes"), allocated);
            assert_eq!(sum("free_bytes"), free);
            assert_eq!(
                pools.iter().map(|p| u(&p["segments"])).sum::<u64>(),
                u(&d["segments"])
            );
            assert_eq!(d["counter_mismatches"], 0, "{name}");
        }
    }
}

#[test]
fn segments_top_and_trace_agree_with_each_other() {
    for name in FIXTURES {
        let f = snapshot(name);
        let seg = json(&["segments", p(&f)]);
        let t = &seg["totals"];
        assert_eq!(
            u(&t["allocated_bytes"]) + u(&t["free_external_bytes"]) + u(&t["free_internal_bytes"]),
            u(&t["reserved_bytes"]),
            "{name}: segsum accounting"
        );
        let rows = seg["segments"].as_array().unwrap();
        assert_eq!(rows.len() as u64, u(&t["segments"]));
        assert_eq!(
            rows.iter().map(|r| u(&r["allocated_bytes"])).sum::<u64>(),
            u(&t["allocated_bytes"])
        );
        let summary = json(&["summary", p(&f)]);
        let top = json(&["top", p(&f), "--top", "1000000"]);
        let mut end_total = 0;
        for (r, d) in top
            .as_array()
            .unwrap()
            .iter()
            .zip(summary["devices"].as_array().unwrap())
        {
            let rows = r["rows"].as_array().unwrap();
            assert_eq!(
                rows.len() as u64,
                u(&r["sites"]),
                "{name}: all sites listed"
            );
            let end: u64 = rows.iter().map(|x| u(&x["end_bytes"])).sum();
            assert_eq!(end, u(&r["end_bytes"]), "{name}: sites add up at the end");
            end_total += end;
            if let Some(peak) = r["peak_bytes"].as_u64() {
                let sum: u64 = rows.iter().map(|x| u(&x["peak_bytes"])).sum();
                assert_eq!(sum, peak, "{name}: sites add up at the peak");
                // the replayed live set at the peak is the timeline's peak
                assert_eq!(
                    peak as i64,
                    d["peak_allocated"]["bytes"].as_i64().unwrap(),
                    "{name}: peak live set = peak allocated"
                );
            }
        }
        assert_eq!(
            end_total,
            u(&t["allocated_bytes"]),
            "{name}: live at end = total_allocated"
        );
        if NO_TRACE.contains(name) {
            continue;
        }
        let tr = json(&["trace", p(&f)]);
        for d in tr["devices"].as_array().unwrap() {
            let tt = &d["totals"];
            assert_eq!(
                u(&tt["entries"]) as usize,
                d["events"].as_array().unwrap().len()
            );
            assert_eq!(
                tt["net_bytes"].as_i64().unwrap(),
                u(&tt["alloc_bytes"]) as i64 - u(&tt["free_completed_bytes"]) as i64
            );
        }
    }
}

/// `summary`, `segments` (text, JSON and SVG) show one set of numbers under one set of names.
#[test]
fn summary_and_segments_agree() {
    let dir = tempfile::tempdir().unwrap();
    for name in FIXTURES {
        let f = snapshot(name);
        let sum = json(&["summary", p(&f)]);
        let seg = json(&["segments", p(&f)]);
        let a = &seg["totals"]["allocator"];
        for key in [
            "allocated_bytes",
            "active_bytes",
            "pending_free_bytes",
            "free_bytes",
            "requested_bytes",
            "internal_fragmentation_bytes",
        ] {
            let total: u64 = sum["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| u(&d[key]))
                .sum();
            assert_eq!(u(&a[key]), total, "{name}: {key}");
        }
        let svg = dir.path().join("s.svg");
        memtrack()
            .args(["segments", p(&f), "-o", p(&svg)])
            .assert()
            .success();
        let svg = std::fs::read_to_string(&svg).unwrap();
        if let [d] = &sum["devices"].as_array().unwrap()[..] {
            // the SVG header prints the summary's figures as the summary's text does
            let text = run_ok(&["summary", p(&f)]);
            for key in ["allocated", "free"] {
                let line = text
                    .lines()
                    .find(|l| l.trim_start().starts_with(&format!("{key} ")))
                    .unwrap();
                let figure: Vec<&str> = line.split_whitespace().skip(1).take(2).collect();
                let shown = format!("{key} {}", figure.join(" "));
                assert!(svg.contains(&shown), "{name}: SVG lacks '{shown}'");
            }
            assert!(u(&d["free_bytes"]) == u(&a["free_bytes"]));
        }
    }
}

#[test]
fn devices_are_selected_and_checked() {
    let f = snapshot("synthetic_multi_device_oom");
    let s = json(&["summary", p(&f), "--device", "1"]);
    assert_eq!(s["devices"].as_array().unwrap().len(), 1);
    assert_eq!(s["devices"][0]["device"], 1);
    assert_eq!(s["devices"][0]["ooms"][0]["requested_bytes"], 1u64 << 30);
    assert_eq!(
        s["devices"][0]["ooms"][0]["device_free_bytes"],
        100u64 << 20
    );
    for cmd in ["summary", "segments", "top", "trace", "plot"] {
        memtrack()
            .args([cmd, p(&f), "--device", "2"])
            .assert()
            .code(2)
            .stderr(predicates::str::contains("no device 2"));
    }
    let tr = run_ok(&["trace", p(&f), "--device", "0"]);
    assert!(tr.starts_with("Device 0 ---"));
    assert!(!tr.contains("Device 1"));
}

#[test]
fn folded_stacks_are_flamegraph_input() {
    let f = snapshot("cs336_medium_512_training");
    let out = run_ok(&["top", p(&f), "--folded"]);
    let mut total = 0u64;
    for line in out.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("stack and count");
        assert!(!stack.is_empty() && !stack.contains('\n'));
        total += n.parse::<u64>().expect("byte count");
    }
    let seg = json(&["segments", p(&f)]);
    assert_eq!(total, u(&seg["totals"]["allocated_bytes"]));
    // several devices: one root per device
    let m = snapshot("synthetic_multi_device_oom");
    let out = run_ok(&["top", p(&m), "--folded", "--at", "peak"]);
    assert!(out.lines().any(|l| l.starts_with("cuda:0;")));
    assert!(out.lines().any(|l| l.starts_with("cuda:1;")));
}

#[test]
fn plots_and_svgs_are_written() {
    let dir = tempfile::tempdir().unwrap();
    // a trace of one event (flexgen's `snapshot` entry) has nothing to draw over time: said, exit 2
    memtrack()
        .args([
            "plot",
            p(&snapshot("flexgen_oom_snapshot_legacy")),
            "-o",
            p(&dir.path().join("one.svg")),
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "a single event (cuda:0: snapshot of 11.03 GiB)",
        ));
    for name in ["cs336_medium_512_training", "synthetic_multi_device_oom"] {
        let svg = dir.path().join(format!("{name}.svg"));
        memtrack()
            .args(["plot", p(&snapshot(name)), "-o", p(&svg)])
            .assert()
            .success();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg") && text.contains("allocated"));
        let seg = dir.path().join(format!("{name}.segments.svg"));
        memtrack()
            .args(["segments", p(&snapshot(name)), "-o", p(&seg)])
            .assert()
            .success();
        let text = std::fs::read_to_string(&seg).unwrap();
        assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    }
    let seg = dir.path().join("flexgen.segments.svg");
    memtrack()
        .args([
            "segments",
            p(&snapshot("flexgen_oom_snapshot_legacy")),
            "-o",
            p(&seg),
        ])
        .assert()
        .success();
    let multi = std::fs::read_to_string(dir.path().join("synthetic_multi_device_oom.svg")).unwrap();
    assert!(multi.contains("OOM") && multi.contains("cuda:1"));
    // no trace: a clear error, not an empty picture
    memtrack()
        .args([
            "plot",
            p(&snapshot("verl_mem_no_trace_multi_pool")),
            "-o",
            p(&dir.path().join("x.svg")),
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("_record_memory_history"));
}

#[test]
fn diff_gates_on_peak_growth() {
    let small = snapshot("cs336_small_mem_snapshot");
    let medium = snapshot("cs336_medium_512_training");
    let same = json(&["diff", p(&small), p(&small), "--fail-over", "0"]);
    assert_eq!(same["gate"]["failed"], false);
    assert_eq!(same["sites"].as_array().unwrap().len(), 0);
    assert_eq!(same["segments_only_after"].as_array().unwrap().len(), 0);
    // in text, nothing changed is said, not "0 of 0 sites" over an empty table
    let same_text = run_ok(&["diff", p(&small), p(&small)]);
    assert!(
        same_text.contains("no allocation site changed"),
        "{same_text}"
    );
    assert!(!same_text.contains("0 of 0"), "{same_text}");
    assert!(!same_text.contains("end growth"), "{same_text}");
    memtrack()
        .args(["diff", p(&small), p(&medium), "--fail-over", "5%"])
        .assert()
        .code(1)
        .stdout(predicates::str::contains("FAIL"));
    memtrack()
        .args(["diff", p(&medium), p(&small), "--fail-over", "1GiB"])
        .assert()
        .success();
    let d = json(&["diff", p(&small), p(&medium)]);
    let m = &d["metrics"][0];
    assert_eq!(m["name"], "peak allocated");
    assert_eq!(
        m["growth_bytes"].as_f64().unwrap(),
        m["after_bytes"].as_f64().unwrap() - m["before_bytes"].as_f64().unwrap()
    );
    // stats files
    let t = root().join("fixtures/tracker/synthetic_2000_ops.pkl");
    let t0 = root().join("fixtures/tracker/memory_tracker_cpu_torch2.15.0.pkl");
    let sd = json(&["diff", p(&t0), p(&t)]);
    assert_eq!(sd["kind"], "stats_diff");
    assert_eq!(sd["peaks"].as_array().unwrap().len(), 3);
    memtrack()
        .args(["diff", p(&t0), p(&t), "--fail-over", "10MiB"])
        .assert()
        .code(1);
    memtrack()
        .args(["diff", p(&t), p(&t), "--fail-over", "0%"])
        .assert()
        .success();
    let same_stats = run_ok(&["diff", p(&t), p(&t)]);
    for said in [
        "no op changed the memory it generates",
        "no module changed what its ops generate or its peak",
    ] {
        assert!(same_stats.contains(said), "{same_stats}");
    }
    assert!(!same_stats.contains("0 of 0"), "{same_stats}");
    // a section that changed keeps its counts and table
    let changed = run_ok(&["diff", p(&t0), p(&t)]);
    assert!(changed.contains("ops that changed"), "{changed}");
    // kinds must match
    memtrack()
        .args(["diff", p(&t), p(&small)])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("one kind"));
}

#[test]
fn bad_inputs_exit_2_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(snapshot("cs336_small_mem_snapshot")).unwrap();
    let cut = dir.path().join("cut.pickle");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    for cmd in ["summary", "segments", "top", "trace"] {
        memtrack()
            .args([cmd, p(&cut)])
            .assert()
            .code(2)
            .stderr(predicates::str::contains(
                "the file ends before its pickle does: it was cut short",
            ));
    }
    let tracker = root().join("fixtures/tracker/synthetic_2000_ops.pkl");
    memtrack()
        .args(["segments", p(&tracker)])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("allocator snapshots"));
    // a segment whose size is a string
    let bad = dir.path().join("bad.pickle");
    // {'segments': [{'total_size': 'x', 'blocks': []}]}, protocol 2
    std::fs::write(
        &bad,
        b"\x80\x02}q\x00X\x08\x00\x00\x00segmentsq\x01]q\x02}q\x03(X\x0a\x00\x00\x00total_sizeq\x04X\x01\x00\x00\x00xq\x05X\x06\x00\x00\x00blocksq\x06]q\x07uas.",
    )
    .unwrap();
    memtrack()
        .args(["summary", p(&bad)])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "segments[0].total_size: expected an int, found str",
        ));
}

#[test]
fn export_writes_the_snapshot_model() {
    let f = snapshot("synthetic_multi_device_oom");
    let v: Value = serde_json::from_str(&run_ok(&["export", p(&f)])).unwrap();
    assert_eq!(v["kind"], "allocator_snapshot");
    assert_eq!(v["devices"], serde_json::json!([0, 1]));
    assert_eq!(v["device_traces"].as_array().unwrap().len(), 3);
    let frames = v["frames"].as_array().unwrap().len() as u64;
    for s in v["stacks"].as_array().unwrap() {
        for f in s.as_array().unwrap() {
            assert!(u(f) < frames);
        }
    }
    let e = &v["device_traces"][0]["events"][6];
    assert_eq!(e["action"], "oom");
    assert_eq!(e["device_free"], 1u64 << 20);
    assert_eq!(
        v["device_traces"][0]["events"][16]["action"],
        "future_action"
    );
}

#[test]
fn frames_are_interned_once() {
    // the medium capture repeats its frame lists thousands of times
    let f = snapshot("cs336_medium_512_training");
    let v: Value = serde_json::from_str(&run_ok(&["export", p(&f)])).unwrap();
    assert_eq!(v["stacks"].as_array().unwrap().len(), 189);
    assert_eq!(v["frames"].as_array().unwrap().len(), 538);
}

/// `trace` puts the events aside in a temporary file while it reads: where none can be made,
/// it says so, names the directory and TMPDIR, and exits 2 without writing a listing.
#[test]
fn trace_without_a_temporary_directory_says_so() {
    let f = snapshot("cs336_small_mem_snapshot");
    let missing = std::env::temp_dir().join("memtrack-no-such-dir");
    memtrack()
        .env("TMPDIR", &missing)
        .args(["trace", p(&f)])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicates::str::contains(missing.to_str().unwrap()))
        .stderr(predicates::str::contains("TMPDIR"));
}

/// Bytes live before a trace's first event, by replaying it in this test's own code: the
/// requested bytes of the blocks allocated at the end, less what the trace allocated and freed.
fn live_before_the_trace(name: &str) -> i64 {
    use memtrack::model::snapshot::{Action, BlockState};
    let snap = memtrack::formats::load_snapshot(&snapshot(name)).unwrap();
    let at_end: i64 = (snap.blocks.iter())
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| b.requested_size.unwrap_or(b.size) as i64)
        .sum();
    let net: i64 = (snap.traces.iter().flat_map(|t| &t.events))
        .map(|e| match e.action {
            Action::Alloc => e.size as i64,
            Action::FreeRequested => -(e.size as i64),
            _ => 0,
        })
        .sum();
    at_end - net
}

#[test]
fn a_trace_that_starts_with_bytes_live_says_so() {
    for name in [
        "cs336_windows_partial_frames",
        "cs336_medium_512_training",
        "h100_gpt2_train_exit",
    ] {
        let live = live_before_the_trace(name);
        let out = memtrack()
            .args(["summary", p(&snapshot(name)), "--units", "B"])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let json = memtrack()
            .args(["summary", p(&snapshot(name)), "--format", "json"])
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        let initial = json["devices"][0]["initial_allocated_bytes"].as_i64();
        assert_eq!(initial, Some(live), "{name}");
        let says = text.contains(&format!("The trace starts with {live} B already allocated"));
        assert_eq!(
            says,
            live > 0,
            "{name}: {live} live before the trace; text:\n{text}"
        );
    }
}

/// Whether any block in use at the end of a fixture has frames, by this test's own reading
/// of the blocks (legacy blocks: their history entry's).
fn blocks_have_frames(name: &str) -> Option<bool> {
    use memtrack::model::snapshot::BlockState;
    let snap = memtrack::formats::load_snapshot(&snapshot(name)).unwrap();
    let mut in_use = (snap.blocks.iter())
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .peekable();
    in_use.peek()?;
    Some(in_use.any(|b| {
        let stack = if b.history_len > 0 && !b.has_frames_key {
            snap.history[b.history_start as usize].stack
        } else {
            b.stack
        };
        !snap.stacks.stack(stack).is_empty()
    }))
}

#[test]
fn a_capture_without_stacks_says_how_to_record_them() {
    let call = r#"call torch.cuda.memory._record_memory_history(context="all", stacks="all") before they are allocated"#;
    let mut without = 0;
    for name in FIXTURES.iter().copied().chain(["synthetic_no_stacks"]) {
        let has = blocks_have_frames(name);
        let file = snapshot(name);
        let summary = run_ok(&["summary", p(&file)]);
        let top = run_ok(&["top", p(&file)]);
        let says = has == Some(false);
        without += says as usize;
        assert_eq!(summary.contains(call), says, "{name}: summary\n{summary}");
        assert_eq!(top.contains(call), says, "{name}: top\n{top}");
        if says {
            assert!(top.contains("shown here as <non-python>"), "{top}");
        }
        let j = json(&["summary", p(&file)]);
        assert_eq!(j["allocations_have_stacks"].as_bool(), has, "{name}");
    }
    assert_eq!(without, 1, "synthetic_no_stacks alone has no stacks");
}

/// Leak suspects by this test's own replay: when each allocation alive at the end was made
/// (its last alloc event at that address), the steps between `Optimizer.step` ends, and the
/// sites (innermost Python frame) that kept an allocation from every step after the first.
fn own_leak_suspects(name: &str) -> Option<Vec<(String, usize, u64)>> {
    use memtrack::model::snapshot::{Action, BlockState};
    use std::collections::{BTreeMap, HashMap};
    let snap = memtrack::formats::load_snapshot(&snapshot(name)).unwrap();
    let mut ends: Vec<i64> = (snap.annotations.iter())
        .filter(|a| a.stage == "END" && a.name.starts_with("Optimizer.step"))
        .filter_map(|a| a.time_us)
        .collect();
    ends.sort();
    if ends.len() < 3 {
        return None;
    }
    let mut made: HashMap<u64, i64> = HashMap::new();
    for e in snap.traces.first().map_or(&[][..], |t| &t.events[..]) {
        match e.action {
            Action::Alloc => {
                made.insert(e.addr, e.time_us);
            }
            Action::FreeRequested => {
                made.remove(&e.addr);
            }
            _ => {}
        }
    }
    let steps = ends.len() - 1;
    let mut by: BTreeMap<String, (Vec<bool>, usize, u64)> = BTreeMap::new();
    for s in snap.segments.iter().filter(|s| s.device == 0) {
        for b in s.blocks(&snap.blocks) {
            if b.state != BlockState::ActiveAllocated {
                continue;
            }
            let Some(&t) = made.get(&b.address) else {
                continue;
            };
            if t <= ends[0] || t > ends[steps] {
                continue;
            }
            let j = ends.iter().filter(|&&e| e < t).count() - 1;
            let site = (snap.stacks.stack(b.stack).iter())
                .map(|&f| snap.stacks.frame(f))
                .find(|f| snap.stacks.str(f.filename).ends_with(".py"))
                .map(|f| {
                    let file = snap.stacks.str(f.filename);
                    let file = file.rsplit('/').next().unwrap_or(file);
                    format!("{file}:{}:{}", f.line, snap.stacks.str(f.name))
                })
                .unwrap_or_default();
            let e = by.entry(site).or_insert((vec![false; steps], 0, 0));
            e.0[j] = true;
            e.1 += 1;
            e.2 += b.requested_size.unwrap_or(b.size);
        }
    }
    Some(
        by.into_iter()
            .filter(|(_, (hit, _, _))| hit.iter().all(|&h| h))
            .map(|(site, (_, n, bytes))| (site, n, bytes))
            .collect(),
    )
}

#[test]
fn leak_suspects_are_the_sites_that_kept_an_allocation_from_every_step() {
    let mut found = 0;
    for name in [
        "synthetic_step_leak",
        "h100/gpt_default",
        "h100/gpt_expandable_segments",
        "h100/gpt_max_split_size_mb",
        "h100_gpt2_train_exit",
        "h100_resnet18_train_exit",
        "cs336_medium_512_training",
    ] {
        let want = own_leak_suspects(name);
        let j = json(&["summary", p(&snapshot(name))]);
        let leaks = &j["devices"][0]["leak_suspects"];
        let Some(want) = want else {
            assert!(leaks.is_null(), "{name}: fewer than three step ends");
            continue;
        };
        let steps = leaks["steps"].as_u64().unwrap() as usize;
        let mut got: Vec<(String, usize, u64)> = (leaks["suspects"].as_array().unwrap().iter())
            .map(|s| {
                let n = s["allocations"].as_u64().unwrap() as usize;
                let bytes = s["bytes_per_step"].as_f64().unwrap() * steps as f64;
                (
                    s["site"].as_str().unwrap().to_string(),
                    n,
                    bytes.round() as u64,
                )
            })
            .collect();
        got.sort();
        assert_eq!(got, want, "{name}");
        found += want.len();
        let text = run_ok(&["summary", p(&snapshot(name))]);
        if want.is_empty() {
            assert!(text.contains("No leak suspects"), "{name}: {text}");
        } else {
            assert!(
                text.contains("Leak suspects: sites whose allocations"),
                "{name}"
            );
        }
    }
    assert_eq!(
        found, 1,
        "the synthetic step leak alone: train.py:71:remember"
    );
}
