//! Iterations and phases of real recordings (torch on CPU): an iteration is a training step,
//! ending at the optimizer's step; forward-only calls are an iteration each; a stretch
//! without a backward op is never called backward. Each reproduction prints its own counts
//! (steps, calls), which the recording's iterations, markers and phases must match.

mod common;

use std::path::Path;

use common::{export, json_out, memtrack_process, python, script};
use serde_json::Value;

/// Record `tests/py/NAME ARGS` on the CPU backend in `dir`; the program's own `key value`
/// pairs from its last line of output, and the file's path.
fn recorded(py: &Path, dir: &Path, name: &str, args: &[&str]) -> (Vec<(String, u64)>, String) {
    let out = dir.join("run.pkl");
    let o = memtrack_process()
        .args(["record", "--backend", "cpu", "-o"])
        .arg(&out)
        .arg("--")
        .arg(py)
        .arg(script(name))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{name}: {stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    let words: Vec<&str> = last.split_whitespace().collect();
    let counts = words
        .chunks(2)
        .map(|kv| (kv[0].to_string(), kv[1].parse().unwrap()))
        .collect();
    (counts, out.display().to_string())
}

fn count(counts: &[(String, u64)], key: &str) -> usize {
    counts.iter().find(|(k, _)| k == key).unwrap().1 as usize
}

/// `summary --format json` of `file`.
fn summary(file: &str) -> Value {
    json_out(&["summary", file, "--format", "json"])
}

/// The phases of iteration `it`: (phase, micro-batch, calls, first op, end op).
fn phases_of(s: &Value, it: u64) -> Vec<(String, Option<u64>, u64, usize, usize)> {
    s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["iteration"] == it)
        .map(|p| {
            (
                p["phase"].as_str().unwrap().to_string(),
                p["micro_batch"].as_u64(),
                p["calls"].as_u64().unwrap(),
                p["first_op"].as_u64().unwrap() as usize,
                p["end_op"].as_u64().unwrap() as usize,
            )
        })
        .collect()
}

fn op_names(j: &Value) -> Vec<String> {
    common::op_names(j).into_iter().map(String::from).collect()
}

fn marker_count(j: &Value, name: &str) -> usize {
    j["memtrack"]["marker_events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["name"] == name)
        .count()
}

/// Every phase named backward holds a backward op, and no other phase of the iteration's
/// forward side does: the phases say what the op names say.
fn phases_agree_with_op_names(s: &Value, names: &[String]) {
    for p in s["phases"].as_array().unwrap() {
        let (a, b) = (
            p["first_op"].as_u64().unwrap() as usize,
            p["end_op"].as_u64().unwrap() as usize,
        );
        let backward = names[a..b].iter().any(|n| n.contains(".backward."));
        match p["phase"].as_str().unwrap() {
            "backward" => assert!(backward, "{p}: no backward op"),
            "forward" | "after forward" | "setup" => {
                assert!(!backward, "{p}: holds a backward op")
            }
            _ => {}
        }
    }
}

#[test]
fn an_lstm_cell_unrolled_over_time_is_one_iteration_per_optimizer_step() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (counts, file) = recorded(
        &py,
        dir.path(),
        "lstm_cell_loop.py",
        &["--steps", "12", "--seq", "5"],
    );
    let (steps, cell_calls, head_calls) = (
        count(&counts, "steps"),
        count(&counts, "cell_calls"),
        count(&counts, "head_calls"),
    );
    assert_eq!((steps, cell_calls, head_calls), (12, 60, 12));
    let j = export(Path::new(&file));
    assert_eq!(j["memtrack"]["modules"].as_array().unwrap().len(), steps);
    assert_eq!(
        j["memtrack"]["iteration_starts"].as_array().unwrap().len(),
        steps
    );
    // every call of the cell (the iteration's root) and of the head (it has parameters) is
    // marked; the loss is no module
    assert_eq!(marker_count(&j, "fw_start"), cell_calls + head_calls);
    assert_eq!(marker_count(&j, "fw_bw_boundary"), cell_calls + head_calls);
    let s = summary(&file);
    assert_eq!(s["iterations"].as_array().unwrap().len(), steps);
    for it in 1..=steps as u64 {
        let ph = phases_of(&s, it);
        let names: Vec<&str> = ph.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(
            &names[..3],
            ["forward", "backward", "optimizer step"],
            "iteration {it}"
        );
        assert_eq!(
            ph[0].2 as usize,
            (cell_calls + head_calls) / steps,
            "calls in one forward"
        );
    }
    phases_agree_with_op_names(&s, &op_names(&j));
    // the text folds the identical steps: first, peak, last
    let text = common::stdout(&["summary", &file]);
    let rows = |t: &str| {
        t.lines()
            .skip_while(|l| !l.starts_with("Forward / backward"))
            .skip(3)
            .take_while(|l| !l.trim().is_empty())
            .count()
    };
    assert!(rows(&text) <= 1 + 3 * 4, "{text}");
    assert!(text.contains("--all-iterations"), "{text}");
    let all = common::stdout(&["summary", &file, "--all-iterations"]);
    // setup and at least three phases per step
    assert!(rows(&all) > steps * 3, "{all}");
}

#[test]
fn a_no_grad_generation_loop_has_no_backward_phase() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (counts, file) = recorded(&py, dir.path(), "nograd_generation.py", &["--tokens", "7"]);
    let forwards = count(&counts, "forwards");
    assert_eq!(forwards, 7);
    let j = export(Path::new(&file));
    let names = op_names(&j);
    assert!(!names.iter().any(|n| n.contains(".backward.")));
    let s = summary(&file);
    assert_eq!(s["iterations"].as_array().unwrap().len(), forwards);
    for p in s["phases"].as_array().unwrap() {
        assert_ne!(p["phase"], "backward", "{p}");
    }
    for it in 1..=forwards as u64 {
        let ph = phases_of(&s, it);
        assert_eq!(ph[0].0, "forward", "iteration {it}: {ph:?}");
        assert_eq!(ph.iter().filter(|p| p.0 == "forward").count(), 1);
    }
    phases_agree_with_op_names(&s, &names);
}

#[test]
fn a_model_trained_after_another_begins_a_new_iteration() {
    one_model_after_another(&[]);
}

#[test]
fn a_checkpointed_model_trained_after_another_begins_a_new_iteration() {
    one_model_after_another(&["--checkpoint"]);
}

/// `two_models.py` with `extra` arguments: A trained, then B.
fn one_model_after_another(extra: &[&str]) {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (counts, file) = recorded(&py, dir.path(), "two_models.py", extra);
    let (a, b) = (count(&counts, "steps_a"), count(&counts, "steps_b"));
    let j = export(Path::new(&file));
    let names = op_names(&j);
    let s = summary(&file);
    assert_eq!(s["iterations"].as_array().unwrap().len(), a + b);
    // B's first forward op: its phase is B's first iteration's forward
    let first_b = names
        .iter()
        .position(|n| n.starts_with("B.") && n.contains(".forward."))
        .expect("an op of B's forward");
    let phase = s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["first_op"].as_u64().unwrap() as usize <= first_b
                && first_b < p["end_op"].as_u64().unwrap() as usize
        })
        .unwrap();
    assert_eq!(phase["phase"], "forward", "{phase}");
    assert_eq!(phase["iteration"].as_u64().unwrap() as usize, a + 1);
    // and A's last iteration holds no op of B's
    let last_a = phases_of(&s, a as u64);
    let end = last_a.last().unwrap().4;
    assert!(end <= first_b);
    // each iteration: forward, backward, one optimizer step
    for it in 1..=(a + b) as u64 {
        let ph = phases_of(&s, it);
        assert_eq!(
            ph.iter().filter(|p| p.0 == "optimizer step").count(),
            1,
            "{ph:?}"
        );
    }
    phases_agree_with_op_names(&s, &names);
    // B and its optimizer are new, not growth: each model is compared with itself, and
    // nothing made once (B's parameters and Adam state, A's last gradients) is retained
    // (issue 62, items 6 and 12)
    let g = &s["growth"];
    assert_eq!(g["new_models_at"], serde_json::json!([a + 1]), "{g}");
    assert_eq!(g["verdict"], "flat", "{g}");
    assert_eq!(g["warmup_iterations"], 2, "{g}");
    assert!(g["ops"].is_null(), "{g}");
}

#[test]
fn gradient_accumulation_is_one_iteration_per_step_with_its_micro_batches() {
    accumulation(&[]);
}

#[test]
fn ddp_no_sync_accumulation_is_one_iteration_per_step_with_its_micro_batches() {
    accumulation(&["--ddp"]);
}

/// `grad_accumulation.py` with 4 micro-batches per step, plus `extra` arguments.
fn accumulation(extra: &[&str]) {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--steps", "3", "--micro", "4"];
    args.extend(extra);
    let (counts, file) = recorded(&py, dir.path(), "grad_accumulation.py", &args);
    let (steps, micro) = (count(&counts, "steps"), count(&counts, "micro_batches"));
    let per_step = micro / steps;
    let s = summary(&file);
    assert_eq!(s["iterations"].as_array().unwrap().len(), steps);
    for it in 1..=steps as u64 {
        let ph = phases_of(&s, it);
        let of = |name: &str| ph.iter().filter(|p| p.0 == name).count();
        assert_eq!(of("forward"), per_step, "{ph:?}");
        assert_eq!(of("backward"), per_step, "{ph:?}");
        assert_eq!(of("optimizer step"), 1, "{ph:?}");
        let numbered: Vec<u64> = ph
            .iter()
            .filter(|p| p.0 == "forward")
            .filter_map(|p| p.1)
            .collect();
        assert_eq!(numbered, (1..=per_step as u64).collect::<Vec<_>>());
    }
    let j = export(Path::new(&file));
    assert_eq!(j["memtrack"]["modules"].as_array().unwrap().len(), steps);
    phases_agree_with_op_names(&s, &op_names(&j));
}

#[test]
fn torch_func_grad_over_functional_call_has_modules_iterations_and_phases() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (counts, file) = recorded(&py, dir.path(), "func_functional_call.py", &[]);
    let (grads, forward_only) = (count(&counts, "grad_steps"), count(&counts, "forward_only"));
    let j = export(Path::new(&file));
    let names = op_names(&j);
    assert!(names.iter().any(|n| n.starts_with("Net.fc1.forward.")));
    let modules = json_out(&["modules", &file, "--format", "json", "--iteration", "all"]);
    let iterations = modules["iterations"].as_array().unwrap();
    assert_eq!(iterations.len(), grads + forward_only);
    assert!(iterations.iter().all(|it| it["modules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["fqn"] == "Net.fc1")));
    let s = summary(&file);
    assert_eq!(
        s["iterations"].as_array().unwrap().len(),
        grads + forward_only
    );
    for it in 1..=(grads + forward_only) as u64 {
        let ph = phases_of(&s, it);
        let backward = ph.iter().any(|p| p.0 == "backward");
        assert_eq!(backward, it as usize <= grads, "iteration {it}: {ph:?}");
    }
    phases_agree_with_op_names(&s, &names);
}

#[test]
fn an_exported_program_then_its_trained_source_module() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (counts, file) = recorded(&py, dir.path(), "export_then_source.py", &[]);
    let steps = count(&counts, "steps");
    let j = export(Path::new(&file));
    let names = op_names(&j);
    let s = summary(&file);
    assert_eq!(s["iterations"].as_array().unwrap().len(), steps);
    // the source module's first forward op (the exported program's module is a GraphModule)
    let first = names
        .iter()
        .position(|n| n.starts_with("Source.fc1.forward."))
        .expect("an op of Source's forward");
    let phase = s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["first_op"].as_u64().unwrap() as usize <= first
                && first < p["end_op"].as_u64().unwrap() as usize
        })
        .unwrap();
    assert_eq!(phase["phase"], "forward", "{phase}");
    phases_agree_with_op_names(&s, &names);
}

#[test]
fn a_no_grad_pipeline_of_two_top_level_modules_is_one_iteration_per_batch() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (counts, file) = recorded(&py, dir.path(), "nograd_pipeline.py", &[]);
    let batches = count(&counts, "batches");
    let j = export(Path::new(&file));
    let iterations = j["memtrack"]["modules"].as_array().unwrap();
    assert_eq!(iterations.len(), batches);
    // each pass has both top-level modules in its tables
    for it in iterations {
        let fqns: Vec<&str> = it["modules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["fqn"].as_str().unwrap())
            .collect();
        assert!(
            fqns.contains(&"Embedding") && fqns.contains(&"TransformerEncoder"),
            "{fqns:?}"
        );
    }
    // a batch's output, freed when the next is assigned, is not called retained
    assert!(
        j["memtrack"]["retained"]["ops"]
            .as_array()
            .is_none_or(|ops| ops.is_empty()),
        "{}",
        j["memtrack"]["retained"]
    );
    let s = summary(&file);
    assert_eq!(s["iterations"].as_array().unwrap().len(), batches);
}
