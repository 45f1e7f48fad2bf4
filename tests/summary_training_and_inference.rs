//! `summary` of programs that train and then evaluate (torch on CPU): a detection-like model
//! trained a few steps then called in eval mode, and an EMA copy (AveragedModel) evaluated at
//! the end. Growth compares the training steps only, the module peaks are a training step's,
//! and the evaluation calls are reported as their own part.

mod common;

use common::{json_out, python, record, run, script};
use serde_json::Value;

const STEPS: usize = 4;
const EVALS: usize = 2;

/// Record train_then_eval.py with `extra` arguments in `dir`; the file's path.
fn recorded(dir: &std::path::Path, extra: &[&str]) -> Option<String> {
    let py = python()?;
    let (steps, evals) = (STEPS.to_string(), EVALS.to_string());
    let mut args = vec![script("train_then_eval.py")];
    args.extend(["--steps", &steps, "--evals", &evals].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, err) = record(dir, "run.pkl", &["--backend", "cpu"], &py, &args);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("steps {STEPS} evals {EVALS}")),
        "{err}"
    );
    Some(dir.join("run.pkl").to_str().unwrap().to_string())
}

fn numbers(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// The summary's JSON and text agree on: iterations by kind, growth across the training
/// steps, module peaks of a training step of `trained` (the module the optimizer trains),
/// the inference calls with the run's peak.
fn check(file: &str, trained: &str) {
    let s = json_out(&["summary", file, "--format", "json"]);
    let kinds: Vec<&str> = (s["iterations"].as_array().unwrap().iter())
        .map(|it| it["kind"].as_str().unwrap())
        .collect();
    let mut expected = vec!["training step"; STEPS];
    expected.extend(vec!["inference"; EVALS]);
    assert_eq!(kinds, expected);

    let g = &s["growth"];
    assert_eq!(g["compared"], "training steps", "{g}");
    assert_eq!(g["inference_calls_left_out"], EVALS, "{g}");
    assert_eq!(
        numbers(&g["measured_iterations"]),
        (2..=STEPS as u64).collect::<Vec<_>>()
    );
    // each step frees what it made: its start is the same every step; the evaluation's
    // inputs, live at the next call's start, are not growth
    assert_eq!(g["verdict"], "flat", "{g}");
    assert_eq!(g["bytes_per_iteration"].as_f64(), Some(0.0), "{g}");

    let mp = &s["module_peaks"];
    assert_eq!(
        mp["chosen"], "the training step with the highest peak",
        "{mp}"
    );
    let it = mp["iteration"].as_u64().unwrap() as usize;
    assert!((1..=STEPS).contains(&it), "{mp}");
    let step_peak = s["iterations"][it - 1]["peak_allocated_bytes"]
        .as_f64()
        .unwrap();
    for other in s["iterations"].as_array().unwrap().iter().take(STEPS) {
        assert!(other["peak_allocated_bytes"].as_f64().unwrap() <= step_peak);
    }
    let root = (mp["modules"].as_array().unwrap().iter())
        .find(|m| m["module"] == trained)
        .unwrap_or_else(|| panic!("no {trained} in {mp}"));
    assert!(root["peak_backward_bytes"].as_i64().unwrap() > 0, "{root}");

    let calls = &s["inference_calls"];
    assert_eq!(calls["calls"], EVALS, "{calls}");
    let evals: Vec<u64> = ((STEPS + 1)..=(STEPS + EVALS)).map(|i| i as u64).collect();
    assert_eq!(numbers(&calls["iterations"]), evals);
    // the evaluation's batch is four times a step's: the run's peak is in it
    let peak = &s["peaks"][0];
    assert_eq!(peak["series"], "allocated");
    assert_eq!(calls["peak_allocated_bytes"], peak["bytes"], "{calls}");
    assert_eq!(calls["peak_op_index"], peak["op_index"], "{calls}");

    let (code, text, err) = run(&["summary", file]);
    assert_eq!(code, 0, "{err}");
    for expected in [
        format!("Module peaks (iteration {it} of {}, the training step with the highest peak", STEPS + EVALS),
        "Growth across training steps".to_string(),
        format!("the training steps of iterations 2-{STEPS}"),
        format!("{EVALS} inference calls (forward only) left out"),
        format!(
            "{EVALS} forward-only calls (no backward, no optimizer step) beside the training steps, in iterations {}-{}",
            STEPS + 1,
            STEPS + EVALS
        ),
    ] {
        assert!(text.contains(&expected), "no {expected:?} in\n{text}");
    }
}

#[test]
fn a_detection_model_trained_then_evaluated() {
    let dir = tempfile::tempdir().unwrap();
    let Some(file) = recorded(dir.path(), &[]) else {
        return;
    };
    check(&file, "Detector");
}

#[test]
fn an_ema_copy_evaluated_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let Some(file) = recorded(dir.path(), &["--ema"]) else {
        return;
    };
    check(&file, "Detector");
    // the EMA copy ran only in the inference calls: not in the training step's module peaks
    let s = json_out(&["summary", &file, "--format", "json"]);
    let mods = s["module_peaks"]["modules"].as_array().unwrap();
    assert!(
        mods.iter().all(|m| m["module"] != "AveragedModel"),
        "{mods:?}"
    );
    let op = s["inference_calls"]["peak_op"].as_str().unwrap();
    assert!(op.starts_with("AveragedModel.module."), "{op}");
}
