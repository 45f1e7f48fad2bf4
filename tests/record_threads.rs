//! Threads: every thread the program starts while recording is recorded, with its
//! thread in the file (`memtrack.threads`, `thread_runs`); iterations are the main thread's;
//! a thread that could not be recorded is named in the file and in `summary`. Each program
//! runs the same calls in the main thread with `--inline`: the op counts must match.

mod common;

use std::path::Path;

use common::{export, json_out, memtrack_process, python, script};
use serde_json::Value;

/// Record `tests/py/NAME ARGS` on the CPU backend with `observer`: the exported file.
fn recorded(py: &Path, dir: &Path, name: &str, args: &[&str], observer: &str) -> (Value, String) {
    let out = dir.join(format!("{name}-{observer}-{}.pkl", args.join("_")));
    let o = memtrack_process()
        .args(["record", "--backend", "cpu", "--observer", observer, "-o"])
        .arg(&out)
        .arg("--")
        .arg(py)
        .arg(script(name))
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{name}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (export(&out), out.display().to_string())
}

fn ops(j: &Value) -> usize {
    j["ops"].as_array().unwrap().len()
}

fn threads(j: &Value) -> Vec<Value> {
    j["memtrack"]["threads"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn summary(file: &str) -> Value {
    json_out(&["summary", file, "--format", "json"])
}

/// The thread runs cover every op once, in order, and agree with each thread's op count.
fn runs_agree(j: &Value) {
    let n = ops(j) as i64;
    let runs: Vec<(i64, i64)> = j["memtrack"]["thread_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap()))
        .collect();
    assert_eq!(runs.first().map(|r| r.0), Some(0));
    let mut per = std::collections::BTreeMap::<i64, i64>::new();
    for (k, &(first, t)) in runs.iter().enumerate() {
        let end = runs.get(k + 1).map_or(n, |r| r.0);
        assert!(end > first, "runs in order: {runs:?}");
        *per.entry(t).or_default() += end - first;
    }
    for t in threads(j) {
        let id = t["id"].as_i64().unwrap();
        assert_eq!(
            per.get(&id).copied().unwrap_or(0),
            t["ops"].as_i64().unwrap(),
            "thread {t}"
        );
    }
}

/// No module's peak is above the run's.
fn module_peaks_within_run_peak(file: &str) {
    let s = summary(file);
    let run_peak = s["peaks"][0]["bytes"].as_f64().unwrap();
    let mods = s["module_peaks"]["modules"].as_array().unwrap();
    assert!(!mods.is_empty());
    for m in mods {
        for k in ["peak_forward_bytes", "peak_backward_bytes"] {
            if let Some(b) = m[k].as_f64() {
                assert!(b <= run_peak, "{m}: above the run's peak {run_peak}");
            }
        }
    }
}

#[test]
fn two_threads_serving_two_models_are_recorded_with_their_calls_and_no_iteration() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    for observer in ["python", "compiled"] {
        let (inline, _) = recorded(
            &py,
            dir.path(),
            "threads_serving.py",
            &["--inline"],
            observer,
        );
        let (j, file) = recorded(&py, dir.path(), "threads_serving.py", &[], observer);
        assert_eq!(
            ops(&j),
            ops(&inline),
            "{observer}: the same ops as in one thread"
        );
        let th = threads(&j);
        let names: Vec<&str> = th.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["MainThread", "serve-0", "serve-1"], "{observer}");
        for t in &th[1..] {
            assert_eq!(t["forward_calls"], 20, "{observer}: {t}");
            assert!(t["ops"].as_i64().unwrap() >= 40, "{observer}: {t}");
        }
        assert_eq!(th[0]["forward_calls"], 0);
        runs_agree(&j);
        // the main thread ran no module: no iteration and no marker
        assert_eq!(j["memtrack"]["iteration_starts"], serde_json::json!([]));
        assert_eq!(j["memtrack"]["marker_events"], serde_json::json!([]));
        let s = summary(&file);
        let lines = s["threads"].as_array().unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = lines[0].as_str().unwrap();
        assert!(
            line.starts_with("2 other threads ran")
                && line.contains("and 40 top-level forward calls"),
            "{line}"
        );
        assert!(s["iterations"].as_array().unwrap().is_empty());
        // no iteration of the main thread's: the table is the other threads' calls
        assert_eq!(
            s["module_peaks"]["chosen"],
            "the other threads' calls, outside any iteration"
        );
        let tables = common::stdout(&["modules", &file]);
        assert!(
            tables.starts_with("== The other threads' calls, outside any iteration"),
            "{tables}"
        );
        module_peaks_within_run_peak(&file);
        // op names carry each thread's own module
        let names = common::op_names(&j);
        assert!(names
            .iter()
            .any(|n| n.starts_with("Ranker.fc.forward.addmm")));
        assert!(names
            .iter()
            .any(|n| n.starts_with("Server.fc2.forward.addmm")));
    }
}

/// A thread that ends leaves nothing of the agent's for its C++ destructors: left on its
/// dispatch stack, the mode is dropped after join() returns, and when the interpreter is
/// finalizing by then the program aborts at exit (std::terminate, SIGABRT).
#[test]
fn an_ending_thread_lets_go_of_the_observer_before_its_destructors_run() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    for observer in ["python", "compiled"] {
        let out = dir.path().join(format!("ends-{observer}.pkl"));
        let o = memtrack_process()
            .args(["record", "--backend", "cpu", "--observer", observer, "-o"])
            .arg(&out)
            .arg("--")
            .arg(&py)
            .arg(script("thread_ends_at_exit.py"))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{observer}: {stdout}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            stdout.contains("modes dropped by thread destructors: 0"),
            "{observer}: {stdout}"
        );
        let th = threads(&export(&out));
        let names: Vec<&str> = th.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["MainThread", "ends-at-exit"], "{observer}");
    }
}

#[test]
fn many_short_threads_running_forward_and_backward_are_all_recorded() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (inline, _) = recorded(
        &py,
        dir.path(),
        "threads_many.py",
        &["--threads", "120", "--inline"],
        "compiled",
    );
    for at_once in ["1", "4"] {
        let (j, file) = recorded(
            &py,
            dir.path(),
            "threads_many.py",
            &["--threads", "120", "--at-once", at_once],
            "compiled",
        );
        assert_eq!(ops(&j), ops(&inline), "at once {at_once}");
        let th = threads(&j);
        assert_eq!(th.len(), 121, "the main thread and 120 others");
        assert!(th[1..].iter().all(|t| t["forward_calls"] == 1));
        runs_agree(&j);
        assert_eq!(j["memtrack"]["iteration_starts"], serde_json::json!([]));
        // backward ops are named after the thread's own modules, none under Global
        let names = common::op_names(&j);
        let backward = names.iter().filter(|n| n.contains(".backward.")).count();
        let inline_backward = common::op_names(&inline)
            .iter()
            .filter(|n| n.contains(".backward."))
            .count();
        assert_eq!(backward, inline_backward);
        let global = |names: &[&str]| names.iter().filter(|n| n.starts_with("Global.")).count();
        assert_eq!(global(&names), global(&common::op_names(&inline)));
        module_peaks_within_run_peak(&file);
    }
}

#[test]
fn a_thread_pool_serving_while_the_main_thread_trains_keeps_the_training_iterations() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (inline, _) = recorded(&py, dir.path(), "threads_pool.py", &["--inline"], "python");
    let (j, file) = recorded(&py, dir.path(), "threads_pool.py", &[], "python");
    assert_eq!(ops(&j), ops(&inline));
    let th = threads(&j);
    let pool: Vec<&Value> = th
        .iter()
        .filter(|t| {
            t["name"]
                .as_str()
                .unwrap()
                .starts_with("ThreadPoolExecutor")
        })
        .collect();
    assert!(!pool.is_empty() && pool.len() <= 4, "{th:?}");
    let calls: i64 = pool
        .iter()
        .map(|t| t["forward_calls"].as_i64().unwrap())
        .sum();
    assert_eq!(calls, 32, "one top-level call per request");
    runs_agree(&j);
    // iterations: the 5 training steps only, each with its backward
    assert_eq!(
        j["memtrack"]["iteration_starts"].as_array().unwrap().len(),
        5
    );
    let s = summary(&file);
    assert_eq!(s["iterations"].as_array().unwrap().len(), 5);
    module_peaks_within_run_peak(&file);
}

#[test]
fn a_thread_running_before_an_in_process_recording_is_named_as_not_recorded() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("before.pkl");
    let o = std::process::Command::new(&py)
        .env("PYTHONPATH", common::root().join("python"))
        .env("MEMTRACK_BINARY", env!("CARGO_BIN_EXE_memtrack"))
        .arg(script("threads_before.py"))
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = export(&out);
    assert_eq!(
        j["memtrack"]["threads_unrecorded"],
        serde_json::json!(["early"])
    );
    let th = threads(&j);
    assert_eq!(th.len(), 2, "{th:?}");
    assert_eq!(th[1]["name"], "late");
    assert_eq!(th[1]["forward_calls"], 10);
    // the early thread's module calls are not taken for the main thread's iterations
    assert_eq!(j["memtrack"]["iteration_starts"], serde_json::json!([]));
    assert_eq!(ops(&j) as i64, th[1]["ops"].as_i64().unwrap());
    let s = summary(out.to_str().unwrap());
    let lines: Vec<&str> = s["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(
        lines[1],
        "1 thread was already running when recording began (early): its ops are not recorded"
    );
}

/// One naming rule whatever the thread (issue 62, item 8): two `Sequential`s the script made as
/// `embedder` and `classifier`, first called in worker threads through a function whose
/// parameter is `model`, are named as the script named them, in every thread; a thread that
/// ran no op is not listed.
#[test]
fn models_are_named_where_the_program_made_them_whatever_the_thread() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (j, file) = recorded(&py, dir.path(), "thread_names.py", &[], "compiled");
    let names = common::op_names(&j);
    for expected in [
        "embedder.0.forward.addmm",
        "classifier.0.forward.addmm",
        "classifier.0.backward.mm",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(expected)),
            "no {expected}* in {names:?}"
        );
    }
    for n in &names {
        assert!(
            !n.starts_with("Sequential") && !n.starts_with("model."),
            "{n}"
        );
    }
    let s = summary(&file);
    let line = s["threads"][0].as_str().unwrap();
    assert!(line.starts_with("2 other threads ran"), "{line}");
    assert!(!line.contains("logger"), "{line}");
}
