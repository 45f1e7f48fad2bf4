//! `record --observer compiled` against the Python dispatch mode (`--observer python`), with
//! the real torch: the same ops (names and allocated bytes, op for op), module tables and
//! peaks where the mode does not change the program; a clean fall back to the dispatch mode
//! where the observer cannot be built; which one `auto`, the default, picks. (docs/record.md,
//! "Observers".) The programs where the two see different op lists run under `auto`, the
//! compiled observer here, in tests/record_never_raises.rs and tests/record_iterations.rs.

mod common;

use std::path::Path;

use common::{example, export, python, record, script};
use serde_json::Value;

/// Record `args` with one observer in `dir`; the file as `export` JSON, with no error of the
/// agent's in it.
fn recorded(dir: &Path, py: &Path, observer: &str, args: &[&str]) -> Value {
    let j = recorded_as_it_ends(dir, py, observer, args);
    assert_eq!(
        j["memtrack"]["agent_errors"],
        serde_json::json!([]),
        "{args:?}"
    );
    j
}

/// `recorded`, whatever the agent reported of its own failures.
fn recorded_as_it_ends(dir: &Path, py: &Path, observer: &str, args: &[&str]) -> Value {
    let out = format!("{observer}.pkl");
    let (code, stderr) = record(
        dir,
        &out,
        &["--backend", "cpu", "--observer", observer],
        py,
        args,
    );
    assert_eq!(code, 0, "{args:?} under --observer {observer}: {stderr}");
    let j = export(&dir.join(&out));
    assert_eq!(j["memtrack"]["observer"], observer, "{args:?}");
    j
}

/// Both observers on one program: the same op list, bytes, modules and peak.
fn same_under_both(args: &[&str]) {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mode = recorded(dir.path(), &py, "python", args);
    let compiled = recorded(dir.path(), &py, "compiled", args);
    let ops = |j: &Value| -> Vec<(String, f64)> {
        j["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let name = o["name"].as_str().unwrap().to_string();
                (name, o["allocated_bytes"].as_f64().unwrap())
            })
            .collect()
    };
    let (a, b) = (ops(&mode), ops(&compiled));
    let first = a.iter().zip(&b).position(|(x, y)| x != y);
    assert!(
        a.len() == b.len() && first.is_none(),
        "{args:?}: {} ops under the dispatch mode, {} under the compiled observer; first \
         difference at {first:?}: {:?} / {:?}",
        a.len(),
        b.len(),
        first.map(|i| &a[i]),
        first.map(|i| &b[i]),
    );
    assert!(a.len() > 10, "{args:?}: {} ops", a.len());
    for key in [
        "modules",
        "peak",
        "marker_events",
        "iteration_starts",
        "unmeasured",
    ] {
        assert_eq!(
            mode["memtrack"][key], compiled["memtrack"][key],
            "{args:?}: {key}"
        );
    }
}

#[test]
fn same_ops_on_the_mlp_example() {
    same_under_both(&[&example("mlp_batchnorm.py"), "--steps", "2"]);
}

#[test]
fn same_ops_with_gradient_accumulation() {
    same_under_both(&[&script("grad_accumulation.py"), "--steps", "2"]);
}

#[test]
fn same_ops_on_an_lstm_cell_loop() {
    same_under_both(&[&script("lstm_cell_loop.py"), "--steps", "3", "--seq", "6"]);
}

#[test]
fn same_ops_on_a_no_grad_generation_loop() {
    same_under_both(&[&script("nograd_generation.py"), "--tokens", "6"]);
}

#[test]
fn same_ops_with_parametrizations_and_two_models() {
    same_under_both(&[&script("parametrization_naming.py"), "--steps", "2"]);
    same_under_both(&[&script("two_models.py"), "--steps-a", "2", "--steps-b", "2"]);
}

/// Selective activation checkpointing runs forward and recomputation under torch's own
/// dispatch modes; a packed LSTM under autocast.
#[test]
fn same_ops_with_selective_checkpointing_and_an_autocast_lstm() {
    same_under_both(&[&script("selective_checkpoint.py")]);
    same_under_both(&[&script("autocast_packed_lstm.py")]);
}

/// Under autocast an op with an autocast kernel (`addmm`, `bmm`) called directly, as GPT-2's
/// Conv1D does: a dispatch mode sees the casts autocast makes and the op it calls again, not
/// the op called (the compiled observer saw only that, and not the casts' copies, before).
#[test]
fn same_ops_for_ops_that_autocast_wraps() {
    same_under_both(&[&script("autocast_addmm.py")]);
}

/// Under inference mode composite ops are ops (no autograd key decomposes them first).
#[test]
fn same_ops_under_inference_mode() {
    same_under_both(&[&script("inference_mode.py")]);
}

#[test]
fn same_ops_on_sparse_csr() {
    same_under_both(&[&script("sparse_csr.py")]);
}

/// Under the program's own dispatch mode the calls that mode makes are the ops, for the
/// compiled observer as for the agent's mode below it.
#[test]
fn same_ops_under_the_programs_own_dispatch_mode() {
    same_under_both(&[&script("user_mode.py")]);
}

/// What `script ARGS` prints on stdout, recorded with the compiled observer in `dir` (run.pkl),
/// having exited 0.
fn stdout_under_the_compiled_observer(
    dir: &Path,
    py: &Path,
    script_name: &str,
    args: &[&str],
) -> String {
    stdout_under(dir, py, "compiled", script_name, args)
}

fn stdout_under(dir: &Path, py: &Path, observer: &str, script_name: &str, args: &[&str]) -> String {
    let o = common::memtrack_process()
        .current_dir(dir)
        .args(["record", "--backend", "cpu", "--observer", observer])
        .args(["-o", "run.pkl", "--"])
        .arg(py)
        .arg(script(script_name))
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A SIGINT's KeyboardInterrupt raised while the agent's per-op code runs (most of a loop of
/// small ops' Python time) reaches the program, which catches it.
#[test]
fn a_keyboard_interrupt_reaches_the_program() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let stdout = stdout_under_the_compiled_observer(dir.path(), &py, "interrupt_loop.py", &[]);
    assert_eq!(stdout, "interrupted");
    assert_eq!(
        export(&dir.path().join("run.pkl"))["memtrack"]["observer"],
        "compiled"
    );
}

/// A SIGINT's KeyboardInterrupt raised as the agent's weakref callback for a dying storage
/// starts (one dies at every op here) reaches the program: the callback is called through the
/// compiled observer's `guarded`. As a Python function, it lost about one in six (checked:
/// 2 of 12 runs under `--observer python`, which still has it).
#[test]
fn a_keyboard_interrupt_in_a_storages_death_reaches_the_program() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let delays = ["0.3", "0.45", "0.6", "0.75", "0.9", "1.05"];
    let stdout = stdout_under_the_compiled_observer(dir.path(), &py, "interrupt_dying.py", &delays);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines, ["interrupted"; 6],
        "SIGINT after each of {delays:?} s"
    );
}

/// `auto` (no `--observer`, no `--backend`) picks the compiled observer where torch sees no
/// CUDA device and is 2.9 or newer, else the dispatch mode: what the file says of its torch and
/// backend decides which it must be.
#[test]
fn auto_picks_the_compiled_observer_without_cuda_on_a_recent_torch() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "auto.pkl",
        &[],
        &py,
        &[&example("mlp_batchnorm.py"), "--steps", "1"],
    );
    assert_eq!(code, 0, "{stderr}");
    let m = &export(&dir.path().join("auto.pkl"))["memtrack"];
    let version: Vec<u32> = (m["torch_version"].as_str().unwrap().split(['.', '+']))
        .take(2)
        .map(|p| p.parse().unwrap())
        .collect();
    let expected = if version >= vec![2, 9] && m["backend"] == "cpu" {
        "compiled"
    } else {
        "python"
    };
    assert_eq!(m["observer"], expected, "{version:?} {}", m["backend"]);
}

/// Compilation's own ops (dynamo's tracing, fake tensors) are not the program's: paused.
#[test]
fn same_ops_under_torch_compile() {
    let dir = tempfile::tempdir().unwrap();
    let counters = dir.path().join("counters.json");
    same_under_both(&[&script("compiled_mlp.py"), counters.to_str().unwrap(), "2"]);
}

/// Under a dispatch mode torch sums gradients and adds attention masks out of place; without
/// one (the compiled observer) in place, as the program does: fewer bytes at those ops.
#[test]
fn the_dispatch_mode_changes_what_the_compiled_observer_sees_unchanged() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let args = [example("tiny_transformer_ckpt.py")];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mode = recorded(dir.path(), &py, "python", &args);
    let compiled = recorded(dir.path(), &py, "compiled", &args);
    let names =
        |j: &Value| -> Vec<String> { common::op_names(j).iter().map(|s| s.to_string()).collect() };
    let (a, b) = (names(&mode), names(&compiled));
    assert_eq!(a.len(), b.len());
    let in_place = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x.contains(".add.Tensor_") && y.contains(".add_.Tensor_"))
        .count();
    assert!(in_place > 0, "no op done in place only without the mode");
    assert!(a
        .iter()
        .zip(&b)
        .all(|(x, y)| x == y || x.contains(".add.Tensor_") || y.contains(".add")));
    let peak = |j: &Value| j["memtrack"]["peak"]["cpu"]["Total"].as_i64().unwrap();
    assert!(peak(&compiled) <= peak(&mode));
}

/// Without a compiler the observer cannot be built: `record` says so and records with the
/// dispatch mode; the failed build is remembered, so the next run falls back at once.
#[test]
fn falls_back_to_the_dispatch_mode_when_it_cannot_be_built() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    for run in 0..2 {
        let o = common::memtrack_process()
            .current_dir(dir.path())
            .env("MEMTRACK_OBSERVER_CACHE", &cache)
            .env("CXX", dir.path().join("no-such-compiler"))
            .args(["record", "--backend", "cpu", "--observer", "compiled"])
            .args(["-o", "run.pkl", "--"])
            .arg(&py)
            .args([&example("mlp_batchnorm.py"), "--steps", "1"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "run {run}: {stderr}");
        assert!(
            stderr.contains("the compiled observer cannot be used")
                && stderr.contains("recording with the Python observer"),
            "run {run}: {stderr}"
        );
        // the first run tried to build it; the second knew it had failed
        assert_eq!(
            stderr.contains("building the compiled observer"),
            run == 0,
            "{stderr}"
        );
        let j = export(&dir.path().join("run.pkl"));
        assert_eq!(j["memtrack"]["observer"], "python");
        assert!(j["op_count"].as_u64().unwrap() > 100);
    }
    let logs: Vec<_> = walk(&cache)
        .into_iter()
        .filter(|p| p.ends_with("failed.log"))
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let log = std::fs::read_to_string(&logs[0]).unwrap();
    assert!(log.contains("no-such-compiler"), "{log}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The `gc` line of tests/py/gc_generations.py: (collections by generation, objects the
/// collector tracks left per step).
fn gc_counts(stdout: &str) -> (Vec<u64>, f64) {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("gc "))
        .unwrap_or_else(|| panic!("no gc line in {stdout:?}"));
    let j: Value = serde_json::from_str(line).unwrap();
    let gens = j["collections"].as_array().unwrap();
    let gens = gens.iter().map(|g| g.as_u64().unwrap()).collect();
    (gens, j["left_per_step"].as_f64().unwrap())
}

/// The program alone's collections by generation and objects left a step, on
/// tests/py/gc_generations.py.
fn gc_counts_alone(py: &Path) -> (Vec<u64>, f64) {
    let alone = std::process::Command::new(py)
        .arg(script("gc_generations.py"))
        .output()
        .unwrap();
    assert!(
        alone.status.success(),
        "{}",
        String::from_utf8_lossy(&alone.stderr)
    );
    gc_counts(&String::from_utf8_lossy(&alone.stdout))
}

/// A loop of small modules under the compiled observer (`auto`'s choice here) leaves no
/// garbage behind and sets off no full collection the program alone does not have: the module
/// tracker's hooks on autograd nodes hold them weakly (observer.cpp, weak_nodes). Holding them
/// in the hook left 360 objects a step in reference cycles, and 2 full collections (a
/// 100-200 ms stall each) in 400 steps the program alone never has.
///
/// The same loop under the python observer leaves no garbage behind either: where the nodes
/// cannot be held weakly, the hook on a module's inputs' nodes hands them over to the hook on
/// its outputs' nodes, whose graph holds them anyway (gradhooks.on_grads). Held by the hook
/// on the nodes themselves, they left about 390 objects a step in reference cycles. (Full
/// collections are not compared there: the observer's Python tensors, storages and weak
/// references alive within a step still set one off every few hundred steps, docs/record.md,
/// Known limits.)
#[test]
fn a_loop_of_small_modules_leaves_no_garbage_nor_full_collection() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (alone_gens, alone_left) = gc_counts_alone(&py);
    let stdout = stdout_under_the_compiled_observer(dir.path(), &py, "gc_generations.py", &[]);
    let (gens, left) = gc_counts(&stdout);
    assert!(
        left <= alone_left + 1.0,
        "compiled: {left} objects left a step (alone {alone_left})"
    );
    assert!(
        gens[2] <= alone_gens[2],
        "compiled: {gens:?} collections by generation, alone {alone_gens:?}"
    );
    let stdout = stdout_under(dir.path(), &py, "python", "gc_generations.py", &[]);
    let (_, left) = gc_counts(&stdout);
    assert!(
        left <= alone_left + 1.0,
        "python: {left} objects left a step (alone {alone_left})"
    );
}

/// On the CPU the compiled observer accounts every op of a loop of small ops (plain dense
/// outputs, one or several) in C: no call of the agent's Python per op, and none per storage
/// death. The Python entry per op and death callback cost about 0.5x the loop's own time;
/// before, 5 steps of tests/py/python_per_op.py made 2,040 calls of `observed` and 1,140 of
/// `_on_del` for 2,480 ops. Nor does the module tracker run Python for a submodule's call
/// (module_path.h), its first in the iteration included: its per-call methods ran 4 times a
/// module call, 200 times in the 5 steps (10 module calls each); now 30: the top-level
/// model's 4, the first backward hook of a backward (which queues the end-of-backward
/// callback) and the end of the cell's backward, called by that callback (its first input
/// needs no gradient). The agent's functions ran about 18,000 times in all; now about 1,000
/// (210 a step, for 520 ops: bounded by the steps' modules and parameters, not their ops).
/// The observer's own counts (`native.paths()`, kept in C, which bench/record_overhead.py
/// prints beside its figures) say the same: every op of those steps in the file was
/// accounted in C, and every submodule call done there.
#[test]
fn the_compiled_observer_runs_no_python_per_op_nor_per_submodule_call_on_the_cpu() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let stdout = stdout_under_the_compiled_observer(dir.path(), &py, "python_per_op.py", &[]);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("calls "))
        .unwrap_or_else(|| panic!("no calls line in {stdout:?}"));
    let calls: Value = serde_json::from_str(line).unwrap();
    let n = |k: &str| calls[k].as_u64().unwrap();
    assert!(n("ops") > 2000, "{calls}");
    assert_eq!((n("observed"), n("on_del")), (0, 0), "{calls}");
    assert!(n("module_calls") <= 30, "{calls}");
    // what Python the agent still runs is bounded a step, not per op: about 210 calls a step
    // for 520 ops (the optimizer's state, parts.parts and ops.track_as, about 80; the global
    // module hooks' two Python wrappers a module call, 20; the top-level model's tracker
    // calls and the writers of their records)
    assert!(n("agent") * 2 <= n("ops"), "{calls}");
    // and the file has every one of those ops
    let j = export(&dir.path().join("run.pkl"));
    let ops = j["ops"].as_array().unwrap();
    assert!(
        ops.len() as u64 >= n("ops"),
        "{} ops recorded, {calls}",
        ops.len()
    );

    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("paths "))
        .unwrap_or_else(|| panic!("no paths line in {stdout:?}"));
    let paths: Value = serde_json::from_str(line).unwrap();
    let p = |k: &str| paths[k].as_u64().unwrap_or_else(|| panic!("{k}: {paths}"));
    assert_eq!(paths["observer"], "compiled", "{paths}");
    assert_eq!(
        (
            &paths["fast_path"],
            &paths["module_path"],
            &paths["threaded"]
        ),
        (&Value::Bool(true), &Value::Bool(true), &Value::Bool(false)),
        "{paths}"
    );
    // the five counted steps are the last five iterations (2 warm-up steps, 1 counted by the
    // program's own mode); their ops but record_function's (sampled from Python) were all
    // accounted in C
    let starts = j["memtrack"]["iteration_starts"].as_array().unwrap();
    let from = starts[starts.len() - 5].as_u64().unwrap() as usize;
    let in_c = ops[from..]
        .iter()
        .filter(|o| !o["name"].as_str().unwrap().contains("_record_function_"))
        .count() as u64;
    assert_eq!((p("ops_in_c"), p("ops_to_python")), (in_c, 0), "{paths}");
    assert_eq!(p("records_to_python"), 0, "{paths}");
    assert!(
        p("records_in_place") >= in_c && p("deaths_in_c") > 0,
        "{paths}"
    );
    // 9 submodule calls a step (the cell's 8, the norm) in C, the model's through Python
    assert_eq!(
        (p("module_pre_in_c"), p("module_pre_to_python")),
        (45, 5),
        "{paths}"
    );
    assert_eq!(
        (p("module_post_in_c"), p("module_post_to_python")),
        (45, 5),
        "{paths}"
    );
}
