//! `memtrack record` when the program ends badly: nothing received is lost, the file says how
//! it ended, and `record` exits with the program's code (128 + signal when killed).

mod common;

use std::time::{Duration, Instant};

use common::{exit_code, export, memtrack_process as memtrack, python, record, script};

#[test]
fn sigkill_mid_run_keeps_the_ops_before_it() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "kill.pkl",
        &[],
        &py,
        &[&script("ending.py"), "kill"],
    );
    assert_eq!(code, 137, "{stderr}");
    let j = export(&dir.path().join("kill.pkl"));
    let exit = &j["memtrack"]["exit"];
    assert_eq!(exit["signal"], 9);
    assert_eq!(exit["ended"], "disconnected");
    // two whole training steps were shipped before the kill
    let iterations = j["memtrack"]["modules"].as_array().unwrap();
    assert!(iterations.len() >= 2, "{} iterations", iterations.len());
    let ops = j["op_count"].as_u64().unwrap();
    let second_backward = j["memtrack"]["marker_events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["name"] == "fw_bw_boundary")
        .nth(1)
        .expect("the second iteration's fw_bw_boundary")["op_index"]
        .as_u64()
        .unwrap();
    assert!(ops > second_backward + 50, "{ops} ops");
    assert!(!dir.path().read_dir().unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains("journal")));
}

#[test]
fn an_exception_is_recorded_and_exit_code_passed_through() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, _) = record(
        dir.path(),
        "raise.pkl",
        &[],
        &py,
        &[&script("ending.py"), "raise"],
    );
    assert_eq!(code, 1);
    let j = export(&dir.path().join("raise.pkl"));
    let exit = &j["memtrack"]["exit"];
    assert_eq!(exit["code"], 1);
    assert_eq!(exit["ended"], "exception");
    assert!(exit["exception"]
        .as_str()
        .unwrap()
        .contains("RuntimeError: boom at step 1"));
    assert!(j["op_count"].as_u64().unwrap() > 100);
}

#[test]
fn interrupt_goes_to_the_program_and_the_file_is_written() {
    let Some(j) = signal_memtrack(libc::SIGINT, 130) else {
        return;
    };
    let exit = &j["memtrack"]["exit"];
    assert_eq!(exit["signal"], 2);
    assert!(exit["exception"]
        .as_str()
        .unwrap_or("")
        .contains("KeyboardInterrupt"));
}

#[test]
fn sigterm_goes_to_the_program_which_ships_its_ops_first() {
    let Some(j) = signal_memtrack(libc::SIGTERM, 143) else {
        return;
    };
    let exit = &j["memtrack"]["exit"];
    assert_eq!(exit["signal"], 15);
    assert_eq!(exit["ended"], "signal");
}

/// Record a training loop, send `sig` to memtrack (as `kill -INT memtrack` would) once a step
/// is done, expect `code`; the file's JSON.
fn signal_memtrack(sig: libc::c_int, code: i32) -> Option<serde_json::Value> {
    let py = python()?;
    let dir = tempfile::tempdir().unwrap();
    let mut child = memtrack()
        .current_dir(dir.path())
        .args(["record", "-o", "loop.pkl", "--"])
        .arg(&py)
        .args([&script("ending.py"), "loop"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // wait for "ready": one step done
    let mut out = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let start = Instant::now();
    while !String::from_utf8_lossy(&seen).contains("ready") {
        let mut b = [0u8; 256];
        let n = std::io::Read::read(&mut out, &mut b).unwrap();
        assert!(n > 0, "the program ended early");
        seen.extend_from_slice(&b[..n]);
        assert!(start.elapsed() < Duration::from_secs(120));
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the memtrack process this test started
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
    let status = child.wait().unwrap();
    assert_eq!(exit_code(status), code);
    let j = export(&dir.path().join("loop.pkl"));
    assert!(!j["memtrack"]["modules"].as_array().unwrap().is_empty());
    Some(j)
}

#[test]
fn a_program_that_is_not_python_gets_its_code_and_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let o = memtrack()
        .current_dir(dir.path())
        .args(["record", "-o", "x.pkl", "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("nothing recorded"), "{err}");
    assert!(!dir.path().join("x.pkl").exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no journal left"
    );

    let o = memtrack()
        .args(["record", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
}

#[test]
fn a_python_without_torch_is_named() {
    // any interpreter on PATH that lacks torch will do; skip where every one has it
    let Some(py) = ["python3", "python"].into_iter().find(|p| {
        std::process::Command::new(p)
            .args(["-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"])
            .status()
            .is_ok_and(|s| s.success())
    }) else {
        eprintln!("SKIPPED: every python on PATH has torch");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let o = memtrack()
        .current_dir(dir.path())
        .args(["record", "-o", "x.pkl", "--", py, "-c", "import torch"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot import torch"), "{err}");
}
