//! `top --at` and `--group-by` against the test's own replay of real fixtures
//! (tests/py/live_at.py reads the pickle with Python's own `pickle` and replays its events).

mod common;

use std::path::Path;

use common::{fixture, json_out, run};
use serde_json::Value;

fn replay(file: &Path, device: u32, seconds: &str, name: &str, stage: &str, nth: u32) -> Value {
    let file = file.to_string_lossy().into_owned();
    let (device, nth) = (device.to_string(), nth.to_string());
    common::python_json(
        "live_at.py",
        &[file.as_str(), &device, seconds, name, stage, &nth],
    )
}

fn top(file: &Path, extra: &[&str]) -> Value {
    let mut args = vec![
        "top",
        file.to_str().unwrap(),
        "--top",
        "100000",
        "--format",
        "json",
    ];
    args.extend(extra);
    json_out(&args)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Every moment lands on the event the replay finds, with the bytes the replay has live
/// there, and the rows add up to it.
#[test]
fn moments_are_the_replays_events_and_bytes() {
    let f = fixture("snapshots/h100_gpt2_train_exit.pickle");
    let want = replay(&f, 0, "0.2", "Optimizer.step#AdamW.step", "END", 2);
    let event = u(&want["index"]["event"]).to_string();
    for (at, kind) in [
        ("0.2s", "time"),
        ("200ms", "time"),
        ("Optimizer.step#AdamW.step:end@2", "annotation"),
        (event.as_str(), "event"),
    ] {
        let index = u(&want["index"][kind]);
        let rep = &top(&f, &["--at", at])[0];
        assert_eq!(u(&rep["at_event_index"]), index, "--at {at}");
        let bytes = u(&want["live_after"][index.to_string()]);
        assert_eq!(u(&rep["at_bytes"]), bytes, "--at {at}");
        let rows: u64 = rep["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| u(&r["at_bytes"]))
            .sum();
        assert_eq!(rows, bytes, "--at {at}: rows add up");
        // every grouping splits the same live set
        for g in ["user", "category", "annotation"] {
            let rep = &top(&f, &["--at", at, "--group-by", g])[0];
            let rows: u64 = rep["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| u(&r["at_bytes"]))
                .sum();
            assert_eq!(rows, bytes, "--at {at} --group-by {g}");
        }
    }
    // `--by` is kept as --at's alias
    let by = &top(&f, &["--by", "0.2s"])[0];
    assert_eq!(u(&by["at_event_index"]), u(&want["index"]["time"]));

    // an OOM: what was live when the allocation failed, on each device
    let m = fixture("snapshots/synthetic_multi_device_oom.pickle");
    let reps = top(&m, &["--at", "oom"]);
    for (d, rep) in reps.as_array().unwrap().iter().enumerate() {
        let want = replay(&m, d as u32, "0", "Optimizer.step#AdamW.step", "START", 1);
        let index = u(&want["index"]["oom"]);
        assert_eq!(u(&rep["at_event_index"]), index, "device {d}");
        assert_eq!(
            u(&rep["at_bytes"]),
            u(&want["live_after"][index.to_string()]),
            "device {d}"
        );
    }
}

/// On the GPT-2 capture, Adam's state live at the end is one optimizer-state group and the
/// training line (gpt2_train.py:10, backward and step) one user line, as the replay finds them.
#[test]
fn gpt2_groups_by_user_line_and_category() {
    let f = fixture("snapshots/h100_gpt2_train_exit.pickle");
    let want = replay(&f, 0, "0", "x", "START", 1);
    let users = &top(&f, &["--at", "end", "--group-by", "user"])[0];
    let rows = users["rows"].as_array().unwrap();
    for (line, bytes) in want["end_by_user_line"].as_object().unwrap() {
        let label = rows
            .iter()
            .find(|r| {
                r["group"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{line} "))
            })
            .unwrap_or_else(|| panic!("no row for {line}"));
        assert_eq!(u(&label["end_bytes"]), u(bytes), "{line}");
    }
    assert_eq!(rows[0]["group"], "gpt2_train.py:10 <module>");
    let cats = &top(&f, &["--at", "end", "--group-by", "category"])[0];
    let state = cats["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["group"] == "optimizer state")
        .expect("an optimizer-state row");
    assert_eq!(u(&state["end_bytes"]), u(&want["end_optimizer_state"]));
    assert!(u(&state["end_bytes"]) > 0);
    // Adam's state is what gpt2_train.py:10 holds at the end
    assert_eq!(
        u(&state["end_bytes"]),
        u(&want["end_by_user_line"]["gpt2_train.py:10"])
    );
}

/// The categories judged on the capture of a run agree with what `record`'s agent counted in
/// the same run (MemTracker's categories, the record file's whole-model peak): the parameters
/// and the optimizer state to the byte, backward's temporaries to the block; and nothing the
/// agent counted as an activation or optimizer state is called a temporary (the capture's peak
/// falls inside the op after the record's, so it holds a little more).
#[test]
fn categories_agree_with_the_agents_count_of_the_same_run() {
    for name in ["gpt2", "resnet18"] {
        let snap = fixture(&format!("snapshots/h100_{name}_train_exit.pickle"));
        let record = fixture(&format!("record/h100_{name}_train.pkl"));
        let cats = &top(&snap, &["--at", "peak", "--group-by", "category"])[0];
        let row = |c: &str| {
            (cats["rows"].as_array().unwrap().iter())
                .find(|r| r["group"] == c)
                .map_or(0, |r| u(&r["at_bytes"]))
        };
        let summary = json_out(&["summary", record.to_str().unwrap(), "--format", "json"]);
        let agent = &summary["record"]["peak"]["cuda:0"];
        let counted = |c: &str| u(&agent[c]);
        let near = |a: u64, b: u64, slack: u64| a.abs_diff(b) <= slack;
        // buffers (BatchNorm's) are set up with the parameters
        assert!(
            near(
                row("parameter"),
                counted("Parameter") + counted("Buffer"),
                64 << 10
            ),
            "{name}: {} vs {}",
            row("parameter"),
            counted("Parameter") + counted("Buffer")
        );
        assert!(
            near(row("optimizer state"), counted("Optstate"), 4 << 10),
            "{name}: {} vs {}",
            row("optimizer state"),
            counted("Optstate")
        );
        assert!(
            row("activation") >= counted("Activation"),
            "{name}: activations {} < {}",
            row("activation"),
            counted("Activation")
        );
        assert!(
            row("temporary") <= counted("Temp") + (16 << 20),
            "{name}: temporaries {} vs {}",
            row("temporary"),
            counted("Temp")
        );
        // at the end: the optimizer's state is held, never a temporary
        let end_temporary = (cats["rows"].as_array().unwrap().iter())
            .find(|r| r["group"] == "temporary")
            .map_or(0, |r| u(&r["end_bytes"]));
        assert_eq!(end_temporary, 0, "{name}");
    }
}

/// Metadata and annotate events group allocations (the synthetic fixture's `weights`), rules
/// files name groups, and moments the trace does not have are errors that say why.
#[test]
fn metadata_rules_and_missing_moments() {
    let m = fixture("snapshots/synthetic_multi_device_oom.pickle");
    let rep = &top(
        &m,
        &["--at", "end", "--group-by", "metadata", "--device", "0"],
    )[0];
    let groups: Vec<&str> = rep["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["group"].as_str().unwrap())
        .collect();
    assert!(groups.contains(&"weights"), "{groups:?}");
    let end: u64 = rep["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| u(&r["end_bytes"]))
        .sum();
    assert_eq!(end, u(&rep["end_bytes"]));

    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.txt");
    std::fs::write(
        &rules,
        "# mine\noptimizer = /torch/optim/\nmodel = modeling_gpt2\\.py\n",
    )
    .unwrap();
    let f = fixture("snapshots/h100_gpt2_train_exit.pickle");
    let rep = &top(&f, &["--at", "end", "--rules", rules.to_str().unwrap()])[0];
    let want = replay(&f, 0, "0", "x", "START", 1);
    let opt = rep["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["group"] == "optimizer")
        .unwrap();
    assert_eq!(u(&opt["end_bytes"]), u(&want["end_optimizer_state"]));

    let fp = f.to_str().unwrap();
    for (at, says) in [
        ("999999", "no event 999999"),
        ("oom", "no oom event"),
        ("Nope:end", "no START"),
        ("soon", "not a moment"),
    ] {
        let (code, _, err) = run(&["top", fp, "--at", at]);
        assert_eq!(code, 2, "--at {at}: {err}");
        assert!(
            err.contains(says) || err.contains("no END"),
            "--at {at}: {err}"
        );
    }
    std::fs::write(&rules, "just words\n").unwrap();
    let (code, _, err) = run(&["top", fp, "--rules", rules.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("line 1"), "{err}");
}

/// `plot --stacked --at` marks the moment at the replay's event, and `--group-by` makes the
/// bands groups.
#[test]
fn stacked_plot_marks_the_moment_and_groups_bands() {
    let f = fixture("snapshots/h100_gpt2_train_exit.pickle");
    let want = replay(&f, 0, "0.2", "Optimizer.step#AdamW.step", "END", 2);
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("t.svg");
    let (fp, sp) = (f.to_str().unwrap(), svg.to_str().unwrap());
    for (at, kind) in [
        ("0.2s", "time"),
        ("Optimizer.step#AdamW.step:end@2", "annotation"),
    ] {
        let (code, _, err) = run(&[
            "plot",
            fp,
            "--stacked",
            "--at",
            at,
            "--group-by",
            "category",
            "-o",
            sp,
        ]);
        assert_eq!(code, 0, "{err}");
        let text = std::fs::read_to_string(&svg).unwrap();
        let index = u(&want["index"][kind]);
        assert!(
            text.contains(r#"id="moment" data-x="#)
                && text.contains(&format!(r#"data-index="{index}""#)),
            "--at {at}: no mark at event {index}"
        );
        assert!(text.contains("optimizer state"), "category bands");
    }
    let (code, _, err) = run(&["plot", fp, "--stacked", "--at", "oom", "-o", sp]);
    assert_eq!(code, 2);
    assert!(err.contains("no oom event"), "{err}");
}

/// `diff --group-by user`: the GPT-2 training line appears with the bytes the replay finds live
/// at the end of the second file (the first, another program, has none there).
#[test]
fn diff_groups_by_user_line() {
    let a = fixture("snapshots/h100/gpt_default.pickle");
    let b = fixture("snapshots/h100_gpt2_train_exit.pickle");
    let want = replay(&b, 0, "0", "x", "START", 1);
    let d = json_out(&[
        "diff",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--group-by",
        "user",
        "--top",
        "1000",
        "--format",
        "json",
    ]);
    assert_eq!(d["group_by"], "user");
    let row = d["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["site"] == "gpt2_train.py:10 <module>")
        .expect("the training line");
    assert_eq!(u(&row["end_before_bytes"]), 0);
    assert_eq!(
        u(&row["end_after_bytes"]),
        u(&want["end_by_user_line"]["gpt2_train.py:10"])
    );
}

/// `--group-by compile` and `metadata`: each allocation's `compile_context` / `user_metadata`
/// (synthetic_flat_events carries both), by the test's own replay of which are live at the end.
#[test]
fn compile_context_and_metadata_group_what_is_live() {
    let f = fixture("snapshots/synthetic_flat_events.pickle");
    let py = common::python_with_torch().expect("python to replay the fixture");
    let script = r#"
import json, pickle, sys
snap = pickle.load(open(sys.argv[1], "rb"))
out = []
for d, events in enumerate(snap["device_traces"]):
    live = {}
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_requested":
            live.pop(e["addr"], None)
    ends = {b["address"] for s in snap["segments"] if s["device"] == d
            for b in s["blocks"] if b["state"] == "active_allocated"}
    by = {"compile": {}, "metadata": {}}
    for addr, e in live.items():
        if addr not in ends:
            continue
        c = e.get("compile_context")
        m = e.get("user_metadata")
        if c and c != "N/A":
            by["compile"][c] = by["compile"].get(c, 0) + e["size"]
        if m:
            by["metadata"][m] = by["metadata"].get(m, 0) + e["size"]
    out.append(by)
print(json.dumps(out))
"#;
    let o = std::process::Command::new(py)
        .args(["-c", script])
        .arg(&f)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut checked = 0;
    for g in ["compile", "metadata"] {
        let reps = top(&f, &["--at", "end", "--group-by", g]);
        for rep in reps.as_array().unwrap() {
            let d = u(&rep["device"]) as usize;
            for (label, bytes) in want[d][g].as_object().unwrap() {
                let row = (rep["rows"].as_array().unwrap().iter())
                    .find(|r| r["group"] == label.as_str())
                    .unwrap_or_else(|| panic!("device {d}: no {g} row {label}"));
                assert_eq!(u(&row["end_bytes"]), u(bytes), "device {d} {g} {label}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 2, "the fixture carries both");
}
