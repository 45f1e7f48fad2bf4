//! `summary`'s growth across iterations, on real recordings (torch on CPU) of a loop that keeps
//! a per-step copy of its output and of the same loop without it, and on MemoryTracker files.

mod common;

use common::{fixture, json_out, record, run, script};

/// The bytes the leaking loop keeps each step: a 64 x 256 float32 tensor.
const KEPT_PER_STEP: f64 = (64 * 256 * 4) as f64;

fn recorded(dir: &std::path::Path, name: &str, args: &[&str]) -> Option<String> {
    let py = common::python()?;
    let mut a = vec![script("per_step_history.py")];
    a.extend(args.iter().map(|s| s.to_string()));
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (code, err) = record(dir, name, &[], &py, &a);
    assert_eq!(code, 0, "{err}");
    Some(dir.join(name).to_str().unwrap().to_string())
}

fn numbers(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn a_loop_that_keeps_a_copy_each_step_grows_by_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let Some(leak) = recorded(dir.path(), "leak.pkl", &["leak", "6"]) else {
        return;
    };
    let g = &json_out(&["summary", &leak, "--format", "json"])["growth"];
    assert_eq!(g["iterations"], 6, "{g}");
    assert_eq!(g["verdict"], "grows", "{g}");
    assert_eq!(
        g["bytes_per_iteration"].as_f64(),
        Some(KEPT_PER_STEP),
        "{g}"
    );
    assert_eq!(
        (g["rising_steps"].as_u64(), g["steps"].as_u64()),
        (Some(4), Some(4))
    );
    // the copies are of an activation: that category holds them
    let cats = g["categories"].as_array().expect("categories");
    assert_eq!(cats[0]["category"], "Activation", "{g}");
    assert_eq!(cats[0]["bytes_per_iteration"].as_f64(), Some(KEPT_PER_STEP));
    // the op that made them, and its module: the copy outside any module
    assert_eq!(g["retained_iterations_checked"], 3, "{g}");
    let op = &g["ops"][0];
    assert_eq!(op["name"], "Global.forward.clone.default", "{g}");
    assert_eq!(op["bytes_per_iteration"].as_f64(), Some(KEPT_PER_STEP));
    assert_eq!(op["iterations"], 3);
    assert_eq!(
        g["ops"].as_array().unwrap().len(),
        1,
        "nothing else is kept: {g}"
    );
    assert_eq!(g["modules"][0]["name"], "Global");
    let (code, text, err) = run(&["summary", &leak, "--units", "B"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("+65536 B retained per iteration after warm-up"),
        "{text}"
    );
    for format in ["markdown", "text"] {
        let (_, out, _) = run(&["summary", &leak, "--format", format]);
        assert!(out.contains("Growth across iterations"), "{format}");
    }
}

#[test]
fn the_same_loop_without_the_copy_is_flat() {
    let dir = tempfile::tempdir().unwrap();
    let Some(flat) = recorded(dir.path(), "flat.pkl", &["none", "6"]) else {
        return;
    };
    let s = json_out(&["summary", &flat, "--format", "json"]);
    let g = &s["growth"];
    assert_eq!(g["verdict"], "flat", "{g}");
    // every iteration is a training step: all are compared, none is an inference call
    assert_eq!(g["compared"], "iterations", "{g}");
    assert_eq!(g["inference_calls_left_out"], 0, "{g}");
    assert_eq!(numbers(&g["measured_iterations"]), [2, 3, 4, 5, 6]);
    assert!(s.get("inference_calls").is_none());
    assert_eq!(g["bytes_per_iteration"].as_f64(), Some(0.0), "{g}");
    assert!(g.get("categories").is_none(), "{g}");
    assert!(
        g.get("ops").is_none(),
        "nothing is kept two iterations: {g}"
    );
    assert_eq!(g["retained_iterations_checked"], 3, "{g}");
    let (_, text, _) = run(&["summary", &flat]);
    assert!(
        text.contains("Flat: allocated at the start of each iteration"),
        "{text}"
    );
}

/// A module that keeps a copy of its input each forward: the op and the module are named.
#[test]
fn a_module_that_keeps_its_input_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let Some(file) = recorded(dir.path(), "module.pkl", &["module", "6"]) else {
        return;
    };
    let kept = (64 * 512 * 4) as f64;
    let g = &json_out(&["summary", &file, "--format", "json"])["growth"];
    assert_eq!(g["verdict"], "grows", "{g}");
    assert_eq!(g["bytes_per_iteration"].as_f64(), Some(kept), "{g}");
    assert_eq!(
        g["ops"][0]["name"], "Sequential.1.forward.clone.default",
        "{g}"
    );
    assert_eq!(g["ops"][0]["bytes_per_iteration"].as_f64(), Some(kept));
    assert_eq!(g["modules"][0]["name"], "Sequential.1", "{g}");
    let (_, text, _) = run(&["summary", &file]);
    assert!(
        text.contains("By module: Sequential.1 128.00 KiB."),
        "{text}"
    );
}

/// MemoryTracker keeps only the last iteration's markers: one iteration, growth unknown, and
/// the summary says why.
#[test]
fn memory_tracker_files_say_why_growth_is_unknown() {
    for f in [
        "tracker/memory_tracker_cpu_torch2.15.0.pkl",
        "tracker/synthetic_2000_ops.pkl",
    ] {
        let path = fixture(f);
        let path = path.to_str().unwrap();
        let g = &json_out(&["summary", path, "--format", "json"])["growth"];
        assert_eq!(g["iterations"], 1, "{f}: {g}");
        assert_eq!(g["verdict"], "unknown", "{f}");
        assert!(g["bytes_per_iteration"].is_null(), "{f}");
        let (_, text, _) = run(&["summary", path]);
        assert!(
            text.contains("A MemoryTracker file keeps only the last iteration's markers"),
            "{text}"
        );
    }
}
